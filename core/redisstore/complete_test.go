package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/internal/testenv"
)

// Copy A writes its marker, which no replica acknowledges
// (ErrUnreplicated); a failover loses it (here the key is deleted, as a
// promoted replica that never got the marker, and on which A's claim
// lapsed, would show). Copy B then claims, runs and writes the same marker
// (same fingerprint, same result: the same job). A's request sent again
// finds a marker equal to its own but written by B: it is answered
// ErrLeaseLost, and B's marker stands.
func TestCompleteSentAgainRefusesAnotherCopysMarker(t *testing.T) {
	ctx := context.Background()
	prefix, s := unacknowledged(t)
	client := testenv.Redis(t, prefix)
	plain := newStore(t, client)
	key := prefix + "job"

	a := driver.NewToken()
	_, err := plain.Claim(ctx, driver.ClaimRequest{Key: key, Token: a, Fingerprint: "fp", Lease: time.Minute})
	require.NoError(t, err)
	markerA := driver.CompleteRequest{Key: key, Token: a, Fingerprint: "fp", Result: []byte("r"), Retention: time.Minute}
	require.ErrorIs(t, s.Complete(ctx, markerA), core.ErrUnreplicated)
	require.NoError(t, client.Del(ctx, key).Err()) // the failover lost A's marker (and its claim)

	b := driver.NewToken()
	r, err := plain.Claim(ctx, driver.ClaimRequest{Key: key, Token: b, Fingerprint: "fp", Lease: time.Minute})
	require.NoError(t, err)
	require.Equal(t, driver.StateClaimed, r.State)
	require.NoError(t, plain.Complete(ctx, driver.CompleteRequest{Key: key, Token: b, Fingerprint: "fp", Result: []byte("r"), Retention: time.Minute}))

	require.ErrorIs(t, plain.Complete(ctx, markerA), core.ErrLeaseLost,
		"A's marker was lost and B's stands: A must not be answered as if its own marker were written")
	require.ErrorIs(t, s.Complete(ctx, markerA), core.ErrLeaseLost, "with a wait as without")
	r, err = plain.Claim(ctx, driver.ClaimRequest{Key: key, Token: driver.NewToken(), Fingerprint: "fp", Lease: time.Minute})
	require.NoError(t, err)
	require.Equal(t, driver.StateDone, r.State)
	require.Equal(t, []byte("r"), r.Result)
}

// failoverStore answers the first done marker as a store whose primary has
// no replica would (written, ErrUnreplicated), then loses it as a failover
// would and lets copy B claim, run and record the same job; later calls go
// to the plain store.
type failoverStore struct {
	driver.Store // plain
	unacked      driver.Store
	client       *redis.Client
	completes    int
	bOutcome     error
}

func (f *failoverStore) Complete(ctx context.Context, req driver.CompleteRequest) error {
	f.completes++
	if f.completes == 1 {
		var err error
		if f.unacked != nil {
			err = f.unacked.Complete(ctx, req)
		} else {
			err = errors.New("read tcp: i/o timeout") // a lost request: nothing written
		}
		_ = f.client.Del(ctx, req.Key).Err() // the failover lost the marker (or A's lease ran out)
		return err
	}
	if f.completes == 2 {
		// After A's answer, the failover takes a while; then B claims, runs
		// and records the same job.
		time.Sleep(20 * time.Millisecond)
		b := driver.NewToken()
		if _, f.bOutcome = f.Store.Claim(ctx, driver.ClaimRequest{Key: req.Key, Token: b, Fingerprint: req.Fingerprint, Lease: time.Minute}); f.bOutcome == nil {
			f.bOutcome = f.Store.Complete(ctx, driver.CompleteRequest{Key: req.Key, Token: b, Fingerprint: req.Fingerprint, Result: req.Result, Retention: req.Retention})
		}
	}
	return f.Store.Complete(ctx, req)
}

// Through the Guard, the same sequence as above: copy B ran and recorded the
// job; copy A's marker was lost; A does not report Ran.
func TestGuardReportsLeaseLostWhenAFailoverLostItsMarker(t *testing.T) {
	prefix, s := unacknowledged(t)
	client := testenv.Redis(t, prefix)
	fs := &failoverStore{Store: newStore(t, client), unacked: s, client: client}
	g, err := core.New(fs, &core.Config{KeyPrefix: prefix, Logger: quiet, StoreTimeout: 2 * time.Second})
	require.NoError(t, err)
	res, err := g.Run(context.Background(), core.Job{Key: "job", Fingerprint: "fp"}, func(context.Context) ([]byte, error) {
		return []byte("r"), nil
	})
	require.NoError(t, fs.bOutcome, "copy B ran and recorded the job")
	require.Equal(t, 2, fs.completes, "A's marker was sent again")
	require.Equal(t, core.LeaseLost, res.Outcome, "A's marker was lost; B's stands (err %v)", err)
}

// No failover needed: copy A's lease ran out while its job ran (its
// heartbeat could not reach the store; the job did not stop); copy B
// claimed, ran and recorded the job. A's first marker attempt is lost on
// the way (nothing written): the retry finds B's marker, equal to A's, and
// A reports LeaseLost, the truth, not Ran.
func TestGuardReportsLeaseLostWhenItsRetryFindsAnotherCopysMarker(t *testing.T) {
	prefix := testenv.Prefix(t)
	client := testenv.Redis(t, prefix)
	fs := &failoverStore{Store: newStore(t, client), client: client}
	g, err := core.New(fs, &core.Config{KeyPrefix: prefix, Logger: quiet, StoreTimeout: 2 * time.Second})
	require.NoError(t, err)
	res, err := g.Run(context.Background(), core.Job{Key: "job", Fingerprint: "fp"}, func(context.Context) ([]byte, error) {
		return []byte("r"), nil
	})
	require.NoError(t, fs.bOutcome, "copy B ran and recorded the job")
	require.Equal(t, 2, fs.completes)
	require.Equal(t, core.LeaseLost, res.Outcome, "A lost its lease and B recorded the job (err %v)", err)
}
