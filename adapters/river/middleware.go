package riveronce

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/jobonce/jobonce/core"
)

// middleware is both a worker middleware (the guard) and a job insert
// middleware (recording Keyer keys in metadata).
type middleware struct {
	river.MiddlewareDefaults
	r *runner
}

var (
	_ rivertype.WorkerMiddleware    = (*middleware)(nil)
	_ rivertype.JobInsertMiddleware = (*middleware)(nil)
)

// NewMiddleware returns a River middleware that runs every job of a client
// at most once per key. Put it in river.Config.Middleware. Keys and
// outcomes are as for Wrap. A job whose worker is registered with Wrap is
// left to Wrap. The value is also a job insert middleware: it records a
// Keyer's key (MetadataKey) and a periodic job's occurrence in the metadata
// of the jobs its client inserts. It returns an error when g is nil.
func NewMiddleware(g *core.Guard, cfg *Config) (rivertype.WorkerMiddleware, error) {
	r, err := newRunner(g, cfg, "NewMiddleware")
	if err != nil {
		return nil, err
	}
	return &middleware{r: r}, nil
}

// MustMiddleware is NewMiddleware for a river.Config literal. It panics
// with NewMiddleware's error.
func MustMiddleware(g *core.Guard, cfg *Config) rivertype.WorkerMiddleware {
	return must(NewMiddleware(g, cfg))
}

// Work implements rivertype.WorkerMiddleware. A job whose worker is a Wrap
// or WrapTx is left to it: the wrapper claims or records the key its Config
// and the decoded args give.
func (m *middleware) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	if wrappedJob(ctx, job) {
		return doInner(ctx)
	}
	return m.r.run(ctx, job, nil, doInner)
}

// InsertMany implements rivertype.JobInsertMiddleware: it records the keys of
// args that implement Keyer in their jobs' metadata, and the occurrence of
// each job River's periodic job enqueuer inserts.
func (m *middleware) InsertMany(ctx context.Context, params []*rivertype.JobInsertParams,
	doInner func(context.Context) ([]*rivertype.JobInsertResult, error),
) ([]*rivertype.JobInsertResult, error) {
	for _, p := range params {
		md, err := recordOccurrence(p)
		if err == nil && m.r.cfg.Key == nil {
			if k, ok := p.Args.(Keyer); ok {
				md, err = withMetadata(md, MetadataKey, k.OnceKey())
			}
		}
		if err != nil {
			return nil, fmt.Errorf("jobonce: riveronce: job of kind %q: %w", p.Kind, err)
		}
		p.Metadata = md
	}
	return doInner(ctx)
}

// withMetadata returns metadata with field set to value.
func withMetadata(metadata []byte, field, value string) ([]byte, error) {
	fields := map[string]json.RawMessage{}
	if len(metadata) > 0 {
		if err := json.Unmarshal(metadata, &fields); err != nil {
			return nil, fmt.Errorf("metadata is not a JSON object: %w", err)
		}
	}
	v, err := json.Marshal(value)
	if err != nil {
		return nil, err
	}
	fields[field] = v
	return json.Marshal(fields)
}
