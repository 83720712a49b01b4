package core_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/memstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// slowStore is a memstore under the group commit (a BatchStore, as
// redisstore and pgstore are) whose done markers, and whose claims for keys
// starting with "hang", get no answer until their context ends: a store that
// honours its context but does not answer.
type slowStore struct{ *memstore.Store }

func (s slowStore) Complete(ctx context.Context, _ driver.CompleteRequest) error {
	<-ctx.Done()
	return ctx.Err()
}

func (s slowStore) Claim(ctx context.Context, req driver.ClaimRequest) (driver.ClaimReply, error) {
	if strings.Contains(req.Key, "hang") {
		<-ctx.Done()
		return driver.ClaimReply{}, ctx.Err()
	}
	return s.Store.Claim(ctx, req)
}

func (s slowStore) Batch(ctx context.Context, completes []driver.CompleteRequest, claims []driver.ClaimRequest) ([]driver.ClaimReply, []error, []error) {
	return testenv.OneByOne(s).Batch(ctx, completes, claims)
}

// Invariant 3 for the done marker under the group commit: a caller whose
// context ends as its job ends is answered within one StoreTimeout (the
// bound TestCompleteRetriesShareOneStoreTimeout sets, on a store without
// batches): the marker's wait in the group commit's queue, its round trip
// and its retries share that one bound. When other callers' claims hang in
// every round trip the group has in flight, it is answered within two
// StoreTimeouts, the bound the group commit gives any call.
func TestMarkerAnsweredWithinOneStoreTimeout(t *testing.T) {
	const storeTimeout = 200 * time.Millisecond
	for _, othersHang := range []bool{false, true} {
		t.Run(fmt.Sprint("others' claims hang=", othersHang), func(t *testing.T) {
			g, err := core.New(slowStore{memstore.New()}, &core.Config{StoreTimeout: storeTimeout, PlainKeys: true})
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			defer wg.Wait()
			var ended time.Time
			out, err := g.Do(ctx, "k", func(context.Context) error {
				if othersHang {
					// Other callers' claims fill every round trip in flight.
					for i := range core.GroupRoundTrips {
						wg.Go(func() { _, _ = g.Do(context.Background(), fmt.Sprint("hang-", i), mustNotRun) })
					}
					time.Sleep(20 * time.Millisecond)
				}
				cancel() // the caller gives up as the job ends
				ended = time.Now()
				return nil
			})
			waited := time.Since(ended)
			t.Logf("outcome %s err %v; answered %s after the caller's context ended", out, err, waited.Round(time.Millisecond))
			bound := storeTimeout + storeTimeout/2 // one StoreTimeout, and half of it as slack
			if othersHang {
				bound = 2 * storeTimeout // even the group commit's own "two timeouts"
			}
			require.Less(t, waited, bound, "answered within its own context plus one bounded store call (StoreTimeout %s)", storeTimeout)
		})
	}
}
