package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/memstore"
)

// hungRenewal is a memstore whose renewals never answer before their
// context ends.
type hungRenewal struct{ *memstore.Store }

func (hungRenewal) Extend(ctx context.Context, _ string, _ driver.Token, _ time.Duration) error {
	<-ctx.Done()
	return ctx.Err()
}

// A job whose renewal hangs is told to stop while the store still holds its
// claim (a margin before the lease runs out), so a copy that claims the key
// the moment the store lets the lease lapse never starts beside it, however
// late the expiry timer fires on a loaded machine.
func TestJobIsToldToStopBeforeItsLeaseLapses(t *testing.T) {
	const lease = time.Second
	s := hungRenewal{memstore.New()}
	g, err := core.New(s, &core.Config{Lease: lease, StoreTimeout: 2 * lease, PlainKeys: true})
	require.NoError(t, err)
	var probe driver.ClaimReply
	out, err := g.Do(context.Background(), "k", func(ctx context.Context) error {
		<-ctx.Done()
		// The store is asked at once who holds the key.
		probe, err = s.Claim(context.Background(), driver.ClaimRequest{Key: "jobonce:k", Token: driver.NewToken(), Lease: lease})
		require.NoError(t, err)
		return context.Cause(ctx)
	})
	require.ErrorIs(t, err, core.ErrLeaseLost)
	require.Equal(t, core.Failed, out)
	require.Equal(t, driver.StateRunning, probe.State, "the job was told to stop only after its lease had lapsed in the store")
}
