package redisstore

import (
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/jobonce/jobonce/core/driver"
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
		require.Equal(t, driver.ClaimReply{State: driver.StateRunning, Fingerprint: fp, Remaining: 1500 * time.Millisecond}, r)
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
		done := doneValue(fp, result)
		r, err = parseValue(done, 100)
		require.NoError(t, err)
		require.Equal(t, driver.StateDone, r.State)
		require.Equal(t, fp, r.Fingerprint)
		require.Equal(t, 100*time.Millisecond, r.Remaining, "a done marker's remaining retention is its TTL")
		require.Equal(t, string(result), string(r.Result))
		require.Equal(t, result == nil, r.Result == nil, "nil and empty results stay apart")
		require.LessOrEqual(t, len(done), 1+varintLen(len(fp))+len(fp)+len(result))
		require.NotEqual(t, ownerValue(token), done[:min(len(done), ownerLen)], "a done marker never matches an owner")
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

// TestShortFingerprintMarkersKeepTheirEncoding pins the encoding of done
// markers with fingerprints up to 255 bytes, so markers written by earlier
// versions are still read, and earlier versions still read new ones.
func TestShortFingerprintMarkersKeepTheirEncoding(t *testing.T) {
	require.Equal(t, "dfp", doneValue("fp", nil))
	require.Equal(t, "D\x02fpres", doneValue("fp", []byte("res")))
	fp := strings.Repeat("f", 255)
	require.Equal(t, "D\xff"+fp+"r", doneValue(fp, []byte("r")))
	require.Equal(t, "L\x80\x02f"+fp+"r", doneValue("f"+fp, []byte("r")))
}

func TestMalformedValues(t *testing.T) {
	for _, v := range []string{"L", "L\x80", "L\x05abcd", "L\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", "D\x05ab",
		"F" + strings.Repeat("t", 16+7), "R" + strings.Repeat("t", 15)} {
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
