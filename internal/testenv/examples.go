package testenv

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a server that a package's Example functions need: its name and
// how to tell whether it answers.
type Server struct {
	name  string
	probe func(ctx context.Context) error
}

// NewServer returns the Server called name, which answers when probe
// returns nil within its context. Packages that know a server testenv does
// not (internal/pgtest's PostgreSQL) make theirs with it.
func NewServer(name string, probe func(ctx context.Context) error) Server {
	return Server{name: name, probe: probe}
}

var (
	// NeedRedis is the Redis at RedisURL.
	NeedRedis = NewServer("Redis", func(ctx context.Context) error { return probeRedis(ctx, RedisURL()) })
	// NeedSQS is the SQS server at TEST_SQS_ENDPOINT.
	NeedSQS = NewServer("SQS", func(ctx context.Context) error { return probeSQS(ctx, os.Getenv("TEST_SQS_ENDPOINT")) })
)

// probeTimeout bounds the check of each server RunExamples needs.
const probeTimeout = 2 * time.Second

// skipExamples is the test.skip pattern that skips every Example function.
const skipExamples = "^Example"

func (s Server) String() string {
	if s.name == "" {
		return "Server{}"
	}
	return s.name
}

// RunExamples runs m (a package's tests and examples). When a server that
// the package's Example functions need does not answer, it prints which one
// and why to stderr and skips every Example (via the test.skip flag, "^Example"),
// so the tests still run; otherwise the examples run and their // Output: is checked.
func RunExamples(m *testing.M, needs ...Server) int {
	if !flag.Parsed() {
		flag.Parse()
	}
	if err := unavailable(needs...); err != nil {
		fmt.Fprintf(os.Stderr, "testenv: skipping the Example functions: %v\n", err)
		if err := skipAllExamples(flag.CommandLine); err != nil {
			fmt.Fprintf(os.Stderr, "testenv: %v\n", err)
			return 1
		}
	}
	return m.Run()
}

// unavailable checks every server in needs at once, each within
// probeTimeout, and returns why those that do not answer are missing, or nil.
func unavailable(needs ...Server) error {
	errs := make([]error, len(needs))
	var wg sync.WaitGroup
	for i, s := range needs {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
			defer cancel()
			errs[i] = s.check(ctx)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// check returns why s does not answer, or nil when it does.
func (s Server) check(ctx context.Context) error {
	if s.probe == nil {
		return fmt.Errorf("%v: unknown server", s)
	}
	return s.probe(ctx)
}

func probeRedis(ctx context.Context, rawURL string) error {
	opt, err := redis.ParseURL(rawURL)
	if err != nil {
		return fmt.Errorf("Redis: TEST_REDIS_URL: %w", err)
	}
	opt.ContextTimeoutEnabled = true // bounded by ctx, not by go-redis's own timeouts
	opt.MaxRetries = -1              // one PING
	opt.DialerRetries = 1            // one dial
	client := redis.NewClient(opt)
	defer func() { _ = client.Close() }()
	if err := client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("Redis at %s does not answer: %w", rawURL, err)
	}
	return nil
}

func probeSQS(ctx context.Context, endpoint string) error {
	if endpoint == "" {
		return errors.New("SQS: TEST_SQS_ENDPOINT is not set (scripts/test.sh starts a server and sets it)")
	}
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return fmt.Errorf("SQS: TEST_SQS_ENDPOINT %q is not a URL with a host", endpoint)
	}
	addr := u.Host
	if u.Port() == "" {
		port := "80"
		if u.Scheme == "https" {
			port = "443"
		}
		addr = net.JoinHostPort(u.Hostname(), port)
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("SQS at %s does not answer: %w", endpoint, err)
	}
	return conn.Close()
}

// skipAllExamples adds skipExamples to the test.skip flag of fs, as an
// alternative to the pattern it already holds.
func skipAllExamples(fs *flag.FlagSet) error {
	f := fs.Lookup("test.skip")
	if f == nil {
		return errors.New("no test.skip flag: RunExamples must be called from TestMain")
	}
	pattern := skipExamples
	if old := f.Value.String(); old != "" {
		pattern = old + "|" + pattern
	}
	return fs.Set("test.skip", pattern)
}
