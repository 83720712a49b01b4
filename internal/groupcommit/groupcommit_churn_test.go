package groupcommit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/internal/storecall"
)

// Callers that leave by cancellation or timeout while the lead is handed
// on: every call is answered exactly once, with its own value or an error,
// and the group commit ends idle, with one round trip in flight at a time or
// more.
func TestGroupCommitChurn(t *testing.T) {
	for _, slots := range []int{1, RoundTrips} {
		t.Run(fmt.Sprint("slots=", slots), func(t *testing.T) { churn(t, slots) })
	}
}

func churn(t *testing.T, slots int) {
	var inFlight, sending, most atomic.Int32
	c := &Group[int, int]{timeout: 3 * time.Millisecond, slots: slots,
		one: func(ctx context.Context, v int) (int, error) {
			inFlight.Add(1)
			defer inFlight.Add(-1)
			time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
			return v * 2, nil
		},
		send: func(ctx context.Context, in []int) ([]int, []error) {
			inFlight.Add(1)
			defer inFlight.Add(-1)
			n := sending.Add(1)
			defer sending.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(time.Duration(rand.IntN(6000)) * time.Microsecond)
			return double(ctx, in)
		}}
	var wg sync.WaitGroup
	var ok, canceled, stuck atomic.Int64
	for i := range 3000 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rand.IntN(4000))*time.Microsecond)
			defer cancel()
			v, err := c.Do(ctx, i)
			switch {
			case err == nil:
				require.Equal(t, 2*i, v)
				ok.Add(1)
			case errors.Is(err, context.DeadlineExceeded):
				canceled.Add(1)
			case errors.Is(err, storecall.ErrStuck):
				stuck.Add(1)
			default:
				t.Errorf("unexpected %v", err)
			}
		})
		if i%50 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	wg.Wait()
	t.Logf("ok %d canceled %d stuck %d", ok.Load(), canceled.Load(), stuck.Load())
	c.mu.Lock()
	defer c.mu.Unlock()
	require.Zero(t, c.inFlight)
	require.Empty(t, c.queue)
	require.LessOrEqual(t, int(most.Load()), slots, "shared round trips in flight at once")
}
