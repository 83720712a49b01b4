package redisstore

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
)

func FuzzRecord(f *testing.F) {
	f.Add([]byte("tok"), "fp", []byte("result"))
	f.Add([]byte{}, "", []byte{})
	f.Add([]byte{0, 0xff}, "f\x00", []byte{'D', 0, 'R'})
	f.Fuzz(func(t *testing.T, tok []byte, fp string, result []byte) {
		var token core.Token
		copy(token[:], tok)
		r, err := parseValue(runningValue(token, fp), 1500)
		require.NoError(t, err)
		require.Equal(t, core.ClaimReply{State: core.StateRunning, Fingerprint: fp, Remaining: 1500 * time.Millisecond}, r)
		require.Equal(t, ownerValue(token), runningValue(token, fp)[:ownerLen])

		done, err := doneValue(fp, result)
		if len(fp) > 255 && len(result) > 0 {
			require.ErrorIs(t, err, errFingerprintTooLong)
			return
		}
		require.NoError(t, err)
		r, err = parseValue(done, 100)
		require.NoError(t, err)
		require.Equal(t, core.StateDone, r.State)
		require.Equal(t, fp, r.Fingerprint)
		require.Equal(t, string(result), string(r.Result))
		require.LessOrEqual(t, len(done), 2+len(fp)+len(result))
		require.NotEqual(t, ownerValue(token), done[:min(len(done), ownerLen)], "a done marker never matches an owner")
	})
}

func FuzzParseValue(f *testing.F) {
	f.Add("", int64(0))
	f.Add("D\x05ab", int64(-1))
	f.Fuzz(func(t *testing.T, v string, pttl int64) {
		_, _ = parseValue(v, pttl) // never panics on foreign values
	})
}
