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

// busyClaims is a memstore under the group commit whose claims for keys
// containing "hang" get no answer until their context ends, and whose done
// markers take a short while (a round trip under load), honouring ctx.
type busyClaims struct {
	*memstore.Store
	entered chan struct{}
}

func (s busyClaims) Claim(ctx context.Context, req driver.ClaimRequest) (driver.ClaimReply, error) {
	if strings.Contains(req.Key, "hang") {
		s.entered <- struct{}{}
		<-ctx.Done()
		return driver.ClaimReply{}, ctx.Err()
	}
	return s.Store.Claim(ctx, req)
}

func (s busyClaims) Complete(ctx context.Context, req driver.CompleteRequest) error {
	select {
	case <-time.After(20 * time.Millisecond):
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.Store.Complete(ctx, req)
}

func (s busyClaims) Batch(ctx context.Context, completes []driver.CompleteRequest, claims []driver.ClaimRequest) ([]driver.ClaimReply, []error, []error) {
	return testenv.OneByOne(s).Batch(ctx, completes, claims)
}

// A done marker's attempts, its wait in the group commit's queue included,
// share one StoreTimeout, yet others' claims cannot use that budget up: when
// other callers' claims fill every round trip in flight for about a
// StoreTimeout (a store slow for their keys, such as PostgreSQL claims
// waiting on rows held by open transactions), the marker still gets a round
// trip of its own and is written (Ran), since the store is healthy for it,
// and a redelivery is a Duplicate.
func TestMarkerWrittenWhileOthersClaimsHang(t *testing.T) {
	const storeTimeout = 200 * time.Millisecond
	s := busyClaims{Store: memstore.New(), entered: make(chan struct{}, core.GroupRoundTrips)}
	g, err := core.New(s, &core.Config{StoreTimeout: storeTimeout, PlainKeys: true})
	require.NoError(t, err)
	var wg sync.WaitGroup
	defer wg.Wait()
	out, err := g.Do(context.Background(), "k", func(context.Context) error {
		// Other callers' claims fill every round trip in flight.
		for i := range core.GroupRoundTrips {
			wg.Go(func() { _, _ = g.Do(context.Background(), fmt.Sprint("hang-", i), mustNotRun) })
			<-s.entered
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, core.Ran, out, "the store was healthy for this job's marker")
	again, err := g.Do(context.Background(), "k", mustNotRun)
	require.NoError(t, err)
	require.Equal(t, core.Duplicate, again, "and a redelivery is a Duplicate")
}
