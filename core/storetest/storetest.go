package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/jobonce/jobonce/core/driver"
)

// NewStore returns a fresh store for one test.
type NewStore func(t *testing.T) driver.Store

// Run runs the whole suite against stores made by newStore.
func Run(t *testing.T, newStore NewStore) {
	t.Run("Store", func(t *testing.T) { RunStore(t, newStore) })
	t.Run("Guard", func(t *testing.T) { RunGuard(t, newStore) })
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
