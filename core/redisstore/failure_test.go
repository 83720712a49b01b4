package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/redisstore"
	"github.com/jobonce/jobonce/internal/batchcall"
	"github.com/jobonce/jobonce/internal/redisops"
	"github.com/jobonce/jobonce/internal/testenv"
)

func fakeStore(t *testing.T, addr string, retries int) *redisstore.Store {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: retries, ReadTimeout: 500 * time.Millisecond,
		DialTimeout: time.Second, DisableIdentity: true})
	t.Cleanup(func() { _ = client.Close() })
	s, err := redisstore.New(client, &redisstore.Config{Logger: quiet, SkipEvictionCheck: true})
	require.NoError(t, err)
	return s
}

func requests(n int) ([]driver.ClaimRequest, []driver.CompleteRequest) {
	claims := make([]driver.ClaimRequest, n)
	completes := make([]driver.CompleteRequest, n)
	for i := range n {
		tok := driver.NewToken()
		key := "k" + strings.Repeat("x", i)
		claims[i] = driver.ClaimRequest{Key: key, Token: tok, Lease: time.Minute}
		completes[i] = driver.CompleteRequest{Key: key, Token: tok, Retention: time.Minute}
	}
	return claims, completes
}

// TestStalledServerGivesContextErrors: when the caller's context ends while
// Redis does not answer, every call, and every request of a batch, fails
// with an error wrapping the context's error (not a bare i/o timeout that
// would read as a store outage).
func TestStalledServerGivesContextErrors(t *testing.T) {
	t.Parallel()
	f := startFakeRedis(t, func(int) string { return "" })
	for _, retries := range []int{-1, 2} {
		s := fakeStore(t, f.Addr(), retries)
		claims, completes := requests(3)
		for _, c := range []struct {
			want error
			ctx  func() (context.Context, context.CancelFunc)
		}{
			{context.DeadlineExceeded, func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), 100*time.Millisecond)
			}},
			{context.Canceled, func() (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancel(context.Background())
				time.AfterFunc(100*time.Millisecond, cancel)
				return ctx, cancel
			}},
		} {
			check := func(what string, errs ...error) {
				t.Helper()
				for i, err := range errs {
					require.Error(t, err, "%s %d", what, i)
					require.True(t, errors.Is(err, c.want), "%s %d (retries %d): want an error wrapping %v, got %v", what, i, retries, c.want, err)
				}
			}
			ctx, cancel := c.ctx()
			replies, errs := batchcall.Claims(ctx, s, claims)
			cancel()
			check("ClaimBatch", errs...)
			for _, r := range replies {
				require.Zero(t, r.State)
			}
			ctx, cancel = c.ctx()
			check("CompleteBatch", batchcall.Completes(ctx, s, completes)...)
			cancel()
			ctx, cancel = c.ctx()
			_, err := s.Claim(ctx, claims[0])
			cancel()
			check("Claim", err)
			ctx, cancel = c.ctx()
			check("Complete", s.Complete(ctx, completes[0]))
			cancel()
		}
	}
}

// TestStalledServerIsNotCancellation: without a cancelled context, a server
// that does not answer gives errors that do not claim to be the caller's
// cancellation.
func TestStalledServerIsNotCancellation(t *testing.T) {
	t.Parallel()
	f := startFakeRedis(t, func(int) string { return "" })
	s := fakeStore(t, f.Addr(), -1)
	claims, completes := requests(2)
	_, errs := batchcall.Claims(context.Background(), s, claims)
	errs = append(errs, batchcall.Completes(context.Background(), s, completes)...)
	for i, err := range errs {
		require.Error(t, err, i)
		require.False(t, errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded), "%d: %v", i, err)
	}
}

// TestPartialPipeline: a connection that breaks after answering part of a
// pipeline leaves every unanswered request with an error, never with a nil
// error that would mean "written" or a zero reply. (go-redis marks the
// answered ones failed too; that errs on the safe side.)
func TestPartialPipeline(t *testing.T) {
	t.Parallel()
	for _, retries := range []int{-1, 2} {
		f := startFakeRedis(t, func(n int) string {
			if n < 2 {
				return ":1\r\n"
			}
			return "close"
		})
		s := fakeStore(t, f.Addr(), retries)
		claims, completes := requests(4)
		errs := batchcall.Completes(context.Background(), s, completes)
		require.Len(t, errs, 4)
		for i := 2; i < 4; i++ {
			require.Error(t, errs[i], "retries %d, request %d", retries, i)
			require.NotErrorIs(t, errs[i], core.ErrLeaseLost)
		}

		replies, cerrs := batchcall.Claims(context.Background(), s, claims)
		require.Len(t, cerrs, 4)
		for i := range 4 {
			if i >= 2 {
				require.Error(t, cerrs[i], "retries %d, request %d", retries, i)
			}
			if cerrs[i] != nil {
				require.Zero(t, replies[i].State, "a failed request has no reply")
			} else {
				require.Equal(t, driver.StateClaimed, replies[i].State)
			}
		}
	}
}

// TestUnexpectedReplies: replies a script never gives (a claim's fence is
// positive) are errors, not zero values.
func TestUnexpectedReplies(t *testing.T) {
	t.Parallel()
	for _, reply := range []string{"$-1\r\n", "*0\r\n", ":0\r\n", ":-7\r\n", "+OK\r\n", "-ERR boom\r\n", "*2\r\n$2\r\nxx\r\n:5\r\n"} {
		f := startFakeRedis(t, func(int) string { return reply })
		s := fakeStore(t, f.Addr(), -1)
		claims, completes := requests(2)
		replies, errs := batchcall.Claims(context.Background(), s, claims)
		for i, err := range errs {
			require.Error(t, err, "%q claim %d", reply, i)
			require.Zero(t, replies[i].State)
		}
		for i, err := range batchcall.Completes(context.Background(), s, completes) {
			if strings.HasPrefix(reply, ":") {
				continue // any reply other than 1 means the token did not hold the key
			}
			require.Error(t, err, "%q complete %d", reply, i)
		}
	}
}

// TestLongFingerprintThroughGuard: a job whose fingerprint is longer than
// 255 bytes and whose function returns a result is recorded (Ran), and a
// copy gets the result back (Duplicate).
func TestLongFingerprintThroughGuard(t *testing.T) {
	t.Parallel()
	prefix := testenv.Prefix(t)
	client := testenv.Redis(t, prefix)
	g, err := core.New(newStore(t, client), &core.Config{KeyPrefix: prefix, Logger: quiet})
	require.NoError(t, err)
	job := core.Job{Key: "long-fp", Fingerprint: strings.Repeat("f", 300)}
	ctx := context.Background()
	res, err := g.Run(ctx, job, func(context.Context) ([]byte, error) { return []byte("result"), nil })
	require.NoError(t, err)
	require.Equal(t, core.Ran, res.Outcome)
	res, err = g.Run(ctx, job, func(context.Context) ([]byte, error) { return nil, errors.New("must not run") })
	require.NoError(t, err)
	require.Equal(t, core.Duplicate, res.Outcome)
	require.Equal(t, []byte("result"), res.Value)
}

// TestInspectReadsEveryMarker: Inspect decodes claims (with their fences)
// and done markers with fingerprints of any length and with nil, empty and
// other results.
func TestInspectReadsEveryMarker(t *testing.T) {
	t.Parallel()
	prefix, client, s := prefixedStore(t)
	ctx := context.Background()
	for _, fp := range []string{"", "fp", strings.Repeat("\xff", 255), strings.Repeat("\x00", 256), strings.Repeat("f", 70_000)} {
		for _, result := range [][]byte{nil, {}, []byte("r")} {
			key, tok := prefix+"inspect", driver.NewToken()
			claim, err := s.Claim(ctx, driver.ClaimRequest{Key: key, Token: tok, Fingerprint: fp, Lease: time.Minute})
			require.NoError(t, err)
			rec, err := redisops.Inspect(ctx, client, key)
			require.NoError(t, err)
			require.Equal(t, driver.StateRunning, rec.State)
			require.Equal(t, tok, rec.Token)
			require.Equal(t, claim.Fence, rec.Fence, "Inspect reads the claim's fence")
			require.True(t, fp == rec.Fingerprint, "fingerprint of %d bytes", len(fp))
			require.NoError(t, s.Complete(ctx, driver.CompleteRequest{Key: key, Token: tok, Fingerprint: fp, Result: result, Retention: time.Minute}))
			rec, err = redisops.Inspect(ctx, client, key)
			require.NoError(t, err)
			require.Equal(t, driver.StateDone, rec.State)
			require.True(t, fp == rec.Fingerprint, "fingerprint of %d bytes", len(fp))
			require.Equal(t, result == nil, rec.Result == nil)
			require.Equal(t, string(result), string(rec.Result))
			require.Greater(t, rec.TTL, 50*time.Second)
			require.NoError(t, client.Del(ctx, key).Err())
		}
	}
}
