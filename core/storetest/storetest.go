package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core/driver"
)

// NewStore returns a fresh store for one test.
type NewStore func(t *testing.T) driver.Store

// Run runs the whole suite against stores made by newStore.
func Run(t *testing.T, newStore NewStore) {
	t.Run("Store", func(t *testing.T) { runStore(t, newStore) })
	t.Run("Guard", func(t *testing.T) { runGuard(t, newStore) })
	if _, ok := newStore(t).(driver.Notifier); ok {
		t.Run("Notifier", func(t *testing.T) { runNotifier(t, newStore) })
	}
}

type suite struct {
	t      *testing.T
	store  driver.Store
	prefix string
}

func newSuite(t *testing.T, newStore NewStore) *suite {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return &suite{t: t, store: newStore(t), prefix: "jobonce-storetest:" + hex.EncodeToString(b) + ":"}
}

func (s *suite) key(name string) string { return s.prefix + name }

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func claimReq(key string, tok driver.Token, fp string, lease time.Duration) driver.ClaimRequest {
	return driver.ClaimRequest{Key: key, Token: tok, Fingerprint: fp, Lease: lease}
}

// fence returns the fence of a claim's reply, which must be StateClaimed.
func (s *suite) fence(r driver.ClaimReply, err error) int64 {
	s.t.Helper()
	require.NoError(s.t, err)
	require.Equal(s.t, driver.StateClaimed, r.State)
	require.Positive(s.t, r.Fence, "a claim's fence")
	return r.Fence
}

// claimWhenFree sends req until it claims the key, as it does once the
// key's claim or done marker has expired, and returns the claim's reply.
func (s *suite) claimWhenFree(ctx context.Context, req driver.ClaimRequest) driver.ClaimReply {
	s.t.Helper()
	var (
		r   driver.ClaimReply
		err error
	)
	require.Eventually(s.t, func() bool {
		r, err = s.store.Claim(ctx, req)
		return err != nil || r.State == driver.StateClaimed
	}, 10*time.Second, 5*time.Millisecond, "the key's claim or done marker expires")
	s.fence(r, err)
	return r
}
