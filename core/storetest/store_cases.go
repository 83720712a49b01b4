package storetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
)

// RunStore runs the Store contract cases.
func RunStore(t *testing.T, newStore NewStore) {
	cases := []struct {
		name string
		fn   func(t *testing.T, s *suite)
	}{
		{"ClaimThenRunning", claimThenRunning},
		{"RaceOneWinner", raceOneWinner},
		{"ExpiredClaimTakenOver", expiredClaimTakenOver},
		{"TokenSafety", tokenSafety},
		{"Extend", extend},
		{"CompleteKeepsResult", completeKeepsResult},
		{"CompleteOnlyOnce", completeOnlyOnce},
		{"ReleaseFreesKey", releaseFreesKey},
		{"RetentionExpires", retentionExpires},
		{"BinaryKeysAndResults", binaryKeysAndResults},
		{"CancelledContext", cancelledContext},
		{"Batch", batch},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.fn(t, newSuite(t, newStore))
		})
	}
}

func claimThenRunning(t *testing.T, s *suite) {
	ctx, key := ctx(t), s.key("k")
	r, err := s.store.Claim(ctx, claimReq(key, core.NewToken(), "fp1", time.Minute))
	require.NoError(t, err)
	require.Equal(t, core.StateClaimed, r.State)

	r, err = s.store.Claim(ctx, claimReq(key, core.NewToken(), "fp2", time.Minute))
	require.NoError(t, err)
	require.Equal(t, core.StateRunning, r.State)
	require.Equal(t, "fp1", r.Fingerprint, "a running claim reports the holder's fingerprint")
	require.Greater(t, r.Remaining, 50*time.Second)
	require.LessOrEqual(t, r.Remaining, time.Minute)
}

func raceOneWinner(t *testing.T, s *suite) {
	ctx, key := ctx(t), s.key("race")
	const n = 64
	var wg sync.WaitGroup
	states := make([]core.State, n)
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			var r core.ClaimReply
			r, errs[i] = s.store.Claim(ctx, claimReq(key, core.NewToken(), "", time.Minute))
			states[i] = r.State
		})
	}
	close(start)
	wg.Wait()
	won := 0
	for i := range n {
		require.NoError(t, errs[i])
		if states[i] == core.StateClaimed {
			won++
		} else {
			require.Equal(t, core.StateRunning, states[i])
		}
	}
	require.Equal(t, 1, won, "exactly one of %d racing claims wins", n)
}

func expiredClaimTakenOver(t *testing.T, s *suite) {
	ctx, key := ctx(t), s.key("expire")
	_, err := s.store.Claim(ctx, claimReq(key, core.NewToken(), "", 50*time.Millisecond))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		r, err := s.store.Claim(ctx, claimReq(key, core.NewToken(), "", time.Minute))
		require.NoError(t, err)
		return r.State == core.StateClaimed
	}, 10*time.Second, 20*time.Millisecond, "an expired claim can be taken over")
}

func tokenSafety(t *testing.T, s *suite) {
	ctx, key := ctx(t), s.key("token")
	old, owner := core.NewToken(), core.NewToken()
	_, err := s.store.Claim(ctx, claimReq(key, old, "", 50*time.Millisecond))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		r, err := s.store.Claim(ctx, claimReq(key, owner, "", time.Minute))
		require.NoError(t, err)
		return r.State == core.StateClaimed
	}, 10*time.Second, 20*time.Millisecond)

	require.ErrorIs(t, s.store.Extend(ctx, key, old, time.Minute), core.ErrLeaseLost)
	require.ErrorIs(t, s.store.Release(ctx, key, old), core.ErrLeaseLost)
	require.ErrorIs(t, s.store.Complete(ctx, core.CompleteRequest{Key: key, Token: old, Retention: time.Minute}), core.ErrLeaseLost)

	r, err := s.store.Claim(ctx, claimReq(key, core.NewToken(), "", time.Minute))
	require.NoError(t, err)
	require.Equal(t, core.StateRunning, r.State, "the old owner touched the new owner's claim")
	require.NoError(t, s.store.Release(ctx, key, owner))
}

func extend(t *testing.T, s *suite) {
	ctx, key := ctx(t), s.key("extend")
	tok := core.NewToken()
	_, err := s.store.Claim(ctx, claimReq(key, tok, "", time.Second))
	require.NoError(t, err)
	require.NoError(t, s.store.Extend(ctx, key, tok, time.Minute))
	r, err := s.store.Claim(ctx, claimReq(key, core.NewToken(), "", time.Minute))
	require.NoError(t, err)
	require.Equal(t, core.StateRunning, r.State)
	require.Greater(t, r.Remaining, 50*time.Second, "Extend renewed the lease")

	require.ErrorIs(t, s.store.Extend(ctx, s.key("absent"), tok, time.Minute), core.ErrLeaseLost)
}

func completeKeepsResult(t *testing.T, s *suite) {
	ctx, key := ctx(t), s.key("result")
	tok := core.NewToken()
	_, err := s.store.Claim(ctx, claimReq(key, tok, "fp", time.Minute))
	require.NoError(t, err)
	require.NoError(t, s.store.Complete(ctx, core.CompleteRequest{Key: key, Token: tok, Fingerprint: "fp", Result: []byte("42"), Retention: time.Minute}))
	r, err := s.store.Claim(ctx, claimReq(key, core.NewToken(), "fp", time.Minute))
	require.NoError(t, err)
	require.Equal(t, core.StateDone, r.State)
	require.Equal(t, "fp", r.Fingerprint)
	require.Equal(t, []byte("42"), r.Result)

	key2, tok2 := s.key("noresult"), core.NewToken()
	_, err = s.store.Claim(ctx, claimReq(key2, tok2, "", time.Minute))
	require.NoError(t, err)
	require.NoError(t, s.store.Complete(ctx, core.CompleteRequest{Key: key2, Token: tok2, Retention: time.Minute}))
	r, err = s.store.Claim(ctx, claimReq(key2, core.NewToken(), "", time.Minute))
	require.NoError(t, err)
	require.Equal(t, core.StateDone, r.State)
	require.Empty(t, r.Result)
	require.Empty(t, r.Fingerprint)
}

func completeOnlyOnce(t *testing.T, s *suite) {
	ctx, key := ctx(t), s.key("once")
	tok := core.NewToken()
	_, err := s.store.Claim(ctx, claimReq(key, tok, "", time.Minute))
	require.NoError(t, err)
	req := core.CompleteRequest{Key: key, Token: tok, Retention: time.Minute}
	require.NoError(t, s.store.Complete(ctx, req))
	require.ErrorIs(t, s.store.Complete(ctx, req), core.ErrLeaseLost, "a done marker is not a claim")
	require.ErrorIs(t, s.store.Extend(ctx, key, tok, time.Minute), core.ErrLeaseLost)
	require.ErrorIs(t, s.store.Release(ctx, key, tok), core.ErrLeaseLost, "release never deletes a done marker")
	r, err := s.store.Claim(ctx, claimReq(key, core.NewToken(), "", time.Minute))
	require.NoError(t, err)
	require.Equal(t, core.StateDone, r.State)
}

func releaseFreesKey(t *testing.T, s *suite) {
	ctx, key := ctx(t), s.key("release")
	tok := core.NewToken()
	_, err := s.store.Claim(ctx, claimReq(key, tok, "", time.Minute))
	require.NoError(t, err)
	require.ErrorIs(t, s.store.Release(ctx, key, core.NewToken()), core.ErrLeaseLost, "a stranger cannot release")
	require.NoError(t, s.store.Release(ctx, key, tok))
	require.ErrorIs(t, s.store.Release(ctx, key, tok), core.ErrLeaseLost)
	r, err := s.store.Claim(ctx, claimReq(key, core.NewToken(), "", time.Minute))
	require.NoError(t, err)
	require.Equal(t, core.StateClaimed, r.State)
}

func retentionExpires(t *testing.T, s *suite) {
	ctx, key := ctx(t), s.key("retention")
	tok := core.NewToken()
	_, err := s.store.Claim(ctx, claimReq(key, tok, "", time.Minute))
	require.NoError(t, err)
	require.NoError(t, s.store.Complete(ctx, core.CompleteRequest{Key: key, Token: tok, Retention: 100 * time.Millisecond}))
	r, err := s.store.Claim(ctx, claimReq(key, core.NewToken(), "", time.Minute))
	require.NoError(t, err)
	require.Equal(t, core.StateDone, r.State)
	require.Eventually(t, func() bool {
		r, err := s.store.Claim(ctx, claimReq(key, core.NewToken(), "", time.Minute))
		require.NoError(t, err)
		return r.State == core.StateClaimed
	}, 10*time.Second, 20*time.Millisecond, "a done marker expires after its retention")
}

func binaryKeysAndResults(t *testing.T, s *suite) {
	ctx := ctx(t)
	key := s.key("bin\x00\xff\n é 🚀")
	result := []byte{0, 1, 2, 255, 'R', 'D', 0}
	fp := "f\x00p"
	tok := core.NewToken()
	tok[0], tok[15] = 0, 0xff
	r, err := s.store.Claim(ctx, claimReq(key, tok, fp, time.Minute))
	require.NoError(t, err)
	require.Equal(t, core.StateClaimed, r.State)
	r, err = s.store.Claim(ctx, claimReq(s.key("bin\x00\xff\n é 🚁"), core.NewToken(), "", time.Minute))
	require.NoError(t, err)
	require.Equal(t, core.StateClaimed, r.State, "keys differing in one byte are different keys")
	require.NoError(t, s.store.Complete(ctx, core.CompleteRequest{Key: key, Token: tok, Fingerprint: fp, Result: result, Retention: time.Minute}))
	r, err = s.store.Claim(ctx, claimReq(key, core.NewToken(), fp, time.Minute))
	require.NoError(t, err)
	require.Equal(t, core.StateDone, r.State)
	require.Equal(t, fp, r.Fingerprint)
	require.Equal(t, result, r.Result)
}

func cancelledContext(t *testing.T, s *suite) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.store.Claim(ctx, claimReq(s.key("cancel"), core.NewToken(), "", time.Minute))
	require.Error(t, err)
	require.True(t, errors.Is(err, context.Canceled), "got %v", err)
}

func batch(t *testing.T, s *suite) {
	bs, ok := s.store.(core.BatchStore)
	if !ok {
		t.Skip("store is not a core.BatchStore")
	}
	ctx := ctx(t)
	toks := make([]core.Token, 6)
	reqs := make([]core.ClaimRequest, 6)
	for i := range reqs {
		toks[i] = core.NewToken()
		key := s.key("batch-" + string(rune('a'+i%3))) // three keys, each twice
		reqs[i] = claimReq(key, toks[i], "", time.Minute)
	}
	replies, errs := bs.ClaimBatch(ctx, reqs)
	require.Len(t, replies, 6)
	require.Len(t, errs, 6)
	for i := range 3 {
		require.NoError(t, errs[i])
		require.NoError(t, errs[i+3])
		require.Equal(t, core.StateClaimed, replies[i].State)
		require.Equal(t, core.StateRunning, replies[i+3].State, "the second claim of a key in one batch finds it running")
	}
	done := []core.CompleteRequest{
		{Key: reqs[0].Key, Token: toks[0], Result: []byte("a"), Retention: time.Minute},
		{Key: reqs[1].Key, Token: toks[4], Retention: time.Minute}, // not the holder
		{Key: reqs[2].Key, Token: toks[2], Retention: time.Minute},
	}
	errs = bs.CompleteBatch(ctx, done)
	require.Len(t, errs, 3)
	require.NoError(t, errs[0])
	require.ErrorIs(t, errs[1], core.ErrLeaseLost)
	require.NoError(t, errs[2])
	replies, errs = bs.ClaimBatch(ctx, reqs[:3])
	require.Equal(t, []error{nil, nil, nil}, errs)
	require.Equal(t, core.StateDone, replies[0].State)
	require.Equal(t, []byte("a"), replies[0].Result)
	require.Equal(t, core.StateRunning, replies[1].State)
	require.Equal(t, core.StateDone, replies[2].State)
}
