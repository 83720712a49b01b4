package storetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
)

// fenceRefusesAZombie: a job whose lease lapsed while it stalled has a
// smaller fence (core.Fence) than the copy that took the job over, so its
// late write to a fenced store changes nothing.
func fenceRefusesAZombie(t *testing.T, s *suite) {
	const lease = 100 * time.Millisecond
	g := s.guard(s.store, core.Config{Lease: lease, DisableHeartbeat: true})
	ctx := ctx(t)
	down := newFencedEffects()

	fenceOf := func(ctx context.Context) int64 {
		fence, ok := core.Fence(ctx)
		require.True(t, ok, "a job under a claim has a fence")
		return fence
	}
	// A zombie: stalls past its lease, then writes after the takeover.
	zombieFence := make(chan int64, 1)
	resume := make(chan struct{})
	zombieWrote := make(chan bool, 1)
	key, _ := startHolder(t, ctx, g, "fenced-zombie", func(ctx context.Context) error {
		fence := fenceOf(ctx)
		zombieFence <- fence
		<-resume // stalled past its lease; then its in-flight write lands
		zombieWrote <- down.write("account-7", fence, "zombie")
		return nil
	})
	zombie := <-zombieFence // sent before the holder blocks
	var takeover int64
	require.Eventually(t, func() bool {
		out, _ := g.Do(ctx, key, func(ctx context.Context) error {
			takeover = fenceOf(ctx)
			require.True(t, down.write("account-7", takeover, "takeover"))
			return nil
		})
		return out == core.Ran
	}, 10*time.Second, 10*time.Millisecond)
	close(resume)
	require.Greater(t, takeover, zombie, "the copy that took over has the larger fence")
	require.False(t, <-zombieWrote, "the zombie's late write is refused")
	require.Equal(t, "takeover", down.value["account-7"])
}

// duplicateReportsItsLag: a duplicate arriving a while after its first copy
// reports that lag (from the done marker's remaining retention).
func duplicateReportsItsLag(t *testing.T, s *suite) {
	var mu sync.Mutex
	var events []core.Event
	g := s.guard(s.store, core.Config{Retention: time.Hour, Observer: func(_ context.Context, e core.Event) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, e)
	}})
	ctx := ctx(t)
	written := time.Now()
	_, err := g.Do(ctx, "lagging", func(context.Context) error { return nil })
	require.NoError(t, err)
	time.Sleep(150 * time.Millisecond) // the redelivery's delay, not a synchronisation
	out, err := g.Do(ctx, "lagging", func(context.Context) error { return errors.New("must not run") })
	require.NoError(t, err)
	require.Equal(t, core.Duplicate, out)
	mu.Lock()
	defer mu.Unlock()
	dup := events[len(events)-1]
	require.Equal(t, core.Duplicate, dup.Outcome)
	require.GreaterOrEqual(t, dup.Lag, 100*time.Millisecond, "the lag since the first copy's marker")
	require.LessOrEqual(t, dup.Lag, time.Since(written)+time.Second, "clock granularity aside, no more than the time elapsed")
}
