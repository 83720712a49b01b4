package redisstore

import (
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/internal/redisops"
	"github.com/stretchr/testify/require"
)

func FuzzRecord(f *testing.F) {
	f.Add([]byte("tok"), int64(1796123369220322), "fp", []byte("result"), false)
	f.Add([]byte{}, int64(1), "", []byte{}, false)
	f.Add([]byte{}, int64(0), "", []byte{}, true)
	f.Add([]byte{0, 0xff}, int64(1<<53-1), "f\x00", []byte{'D', 0, 'R'}, false)
	f.Add([]byte{1}, int64(255), strings.Repeat("\xff", 256), []byte{}, false)
	f.Add([]byte{1}, int64(1<<40), strings.Repeat("f", 70_000), []byte("r"), false)
	f.Fuzz(func(t *testing.T, tok []byte, fence int64, fp string, result []byte, nilResult bool) {
		var token driver.Token
		copy(token[:], tok)
		fence = max(fence, 1)
		running := runningValue(token, fence, fp)
		r, err := parseValue(running, 1500)
		require.NoError(t, err)
		require.Equal(t, driver.ClaimReply{State: driver.StateRunning, Fingerprint: fp, Remaining: 1500 * time.Millisecond, Fence: fence}, r,
			"a running claim is read with its fence")
		require.Equal(t, ownerValue(token), running[:ownerLen])
		require.Equal(t, fence, runningFence(running))
		unfenced := "R" + string(token[:]) + fp
		r, err = parseValue(unfenced, 1500)
		require.NoError(t, err)
		require.Equal(t, driver.ClaimReply{State: driver.StateRunning, Fingerprint: fp, Remaining: 1500 * time.Millisecond}, r,
			"a claim written before fences is read")
		require.Zero(t, runningFence(unfenced))
		require.NotEqual(t, ownerValue(token), unfenced[:ownerLen], "a claim written before fences never matches an owner")

		if nilResult {
			result = nil
		} else if result == nil {
			result = []byte{}
		}
		done := doneValue(token, fp, result, false)
		r, err = parseValue(done, 100)
		require.NoError(t, err)
		require.Equal(t, driver.StateDone, r.State)
		require.Equal(t, fp, r.Fingerprint)
		require.Equal(t, 100*time.Millisecond, r.Remaining, "a done marker's remaining retention is its TTL")
		require.Equal(t, string(result), string(r.Result))
		require.Equal(t, result == nil, r.Result == nil, "nil and empty results stay apart")
		require.LessOrEqual(t, len(done), writerLen+1+varintLen(len(fp))+len(fp)+len(result))
		require.NotEqual(t, ownerValue(token), done[:min(len(done), ownerLen)], "a done marker never matches an owner")
		require.Equal(t, "w"+string(token[:8]), done[:writerLen], "a done marker names its writer")

		legacy := done[writerLen:] // as written before markers named their writer
		require.Equal(t, legacy, doneValue(token, fp, result, true), "Config.LegacyMarkers writes the done value alone")
		r2, err := parseValue(legacy, 100)
		require.NoError(t, err)
		require.Equal(t, r, r2, "a marker written before writers were kept reads the same")
	})
}

// runningValue is the running value claim.lua writes.
func runningValue(token driver.Token, fence int64, fingerprint string) string {
	return ownerValue(token) + string(binary.BigEndian.AppendUint64(nil, uint64(fence))) + fingerprint
}

func varintLen(n int) int {
	size := 1
	for ; n >= 0x80; n >>= 7 {
		size++
	}
	return size
}

// TestDoneMarkersKeepTheirEncodingAfterTheirWriter pins the encoding of done
// markers: the writer, then the done value markers written by earlier
// versions hold alone, which are still read.
func TestDoneMarkersKeepTheirEncodingAfterTheirWriter(t *testing.T) {
	tok := driver.Token{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	w := "w\x01\x02\x03\x04\x05\x06\x07\x08"
	require.Equal(t, w+"dfp", doneValue(tok, "fp", nil, false))
	require.Equal(t, w+"D\x02fpres", doneValue(tok, "fp", []byte("res"), false))
	fp := strings.Repeat("f", 255)
	require.Equal(t, w+"D\xff"+fp+"r", doneValue(tok, fp, []byte("r"), false))
	require.Equal(t, w+"L\x80\x02f"+fp+"r", doneValue(tok, "f"+fp, []byte("r"), false))
	for _, legacy := range []string{"dfp", "D\x02fpres", "L\x02fpres"} {
		r, err := parseValue(legacy, 100)
		require.NoError(t, err)
		require.Equal(t, driver.StateDone, r.State, "%q", legacy)
		require.Equal(t, "fp", r.Fingerprint)
	}
}

// TestLegacyMarkersAreThePreviousReleasesDoneValues pins the done markers
// Config.LegacyMarkers writes to the layout of the release before writers
// were kept: "d" fingerprint; "D", the fingerprint's length in one byte, the
// fingerprint, the result; "L", the length as a uvarint, the fingerprint,
// the result.
func TestLegacyMarkersAreThePreviousReleasesDoneValues(t *testing.T) {
	tok := driver.Token{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	require.Equal(t, "dfp", doneValue(tok, "fp", nil, true))
	require.Equal(t, "D\x02fp", doneValue(tok, "fp", []byte{}, true))
	require.Equal(t, "D\x02fpres", doneValue(tok, "fp", []byte("res"), true))
	fp := strings.Repeat("f", 255)
	require.Equal(t, "D\xff"+fp+"r", doneValue(tok, fp, []byte("r"), true))
	require.Equal(t, "L\x80\x02f"+fp+"r", doneValue(tok, "f"+fp, []byte("r"), true))
}

func TestMalformedValues(t *testing.T) {
	for _, v := range []string{"L", "L\x80", "L\x05abcd", "L\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", "D\x05ab",
		"F" + strings.Repeat("t", 16+7), "R" + strings.Repeat("t", 15), "w1234567", "w12345678", "w12345678F" + strings.Repeat("t", 24)} {
		_, err := parseValue(v, 100)
		require.ErrorContains(t, err, "did not write", "%q", v)
	}
}

func TestFromMillisSaturates(t *testing.T) {
	require.Equal(t, time.Duration(0), fromMillis(-2))
	require.Equal(t, 1500*time.Millisecond, fromMillis(1500))
	require.Greater(t, fromMillis(1<<62), 290*365*24*time.Hour)
}

func FuzzParseValue(f *testing.F) {
	f.Add("", int64(0))
	f.Add("D\x05ab", int64(-1))
	f.Add("L\x80\x80", int64(5))
	f.Fuzz(func(t *testing.T, v string, pttl int64) {
		_, _ = parseValue(v, pttl) // never panics on foreign values
	})
}

func TestReadHeadNeedsARunningClaimsTagTokenAndFence(t *testing.T) {
	require.Equal(t, ownerLen+fenceLen, redisops.HeadLen)
}
