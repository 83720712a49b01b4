package dynamostore_test

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/dynamostore"
)

// throttlingProxy forwards DynamoDB requests to target, answering
// ThrottlingException itself, without forwarding, for the UpdateItem calls
// throttle picks. It counts the calls of each operation it received.
func throttlingProxy(t *testing.T, target string, throttle func() bool) (string, *sync.Map) {
	var calls sync.Map // operation -> *atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		op := r.Header.Get("X-Amz-Target")
		op = op[strings.LastIndex(op, ".")+1:]
		n, _ := calls.LoadOrStore(op, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
		if op == "UpdateItem" && throttle() {
			w.Header().Set("Content-Type", "application/x-amz-json-1.0")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"__type":"com.amazonaws.dynamodb.v20120810#ThrottlingException","message":"Rate of requests exceeds the allowed throughput."}`)
			return
		}
		req, err := http.NewRequestWithContext(r.Context(), r.Method, target+r.URL.Path, bytes.NewReader(body))
		if err != nil {
			panic(http.ErrAbortHandler)
		}
		req.Header = r.Header.Clone()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(http.ErrAbortHandler)
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, &calls
}

func count(calls *sync.Map, op string) int64 {
	n, ok := calls.Load(op)
	if !ok {
		return 0
	}
	return n.(*atomic.Int64).Load()
}

// A batch of many claims of one key costs one write: the first claim takes
// the key, a claim sent again with its token gets its reply, and every
// other copy finds the key Running under it, with its fence.
func TestBatchClaimsOfOneKeyAreOneWrite(t *testing.T) {
	t.Parallel()
	srv := dynalite(t)
	table := tableName(t)
	newStore(t, srv, &dynamostore.Config{Table: table})
	endpoint, calls := throttlingProxy(t, srv.endpoint, func() bool { return false })
	s, err := dynamostore.New(ctxT(t), client(endpoint), &dynamostore.Config{Table: table})
	require.NoError(t, err)

	claims := make([]driver.ClaimRequest, 64)
	for i := range claims {
		claims[i] = driver.ClaimRequest{Key: "hot", Token: driver.NewToken(), Fingerprint: "fp", Lease: time.Minute}
	}
	claims = append(claims, claims[0])                       // the first sent again
	claims = append(claims, driver.ClaimRequest{Key: "hot"}) // invalid: no lease
	before := count(calls, "UpdateItem") + count(calls, "GetItem")
	replies, errs, _ := s.Batch(ctxT(t), nil, claims)
	require.EqualValues(t, 1, count(calls, "UpdateItem")+count(calls, "GetItem")-before, "store calls for the batch")

	require.NoError(t, errs[0])
	require.Equal(t, driver.StateClaimed, replies[0].State)
	fence := replies[0].Fence
	for i := 1; i < 64; i++ {
		require.NoError(t, errs[i])
		require.Equal(t, driver.StateRunning, replies[i].State, "copy %d", i)
		require.Equal(t, fence, replies[i].Fence)
		require.Equal(t, "fp", replies[i].Fingerprint)
		require.Equal(t, time.Minute, replies[i].Remaining)
	}
	require.NoError(t, errs[64])
	require.Equal(t, replies[0], replies[64], "the first claim sent again")
	require.ErrorContains(t, errs[65], "ClaimRequest.Lease")

	// The store agrees: the key is the first claim's.
	r, err := s.Claim(ctxT(t), driver.ClaimRequest{Key: "hot", Token: driver.NewToken(), Lease: time.Minute})
	require.NoError(t, err)
	require.Equal(t, driver.StateRunning, r.State)
	require.Equal(t, fence, r.Fence)
}

// A later claim of a key in a batch gets the answer Claim alone gives it:
// the claim that holds the key, sent again behind another's, is Claimed
// with its fence, not Running; and a claim whose write failed for a cause
// of its own (an item over 400 KB) does not pass its error on.
func TestBatchAnswersEachClaimAsClaimDoes(t *testing.T) {
	t.Parallel()
	s := newStore(t, dynalite(t), nil)
	ctx := ctxT(t)

	holder := driver.ClaimRequest{Key: "held", Token: driver.NewToken(), Lease: time.Minute}
	r, err := s.Claim(ctx, holder)
	require.NoError(t, err)
	require.Equal(t, driver.StateClaimed, r.State)
	other := driver.ClaimRequest{Key: "held", Token: driver.NewToken(), Lease: time.Minute}
	replies, errs, _ := s.Batch(ctx, nil, []driver.ClaimRequest{other, holder})
	require.NoError(t, errs[0])
	require.Equal(t, driver.StateRunning, replies[0].State)
	require.NoError(t, errs[1])
	require.Equal(t, driver.ClaimReply{State: driver.StateClaimed, Fence: r.Fence}, replies[1], "the holder sent again")

	big := driver.ClaimRequest{Key: "free", Token: driver.NewToken(), Fingerprint: strings.Repeat("x", 500_000), Lease: time.Minute}
	ok := driver.ClaimRequest{Key: "free", Token: driver.NewToken(), Lease: time.Minute}
	replies, errs, _ = s.Batch(ctx, nil, []driver.ClaimRequest{big, ok})
	require.ErrorIs(t, errs[0], dynamostore.ErrItemTooLarge)
	require.NoError(t, errs[1], "the next claim is sent")
	require.Equal(t, driver.StateClaimed, replies[1].State)
}

// A thousand callers of one key, with FailOpen, on a store that throttles
// most writes: the job runs once, and no copy runs unguarded beside it.
// Throttling is an answer, even when it lasts until a call's time runs out.
func TestThrottledHotKeyWithFailOpenRunsOnce(t *testing.T) {
	t.Parallel()
	srv := dynalite(t)
	table := tableName(t)
	newStore(t, srv, &dynamostore.Config{Table: table})
	endpoint, _ := throttlingProxy(t, srv.endpoint, func() bool { return rand.IntN(10) < 7 })
	s, err := dynamostore.New(ctxT(t), client(endpoint), &dynamostore.Config{Table: table})
	require.NoError(t, err)
	g, err := core.New(s, &core.Config{FailOpen: true, Lease: 10 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Close() })

	var running, most atomic.Int64
	var mu sync.Mutex
	outs := map[core.Outcome]int{}
	var wg sync.WaitGroup
	for range 1000 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			out, _ := g.Do(ctx, "hot", func(context.Context) error {
				n := running.Add(1)
				defer running.Add(-1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(time.Second)
				return nil
			})
			mu.Lock()
			outs[out]++
			mu.Unlock()
		})
	}
	wg.Wait()
	t.Logf("outcomes %v", outs)
	require.LessOrEqual(t, most.Load(), int64(1), "copies of one key ran at once")
	require.Zero(t, outs[core.Unguarded], "copies ran unguarded")
}
