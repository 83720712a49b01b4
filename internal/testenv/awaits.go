package testenv

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobonce/jobonce/core/driver"
)

// Awaits wraps a store that notifies (driver.Notifier) and counts its Await
// calls. A copy that waits for its running copy (core.Job.WaitUntil) reads
// its key with Await once listening has begun, so tests tell by the count
// that a copy is waiting. Wrapped, a BatchStore's Guard has no group commit.
type Awaits struct {
	driver.Notifier
	n atomic.Int64
}

// NewAwaits wraps s.
func NewAwaits(s driver.Notifier) *Awaits { return &Awaits{Notifier: s} }

// Await implements driver.Notifier.
func (a *Awaits) Await(ctx context.Context, req driver.ClaimRequest) (driver.ClaimReply, error) {
	a.n.Add(1)
	return a.Notifier.Await(ctx, req)
}

// Count returns how many Await calls were made.
func (a *Awaits) Count() int64 { return a.n.Load() }

// Began waits, up to 20s, until n Await calls were made: n copies are
// waiting (or were).
func (a *Awaits) Began(t testing.TB, n int64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for a.n.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("testenv: %d copies began to wait within 20s, %d wanted", a.n.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
}
