package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/redisstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// Once a defect, now fixed (a claim cut during its WAIT stays held). With WaitReplicas, the
// claim script runs and then WAIT blocks up to WaitTimeout in the same
// pipeline. When the caller's context ends meanwhile (the client set up with
// ContextTimeoutEnabled, as the README asks), the claim is answered the
// context's error, but it was granted on the server and is not released:
// Batch releases only claims whose reply was read as granted. Nobody holds
// it (no heartbeat, no job), yet every redelivery is answered Running for
// the whole lease. Batch's doc says claims granted but not acknowledged are
// released; core's stopped() cannot release it either (it releases only a
// claim answered granted).
func TestAttack2ClaimCutDuringWaitStaysHeld(t *testing.T) {
	prefix := testenv.Prefix(t)
	client := testenv.Redis(t, prefix)
	opt := *client.Options()
	opt.ContextTimeoutEnabled = true
	cc := redis.NewClient(&opt)
	t.Cleanup(func() { _ = cc.Close() })
	s, err := redisstore.New(cc, &redisstore.Config{Logger: quiet, WaitReplicas: 1, WaitTimeout: 2 * time.Second})
	require.NoError(t, err)
	plain := newStore(t, client)

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	key := prefix + "cut"
	_, err = s.Claim(ctx, driver.ClaimRequest{Key: key, Token: driver.NewToken(), Lease: time.Minute})
	require.Error(t, err)

	r, err := plain.Claim(context.Background(), driver.ClaimRequest{Key: key, Token: driver.NewToken(), Lease: time.Minute})
	require.NoError(t, err)
	require.Equal(t, driver.StateClaimed, r.State,
		"a claim answered with an error must not stay held for its lease (%s left)", r.Remaining)
}
