package core_test

import (
	"context"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/memstore"
)

// pastDeadline is a context whose deadline has passed by the clock while
// its timer has not fired yet: Err is still nil. A store client that sets
// its socket's deadline from the context (go-redis with
// ContextTimeoutEnabled) answers with an i/o timeout in that instant.
type pastDeadline struct{ context.Context }

func (pastDeadline) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }

// socketTimeout is a memstore whose claims fail as a socket deadline does.
type socketTimeout struct{ *memstore.Store }

func (socketTimeout) Claim(context.Context, driver.ClaimRequest) (driver.ClaimReply, error) {
	return driver.ClaimReply{}, &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
}

// A claim that times out because the caller's own deadline passed is the
// caller's cancellation, not an outage: Canceled, and the job does not run,
// not even with FailOpen; Enqueue publishes nothing.
func TestTimeoutAtTheCallersDeadlineIsCanceled(t *testing.T) {
	for _, failOpen := range []bool{false, true} {
		g, err := core.New(socketTimeout{memstore.New()}, &core.Config{FailOpen: failOpen})
		require.NoError(t, err)
		ctx := pastDeadline{context.Background()}
		ran := false
		out, err := g.Do(ctx, "k", func(context.Context) error { ran = true; return nil })
		require.ErrorIs(t, err, context.DeadlineExceeded, "FailOpen %v", failOpen)
		require.NotErrorIs(t, err, core.ErrStoreUnavailable)
		require.Equal(t, core.Canceled, out, "FailOpen %v", failOpen)
		require.False(t, ran, "FailOpen %v", failOpen)

		published := false
		ok, err := g.Enqueue(ctx, "k", time.Minute, func(context.Context) error { published = true; return nil })
		require.ErrorIs(t, err, context.DeadlineExceeded, "FailOpen %v", failOpen)
		require.False(t, ok)
		require.False(t, published, "FailOpen %v", failOpen)
	}
}
