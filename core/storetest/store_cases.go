package storetest

import (
	"bytes"
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/internal/batchcall"
)

// runStore runs the cases of driver.Store's contract.
func runStore(t *testing.T, newStore NewStore) {
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
		{"CompleteSentAgain", completeSentAgain},
		{"CompleteSentAgainAfterATakeover", completeSentAgainAfterATakeover},
		{"ReleaseFreesKey", releaseFreesKey},
		{"RetentionExpires", retentionExpires},
		{"BinaryKeysAndResults", binaryKeysAndResults},
		{"CancelledContext", cancelledContext},
		{"Batch", batch},
		{"MixedBatch", mixedBatch},
		{"ClaimSentAgain", claimSentAgain},
		{"FingerprintsOfAnyLength", fingerprintsOfAnyLength},
		{"BatchFingerprintsOfAnyLength", batchFingerprintsOfAnyLength},
		{"KeysOfAnyBytes", keysOfAnyBytes},
		{"ShortDurationsRejected", shortDurationsRejected},
		{"LongestDurations", longestDurations},
		{"CancelledContextEveryCall", cancelledContextEveryCall},
		{"BatchCancelledContext", batchCancelledContext},
		{"FencesIncrease", fencesIncrease},
		{"LapsedHolderFenced", lapsedHolderFenced},
		{"BatchFences", batchFences},
		{"DoneRemaining", doneRemaining},
		{"Ready", ready},
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
	r, err := s.store.Claim(ctx, claimReq(key, driver.NewToken(), "fp1", time.Minute))
	require.NoError(t, err)
	require.Equal(t, driver.StateClaimed, r.State)

	r, err = s.store.Claim(ctx, claimReq(key, driver.NewToken(), "fp2", time.Minute))
	require.NoError(t, err)
	require.Equal(t, driver.StateRunning, r.State)
	require.Equal(t, "fp1", r.Fingerprint, "a running claim reports the holder's fingerprint")
	require.Greater(t, r.Remaining, 50*time.Second)
	require.LessOrEqual(t, r.Remaining, time.Minute)
}

func raceOneWinner(t *testing.T, s *suite) {
	ctx, key := ctx(t), s.key("race")
	const n = 64
	var wg sync.WaitGroup
	states := make([]driver.State, n)
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			var r driver.ClaimReply
			r, errs[i] = s.store.Claim(ctx, claimReq(key, driver.NewToken(), "", time.Minute))
			states[i] = r.State
		})
	}
	close(start)
	wg.Wait()
	won := 0
	for i := range n {
		require.NoError(t, errs[i])
		if states[i] == driver.StateClaimed {
			won++
		} else {
			require.Equal(t, driver.StateRunning, states[i])
		}
	}
	require.Equal(t, 1, won, "exactly one of %d racing claims wins", n)
}

func expiredClaimTakenOver(t *testing.T, s *suite) {
	ctx, key := ctx(t), s.key("expire")
	_, err := s.store.Claim(ctx, claimReq(key, driver.NewToken(), "", 50*time.Millisecond))
	require.NoError(t, err)
	s.claimWhenFree(ctx, claimReq(key, driver.NewToken(), "", time.Minute))
}

func tokenSafety(t *testing.T, s *suite) {
	ctx, key := ctx(t), s.key("token")
	old, owner := driver.NewToken(), driver.NewToken()
	_, err := s.store.Claim(ctx, claimReq(key, old, "", 50*time.Millisecond))
	require.NoError(t, err)
	s.claimWhenFree(ctx, claimReq(key, owner, "", time.Minute))

	require.ErrorIs(t, s.store.Extend(ctx, key, old, time.Minute), core.ErrLeaseLost)
	require.ErrorIs(t, s.store.Release(ctx, key, old), core.ErrLeaseLost)
	require.ErrorIs(t, s.store.Complete(ctx, driver.CompleteRequest{Key: key, Token: old, Retention: time.Minute}), core.ErrLeaseLost)

	r, err := s.store.Claim(ctx, claimReq(key, driver.NewToken(), "", time.Minute))
	require.NoError(t, err)
	require.Equal(t, driver.StateRunning, r.State, "the old owner touched the new owner's claim")
	require.NoError(t, s.store.Release(ctx, key, owner))
}

func extend(t *testing.T, s *suite) {
	ctx, key := ctx(t), s.key("extend")
	tok := driver.NewToken()
	_, err := s.store.Claim(ctx, claimReq(key, tok, "", time.Second))
	require.NoError(t, err)
	require.NoError(t, s.store.Extend(ctx, key, tok, time.Minute))
	r, err := s.store.Claim(ctx, claimReq(key, driver.NewToken(), "", time.Minute))
	require.NoError(t, err)
	require.Equal(t, driver.StateRunning, r.State)
	require.Greater(t, r.Remaining, 50*time.Second, "Extend renewed the lease")

	require.ErrorIs(t, s.store.Extend(ctx, s.key("absent"), tok, time.Minute), core.ErrLeaseLost)
}

func completeKeepsResult(t *testing.T, s *suite) {
	ctx, key := ctx(t), s.key("result")
	tok := driver.NewToken()
	_, err := s.store.Claim(ctx, claimReq(key, tok, "fp", time.Minute))
	require.NoError(t, err)
	require.NoError(t, s.store.Complete(ctx, driver.CompleteRequest{Key: key, Token: tok, Fingerprint: "fp", Result: []byte("42"), Retention: time.Minute}))
	r, err := s.store.Claim(ctx, claimReq(key, driver.NewToken(), "fp", time.Minute))
	require.NoError(t, err)
	require.Equal(t, driver.StateDone, r.State)
	require.Equal(t, "fp", r.Fingerprint)
	require.Equal(t, []byte("42"), r.Result)

	key2, tok2 := s.key("noresult"), driver.NewToken()
	_, err = s.store.Claim(ctx, claimReq(key2, tok2, "", time.Minute))
	require.NoError(t, err)
	require.NoError(t, s.store.Complete(ctx, driver.CompleteRequest{Key: key2, Token: tok2, Retention: time.Minute}))
	r, err = s.store.Claim(ctx, claimReq(key2, driver.NewToken(), "", time.Minute))
	require.NoError(t, err)
	require.Equal(t, driver.StateDone, r.State)
	require.Empty(t, r.Result)
	require.Empty(t, r.Fingerprint)
}

func completeOnlyOnce(t *testing.T, s *suite) {
	ctx, key := ctx(t), s.key("once")
	tok := driver.NewToken()
	fence := s.fence(s.store.Claim(ctx, claimReq(key, tok, "", time.Minute)))
	req := driver.CompleteRequest{Key: key, Token: tok, Retention: time.Minute, Fence: fence}
	require.NoError(t, s.store.Complete(ctx, req))
	require.ErrorIs(t, s.store.Extend(ctx, key, tok, time.Minute), core.ErrLeaseLost, "a done marker is not a claim")
	require.ErrorIs(t, s.store.Release(ctx, key, tok), core.ErrLeaseLost, "release never deletes a done marker")
	other := driver.CompleteRequest{Key: key, Token: driver.NewToken(), Retention: time.Minute, Fence: fence + 1}
	require.ErrorIs(t, s.store.Complete(ctx, other), core.ErrLeaseLost, "a token that never held the key")
	r, err := s.store.Claim(ctx, claimReq(key, driver.NewToken(), "", time.Minute))
	require.NoError(t, err)
	require.Equal(t, driver.StateDone, r.State)
}

// completeSentAgain: a complete sent again by the claim that wrote the done
// marker (a client retrying after its reply was lost) answers nil, and
// changes neither the marker nor its retention; one by another token on the
// key answers ErrLeaseLost; duplicates read the stored result throughout.
// Alone and in a batch.
func completeSentAgain(t *testing.T, s *suite) {
	ctx := ctx(t)
	bs, batches := s.store.(driver.BatchStore)
	for _, batched := range []bool{false, true} {
		if batched && !batches {
			continue
		}
		complete := func(req driver.CompleteRequest) error {
			if batched {
				return batchcall.Completes(ctx, bs, []driver.CompleteRequest{req})[0]
			}
			return s.store.Complete(ctx, req)
		}
		key, tok := s.key("complete-again-"+strconv.FormatBool(batched)), driver.NewToken()
		fence := s.fence(s.store.Claim(ctx, claimReq(key, tok, "fp", time.Minute)))
		req := driver.CompleteRequest{Key: key, Token: tok, Fingerprint: "fp", Result: []byte("r"), Retention: 30 * time.Second, Fence: fence}
		require.NoError(t, complete(req))
		require.NoError(t, complete(req), "the same complete sent again finds its own marker")
		require.NoError(t, complete(req), "and again")

		for _, other := range []driver.CompleteRequest{
			{Key: key, Token: driver.NewToken(), Fingerprint: "fp", Result: []byte("r"), Retention: time.Minute, Fence: fence + 1},
			{Key: key, Token: driver.NewToken(), Fingerprint: "fp", Result: []byte("r"), Retention: time.Minute},
		} {
			require.ErrorIs(t, complete(other), core.ErrLeaseLost, "another token never takes the marker for its own")
		}
		r, err := s.store.Claim(ctx, claimReq(key, driver.NewToken(), "fp", time.Minute))
		require.NoError(t, err)
		require.Equal(t, driver.StateDone, r.State)
		require.Equal(t, "fp", r.Fingerprint)
		require.Equal(t, []byte("r"), r.Result, "a duplicate reads the stored result")
		require.LessOrEqual(t, r.Remaining, 30*time.Second, "a complete sent again does not renew the retention")
		require.Greater(t, r.Remaining, 20*time.Second)
	}
}

// completeSentAgainAfterATakeover: claim A lapses, claim B takes the key
// over and writes a done marker equal to the one A would write; A's
// complete, sent late, answers ErrLeaseLost and B's marker stands.
func completeSentAgainAfterATakeover(t *testing.T, s *suite) {
	ctx, key := ctx(t), s.key("complete-takeover")
	a, b := driver.NewToken(), driver.NewToken()
	fenceA := s.fence(s.store.Claim(ctx, claimReq(key, a, "fp", 50*time.Millisecond)))
	fenceB := s.claimWhenFree(ctx, claimReq(key, b, "fp", time.Minute)).Fence
	require.NoError(t, s.store.Complete(ctx, driver.CompleteRequest{Key: key, Token: b, Fingerprint: "fp", Result: []byte("b"), Retention: time.Minute, Fence: fenceB}))
	require.ErrorIs(t, s.store.Complete(ctx, driver.CompleteRequest{Key: key, Token: a, Fingerprint: "fp", Result: []byte("b"), Retention: time.Minute, Fence: fenceA}),
		core.ErrLeaseLost, "A's complete never takes B's marker for its own")
	r, err := s.store.Claim(ctx, claimReq(key, driver.NewToken(), "fp", time.Minute))
	require.NoError(t, err)
	require.Equal(t, driver.StateDone, r.State)
	require.Equal(t, []byte("b"), r.Result)
}

func releaseFreesKey(t *testing.T, s *suite) {
	ctx, key := ctx(t), s.key("release")
	tok := driver.NewToken()
	_, err := s.store.Claim(ctx, claimReq(key, tok, "", time.Minute))
	require.NoError(t, err)
	require.ErrorIs(t, s.store.Release(ctx, key, driver.NewToken()), core.ErrLeaseLost, "a stranger cannot release")
	require.NoError(t, s.store.Release(ctx, key, tok))
	require.ErrorIs(t, s.store.Release(ctx, key, tok), core.ErrLeaseLost)
	r, err := s.store.Claim(ctx, claimReq(key, driver.NewToken(), "", time.Minute))
	require.NoError(t, err)
	require.Equal(t, driver.StateClaimed, r.State)
}

// retentionExpires: a done marker is read as done within its Retention and
// lets the key be claimed after it. A claim answered within Retention of the
// complete being sent must read the marker; one answered later (a loaded
// machine) proves nothing, and the case tries again with a Retention twice
// as long, on a new key.
func retentionExpires(t *testing.T, s *suite) {
	ctx := ctx(t)
	for retention := 100 * time.Millisecond; ; retention *= 2 {
		key := s.key("retention-" + retention.String())
		tok := driver.NewToken()
		_, err := s.store.Claim(ctx, claimReq(key, tok, "", time.Minute))
		require.NoError(t, err)
		sent := time.Now()
		require.NoError(t, s.store.Complete(ctx, driver.CompleteRequest{Key: key, Token: tok, Retention: retention}))
		r, err := s.store.Claim(ctx, claimReq(key, driver.NewToken(), "", time.Minute))
		require.NoError(t, err)
		if time.Since(sent) < retention || retention >= 10*time.Second {
			require.Equal(t, driver.StateDone, r.State, "a claim answered within the Retention of the marker, %s", retention)
		} else if r.State != driver.StateDone {
			continue
		}
		s.claimWhenFree(ctx, claimReq(key, driver.NewToken(), "", time.Minute))
		return
	}
}

func binaryKeysAndResults(t *testing.T, s *suite) {
	ctx := ctx(t)
	key := s.key("bin\x00\xff\n é 🚀")
	result := []byte{0, 1, 2, 255, 'R', 'D', 0}
	fp := "f\x00p"
	tok := driver.NewToken()
	tok[0], tok[15] = 0, 0xff
	r, err := s.store.Claim(ctx, claimReq(key, tok, fp, time.Minute))
	require.NoError(t, err)
	require.Equal(t, driver.StateClaimed, r.State)
	r, err = s.store.Claim(ctx, claimReq(s.key("bin\x00\xff\n é 🚁"), driver.NewToken(), "", time.Minute))
	require.NoError(t, err)
	require.Equal(t, driver.StateClaimed, r.State, "keys differing in one byte are different keys")
	require.NoError(t, s.store.Complete(ctx, driver.CompleteRequest{Key: key, Token: tok, Fingerprint: fp, Result: result, Retention: time.Minute}))
	r, err = s.store.Claim(ctx, claimReq(key, driver.NewToken(), fp, time.Minute))
	require.NoError(t, err)
	require.Equal(t, driver.StateDone, r.State)
	require.Equal(t, fp, r.Fingerprint)
	require.Equal(t, result, r.Result)
}

func cancelledContext(t *testing.T, s *suite) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.store.Claim(ctx, claimReq(s.key("cancel"), driver.NewToken(), "", time.Minute))
	require.Error(t, err)
	require.True(t, errors.Is(err, context.Canceled), "got %v", err)
}

func batch(t *testing.T, s *suite) {
	bs, ok := s.store.(driver.BatchStore)
	if !ok {
		t.Skip("store is not a driver.BatchStore")
	}
	ctx := ctx(t)
	toks := make([]driver.Token, 6)
	reqs := make([]driver.ClaimRequest, 6)
	for i := range reqs {
		toks[i] = driver.NewToken()
		key := s.key("batch-" + string(rune('a'+i%3))) // three keys, each twice
		reqs[i] = claimReq(key, toks[i], "", time.Minute)
	}
	replies, errs := batchcall.Claims(ctx, bs, reqs)
	require.Len(t, replies, 6)
	require.Len(t, errs, 6)
	for i := range 3 {
		require.NoError(t, errs[i])
		require.NoError(t, errs[i+3])
		require.Equal(t, driver.StateClaimed, replies[i].State)
		require.Equal(t, driver.StateRunning, replies[i+3].State, "the second claim of a key in one batch finds it running")
	}
	done := []driver.CompleteRequest{
		{Key: reqs[0].Key, Token: toks[0], Result: []byte("a"), Retention: time.Minute},
		{Key: reqs[1].Key, Token: toks[4], Retention: time.Minute}, // not the holder
		{Key: reqs[2].Key, Token: toks[2], Retention: time.Minute},
	}
	errs = batchcall.Completes(ctx, bs, done)
	require.Len(t, errs, 3)
	require.NoError(t, errs[0])
	require.ErrorIs(t, errs[1], core.ErrLeaseLost)
	require.NoError(t, errs[2])
	again := make([]driver.ClaimRequest, 3)
	for i := range again {
		again[i] = claimReq(reqs[i].Key, driver.NewToken(), "", time.Minute)
	}
	replies, errs = batchcall.Claims(ctx, bs, again)
	require.Equal(t, []error{nil, nil, nil}, errs)
	require.Equal(t, driver.StateDone, replies[0].State)
	require.Equal(t, []byte("a"), replies[0].Result)
	require.Equal(t, driver.StateRunning, replies[1].State)
	require.Equal(t, driver.StateDone, replies[2].State)
}

// mixedBatch: one Batch writes done markers and claims other keys, each
// answered on its own: a marker by a token that no longer holds its key is
// ErrLeaseLost, an invalid request fails alone, and the rest stand.
func mixedBatch(t *testing.T, s *suite) {
	bs, ok := s.store.(driver.BatchStore)
	if !ok {
		t.Skip("store is not a driver.BatchStore")
	}
	ctx := ctx(t)
	held := make([]driver.ClaimRequest, 3)
	for i := range held {
		held[i] = claimReq(s.key("mixed-held-"+strconv.Itoa(i)), driver.NewToken(), "", time.Minute)
		s.fence(s.store.Claim(ctx, held[i]))
	}
	completes := []driver.CompleteRequest{
		{Key: held[0].Key, Token: held[0].Token, Result: []byte("r0"), Retention: time.Minute},
		{Key: held[1].Key, Token: driver.NewToken(), Retention: time.Minute}, // not the holder
		{Key: held[2].Key, Token: held[2].Token, Retention: 0},               // invalid
	}
	claims := []driver.ClaimRequest{
		claimReq(s.key("mixed-new-a"), driver.NewToken(), "", time.Minute),
		claimReq(held[1].Key, driver.NewToken(), "", time.Minute),
		claimReq(s.key("mixed-new-b"), driver.NewToken(), "", 0), // invalid
		claimReq(s.key("mixed-new-c"), driver.NewToken(), "", time.Minute),
	}
	replies, claimErrs, completeErrs := bs.Batch(ctx, completes, claims)
	require.Len(t, replies, len(claims))
	require.Len(t, claimErrs, len(claims))
	require.Len(t, completeErrs, len(completes))
	require.NoError(t, completeErrs[0])
	require.ErrorIs(t, completeErrs[1], core.ErrLeaseLost)
	require.Error(t, completeErrs[2])
	require.NotErrorIs(t, completeErrs[2], core.ErrLeaseLost)
	for _, i := range []int{0, 3} {
		require.NoError(t, claimErrs[i])
		require.Equal(t, driver.StateClaimed, replies[i].State)
		require.Positive(t, replies[i].Fence)
	}
	require.NoError(t, claimErrs[1])
	require.Equal(t, driver.StateRunning, replies[1].State, "the key is held by its first claim")
	require.Error(t, claimErrs[2])
	require.Equal(t, driver.ClaimReply{}, replies[2])

	r, err := s.store.Claim(ctx, claimReq(held[0].Key, driver.NewToken(), "", time.Minute))
	require.NoError(t, err)
	require.Equal(t, driver.StateDone, r.State, "the marker written in the batch stands")
	require.Equal(t, []byte("r0"), r.Result)
	require.NoError(t, s.store.Complete(ctx, driver.CompleteRequest{Key: held[2].Key, Token: held[2].Token, Retention: time.Minute}),
		"the invalid marker changed nothing: its claim still holds")
	require.NoError(t, s.store.Complete(ctx, driver.CompleteRequest{Key: claims[0].Key, Token: claims[0].Token, Retention: time.Minute}),
		"the claim granted in the batch holds")
}

// claimSentAgain: a claim request sent again (a client retrying after its
// reply was lost) finds the key held by its own token and reports it
// claimed, not running, with the same fence; the lease is not renewed.
// Other tokens still find it running.
func claimSentAgain(t *testing.T, s *suite) {
	ctx, key := ctx(t), s.key("again")
	req := claimReq(key, driver.NewToken(), "fp", 20*time.Second)
	fence := s.fence(s.store.Claim(ctx, req))
	req.Lease = time.Minute
	require.Equal(t, fence, s.fence(s.store.Claim(ctx, req)), "the claim's own token holds the key, with its fence")
	r, err := s.store.Claim(ctx, claimReq(key, driver.NewToken(), "fp", time.Minute))
	require.NoError(t, err)
	require.Equal(t, driver.StateRunning, r.State)
	require.LessOrEqual(t, r.Remaining, 20*time.Second, "sending a claim again does not renew its lease")
	if bs, ok := s.store.(driver.BatchStore); ok {
		replies, errs := batchcall.Claims(ctx, bs, []driver.ClaimRequest{req, req})
		require.Equal(t, []error{nil, nil}, errs)
		require.Equal(t, fence, s.fence(replies[0], nil))
		require.Equal(t, fence, s.fence(replies[1], nil))
	}
	require.NoError(t, s.store.Complete(ctx, driver.CompleteRequest{Key: key, Token: req.Token, Retention: time.Minute}))
	r, err = s.store.Claim(ctx, req)
	require.NoError(t, err)
	require.Equal(t, driver.StateDone, r.State, "a done marker is not a claim, whoever held it")
}

// fingerprints are the payload fingerprints a user can pass: empty, around
// the lengths where an encoding might switch, long, and binary.
func fingerprints() map[string]string {
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	return map[string]string{
		"empty":      "",
		"1":          "f",
		"127":        strings.Repeat("f", 127),
		"128":        strings.Repeat("f", 128),
		"255":        strings.Repeat("f", 255),
		"256":        strings.Repeat("f", 256),
		"70000":      strings.Repeat("0123456789", 7000),
		"every-byte": string(all),
		"nul":        "\x00",
		"bad-utf8":   "\xff\xfe\xc3\x28 \xed\xa0\x80",
	}
}

// results are the results a job can store. nil and empty differ: a store
// gives back nil for a marker written with a nil Result, and a non-nil
// (maybe empty) slice otherwise.
func results() map[string][]byte {
	big := make([]byte, 70_000)
	for i := range big {
		big[i] = byte(i * 7)
	}
	return map[string][]byte{
		"nil":   nil,
		"empty": {},
		"nul":   {0},
		"big":   big,
	}
}

func requireResult(t *testing.T, want, got []byte, msg string) {
	t.Helper()
	require.Equal(t, want == nil, got == nil, "%s: nil result %v, got nil %v", msg, want == nil, got == nil)
	require.True(t, bytes.Equal(want, got), "%s: result of %d bytes came back as %d bytes", msg, len(want), len(got))
}

// fingerprintsOfAnyLength: every fingerprint a user can pass is kept with a
// claim and with a done marker, with every kind of result, and read back
// exactly.
func fingerprintsOfAnyLength(t *testing.T, s *suite) {
	ctx := ctx(t)
	for fname, fp := range fingerprints() {
		for rname, result := range results() {
			what := "fingerprint " + fname + ", result " + rname
			key, tok := s.key("fp-"+fname+"-"+rname), driver.NewToken()
			r, err := s.store.Claim(ctx, claimReq(key, tok, fp, time.Minute))
			require.NoError(t, err, what)
			require.Equal(t, driver.StateClaimed, r.State, what)
			r, err = s.store.Claim(ctx, claimReq(key, driver.NewToken(), "other", time.Minute))
			require.NoError(t, err, what)
			require.Equal(t, driver.StateRunning, r.State, what)
			require.True(t, fp == r.Fingerprint, "%s: a running claim gave back a fingerprint of %d bytes", what, len(r.Fingerprint))
			require.NoError(t, s.store.Complete(ctx, driver.CompleteRequest{Key: key, Token: tok, Fingerprint: fp, Result: result, Retention: time.Minute}), what)
			r, err = s.store.Claim(ctx, claimReq(key, driver.NewToken(), fp, time.Minute))
			require.NoError(t, err, what)
			require.Equal(t, driver.StateDone, r.State, what)
			require.True(t, fp == r.Fingerprint, "%s: a done marker gave back a fingerprint of %d bytes", what, len(r.Fingerprint))
			requireResult(t, result, r.Result, what)
		}
	}
}

// batchFingerprintsOfAnyLength is fingerprintsOfAnyLength through ClaimBatch
// and CompleteBatch, every combination in one batch.
func batchFingerprintsOfAnyLength(t *testing.T, s *suite) {
	bs, ok := s.store.(driver.BatchStore)
	if !ok {
		t.Skip("store is not a driver.BatchStore")
	}
	ctx := ctx(t)
	var (
		claims    []driver.ClaimRequest
		completes []driver.CompleteRequest
		names     []string
	)
	for fname, fp := range fingerprints() {
		for rname, result := range results() {
			key, tok := s.key("bfp-"+fname+"-"+rname), driver.NewToken()
			claims = append(claims, claimReq(key, tok, fp, time.Minute))
			completes = append(completes, driver.CompleteRequest{Key: key, Token: tok, Fingerprint: fp, Result: result, Retention: time.Minute})
			names = append(names, "fingerprint "+fname+", result "+rname)
		}
	}
	replies, errs := batchcall.Claims(ctx, bs, claims)
	require.Len(t, replies, len(claims))
	require.Len(t, errs, len(claims))
	for i := range claims {
		require.NoError(t, errs[i], names[i])
		require.Equal(t, driver.StateClaimed, replies[i].State, names[i])
	}
	errs = batchcall.Completes(ctx, bs, completes)
	require.Len(t, errs, len(completes))
	for i := range completes {
		require.NoError(t, errs[i], names[i])
	}
	again := make([]driver.ClaimRequest, len(claims))
	for i, c := range claims {
		again[i] = claimReq(c.Key, driver.NewToken(), c.Fingerprint, time.Minute)
	}
	replies, errs = batchcall.Claims(ctx, bs, again)
	for i, c := range completes {
		require.NoError(t, errs[i], names[i])
		require.Equal(t, driver.StateDone, replies[i].State, names[i])
		require.True(t, c.Fingerprint == replies[i].Fingerprint, "%s: fingerprint of %d bytes came back as %d bytes", names[i], len(c.Fingerprint), len(replies[i].Fingerprint))
		requireResult(t, c.Result, replies[i].Result, names[i])
	}
}

// keysOfAnyBytes: keys are byte strings. Keys that differ in one byte, in
// invalid UTF-8 or in a trailing NUL are different keys.
func keysOfAnyBytes(t *testing.T, s *suite) {
	ctx := ctx(t)
	names := []string{"\x00", "\x00\x00", "\xff", "\xff\xfe\xc3\x28", "k\x00", "k", "K", strings.Repeat("\xfe", 1000)}
	toks := make([]driver.Token, len(names))
	for i, n := range names {
		toks[i] = driver.NewToken()
		r, err := s.store.Claim(ctx, claimReq(s.key(n), toks[i], "fp", time.Minute))
		require.NoError(t, err, "key %d", i)
		require.Equal(t, driver.StateClaimed, r.State, "key %d is a key of its own", i)
	}
	for i, n := range names {
		require.NoError(t, s.store.Extend(ctx, s.key(n), toks[i], time.Minute), "key %d", i)
		require.NoError(t, s.store.Complete(ctx, driver.CompleteRequest{Key: s.key(n), Token: toks[i], Fingerprint: n, Result: []byte(n), Retention: time.Minute}), "key %d", i)
	}
	for i, n := range names {
		r, err := s.store.Claim(ctx, claimReq(s.key(n), driver.NewToken(), "", time.Minute))
		require.NoError(t, err, "key %d", i)
		require.Equal(t, driver.StateDone, r.State, "key %d", i)
		require.Equal(t, n, r.Fingerprint, "key %d kept its own marker", i)
	}
	key, tok := s.key("release\x00\xff"), driver.NewToken()
	_, err := s.store.Claim(ctx, claimReq(key, tok, "", time.Minute))
	require.NoError(t, err)
	require.NoError(t, s.store.Release(ctx, key, tok))
}

// shortDurations are durations no store can keep: Redis expires keys in
// whole milliseconds, so every store asks for at least 1ms.
var shortDurations = []time.Duration{0, -time.Second, time.Nanosecond, 500 * time.Microsecond, time.Millisecond - 1}

func requireDurationError(t *testing.T, err error, field string, d time.Duration) {
	t.Helper()
	require.Error(t, err, "%s of %s", field, d)
	require.Contains(t, err.Error(), field, "the error names the field")
	require.Contains(t, err.Error(), "1ms", "the error gives the accepted range")
	require.False(t, errors.Is(err, core.ErrLeaseLost), "a bad duration is not a lost lease")
}

// shortDurationsRejected: a lease, an extension or a retention under 1ms
// gives an error naming the field, and changes nothing.
func shortDurationsRejected(t *testing.T, s *suite) {
	ctx := ctx(t)
	key, tok := s.key("short"), driver.NewToken()
	for _, d := range shortDurations {
		_, err := s.store.Claim(ctx, claimReq(key, driver.NewToken(), "", d))
		requireDurationError(t, err, "Lease", d)
	}
	r, err := s.store.Claim(ctx, claimReq(key, tok, "", time.Minute))
	require.NoError(t, err)
	require.Equal(t, driver.StateClaimed, r.State, "a rejected claim wrote nothing")
	for _, d := range shortDurations {
		requireDurationError(t, s.store.Extend(ctx, key, tok, d), "lease", d)
		requireDurationError(t, s.store.Complete(ctx, driver.CompleteRequest{Key: key, Token: tok, Retention: d}), "Retention", d)
	}
	r, err = s.store.Claim(ctx, claimReq(key, driver.NewToken(), "", time.Minute))
	require.NoError(t, err)
	require.Equal(t, driver.StateRunning, r.State, "rejected calls left the claim alone")
	require.Greater(t, r.Remaining, 50*time.Second, "a rejected Extend did not shorten the lease")

	key2, tok2 := s.key("one-ms"), driver.NewToken()
	r, err = s.store.Claim(ctx, claimReq(key2, tok2, "", time.Millisecond))
	require.NoError(t, err, "1ms is accepted")
	require.Equal(t, driver.StateClaimed, r.State)

	if bs, ok := s.store.(driver.BatchStore); ok {
		key3, tok3 := s.key("short-batch"), driver.NewToken()
		replies, errs := batchcall.Claims(ctx, bs, []driver.ClaimRequest{
			claimReq(s.key("short-batch-bad"), driver.NewToken(), "", 500*time.Microsecond),
			claimReq(key3, tok3, "", time.Minute),
		})
		requireDurationError(t, errs[0], "Lease", 500*time.Microsecond)
		require.NoError(t, errs[1])
		require.Equal(t, driver.StateClaimed, replies[1].State)
		errs = batchcall.Completes(ctx, bs, []driver.CompleteRequest{
			{Key: key3, Token: tok3, Retention: 0},
			{Key: key, Token: tok, Retention: time.Minute},
		})
		requireDurationError(t, errs[0], "Retention", 0)
		require.NoError(t, errs[1])
		r, err = s.store.Claim(ctx, claimReq(key3, driver.NewToken(), "", time.Minute))
		require.NoError(t, err)
		require.Equal(t, driver.StateRunning, r.State, "a rejected complete wrote nothing")
	}
}

// longestDurations: the longest time.Duration (about 292 years) works as a
// lease, an extension and a retention, and the remaining lease reported back
// does not overflow. Its done marker outlives the test: the store's own
// cleanup must remove it.
func longestDurations(t *testing.T, s *suite) {
	ctx := ctx(t)
	const longest = time.Duration(math.MaxInt64)
	key, tok := s.key("longest"), driver.NewToken()
	r, err := s.store.Claim(ctx, claimReq(key, tok, "", longest))
	require.NoError(t, err)
	require.Equal(t, driver.StateClaimed, r.State)
	r, err = s.store.Claim(ctx, claimReq(key, driver.NewToken(), "", time.Minute))
	require.NoError(t, err)
	require.Equal(t, driver.StateRunning, r.State)
	require.Greater(t, r.Remaining, 290*365*24*time.Hour, "the remaining lease is about 292 years, got %s", r.Remaining)
	require.NoError(t, s.store.Extend(ctx, key, tok, longest))
	r, err = s.store.Claim(ctx, claimReq(key, driver.NewToken(), "", time.Minute))
	require.NoError(t, err)
	require.Greater(t, r.Remaining, 290*365*24*time.Hour, "the remaining lease is about 292 years, got %s", r.Remaining)
	require.NoError(t, s.store.Complete(ctx, driver.CompleteRequest{Key: key, Token: tok, Retention: longest}))
	r, err = s.store.Claim(ctx, claimReq(key, driver.NewToken(), "", time.Minute))
	require.NoError(t, err)
	require.Equal(t, driver.StateDone, r.State)
}

func requireCancelled(t *testing.T, err error, want error, what string) {
	t.Helper()
	require.Error(t, err, what)
	require.True(t, errors.Is(err, want), "%s: want an error wrapping %v, got %v", what, want, err)
	require.False(t, errors.Is(err, core.ErrLeaseLost), "%s: a cancelled call is not a lost lease", what)
}

// cancelledContextEveryCall: every call made with a cancelled or expired
// context returns an error wrapping the context's error and changes nothing.
func cancelledContextEveryCall(t *testing.T, s *suite) {
	live := ctx(t)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	for _, c := range []struct {
		ctx  context.Context
		want error
	}{{cancelled, context.Canceled}, {expired, context.DeadlineExceeded}} {
		key, tok := s.key("cancel-every-"+c.want.Error()), driver.NewToken()
		_, err := s.store.Claim(c.ctx, claimReq(key, tok, "", time.Minute))
		requireCancelled(t, err, c.want, "Claim")
		r, err := s.store.Claim(live, claimReq(key, tok, "", 20*time.Second))
		require.NoError(t, err)
		require.Equal(t, driver.StateClaimed, r.State, "a cancelled Claim wrote nothing")

		requireCancelled(t, s.store.Extend(c.ctx, key, tok, time.Minute), c.want, "Extend")
		requireCancelled(t, s.store.Complete(c.ctx, driver.CompleteRequest{Key: key, Token: tok, Retention: time.Minute}), c.want, "Complete")
		requireCancelled(t, s.store.Release(c.ctx, key, tok), c.want, "Release")
		r, err = s.store.Claim(live, claimReq(key, driver.NewToken(), "", time.Minute))
		require.NoError(t, err)
		require.Equal(t, driver.StateRunning, r.State, "cancelled calls left the claim alone")
		require.LessOrEqual(t, r.Remaining, 20*time.Second, "a cancelled Extend did not extend")
		require.NoError(t, s.store.Release(live, key, tok))
	}
}

// ready: a driver.ReadyStore that answers claims is ready, and a call of
// Ready with a cancelled or expired context returns an error wrapping the
// context's error.
func ready(t *testing.T, s *suite) {
	rs, ok := s.store.(driver.ReadyStore)
	if !ok {
		t.Skip("store is not a driver.ReadyStore")
	}
	live := ctx(t)
	_, err := s.store.Claim(live, claimReq(s.key("ready"), driver.NewToken(), "", time.Minute))
	require.NoError(t, err)
	require.NoError(t, rs.Ready(live))
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	requireCancelled(t, rs.Ready(cancelled), context.Canceled, "Ready")
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	requireCancelled(t, rs.Ready(expired), context.DeadlineExceeded, "Ready")
}

// batchCancelledContext: a batch call with a cancelled or expired context
// answers every request with an error wrapping the context's error, and
// writes nothing.
func batchCancelledContext(t *testing.T, s *suite) {
	bs, ok := s.store.(driver.BatchStore)
	if !ok {
		t.Skip("store is not a driver.BatchStore")
	}
	live := ctx(t)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	for _, c := range []struct {
		ctx  context.Context
		want error
	}{{cancelled, context.Canceled}, {expired, context.DeadlineExceeded}} {
		const n = 5
		claims := make([]driver.ClaimRequest, n)
		completes := make([]driver.CompleteRequest, n)
		for i := range n {
			key, tok := s.key("batch-cancel-"+c.want.Error()+"-"+string(rune('a'+i))), driver.NewToken()
			claims[i] = claimReq(key, tok, "fp", time.Minute)
			completes[i] = driver.CompleteRequest{Key: key, Token: tok, Fingerprint: "fp", Result: []byte("r"), Retention: time.Minute}
		}
		replies, errs := batchcall.Claims(c.ctx, bs, claims)
		require.Len(t, replies, n)
		require.Len(t, errs, n)
		for i := range n {
			requireCancelled(t, errs[i], c.want, "ClaimBatch")
			require.Zero(t, replies[i].State, "an unanswered claim has no state")
		}
		replies, errs = batchcall.Claims(live, bs, claims)
		for i := range n {
			require.NoError(t, errs[i])
			require.Equal(t, driver.StateClaimed, replies[i].State, "a cancelled ClaimBatch wrote nothing")
		}

		errs = batchcall.Completes(c.ctx, bs, completes)
		require.Len(t, errs, n)
		for i := range n {
			requireCancelled(t, errs[i], c.want, "CompleteBatch")
		}
		for i := range n {
			r, err := s.store.Claim(live, claimReq(claims[i].Key, driver.NewToken(), "fp", time.Minute))
			require.NoError(t, err)
			require.Equal(t, driver.StateRunning, r.State, "a cancelled CompleteBatch wrote no marker")
		}
		errs = batchcall.Completes(live, bs, completes)
		require.Equal(t, make([]error, n), errs)
	}
}
