package redisstore

import (
	"errors"
	"fmt"
	"time"

	"github.com/jobonce/jobonce/core"
)

// A key's value is one string, so a done marker costs one small Redis string:
//
//	running:             "R" token(16 bytes) fingerprint
//	done without result: "d" fingerprint
//	done with result:    "D" len(fingerprint)(1 byte) fingerprint result
//
// The lease and the retention are the key's TTL.

const (
	tagRunning = 'R'
	tagDone    = 'D'
	tagDoneFP  = 'd'
	ownerLen   = 1 + len(core.Token{})
)

// errFingerprintTooLong is returned for fingerprints that do not fit a done marker.
var errFingerprintTooLong = errors.New("jobonce: fingerprint longer than 255 bytes")

// ownerValue returns the prefix of a running value that identifies its owner.
func ownerValue(token core.Token) string {
	var b [ownerLen]byte
	b[0] = tagRunning
	copy(b[1:], token[:])
	return string(b[:])
}

func runningValue(token core.Token, fingerprint string) string {
	b := make([]byte, 0, ownerLen+len(fingerprint))
	b = append(b, tagRunning)
	b = append(b, token[:]...)
	b = append(b, fingerprint...)
	return string(b)
}

func doneValue(fingerprint string, result []byte) (string, error) {
	if len(result) == 0 {
		return string(tagDoneFP) + fingerprint, nil
	}
	if len(fingerprint) > 255 {
		return "", errFingerprintTooLong
	}
	b := make([]byte, 0, 2+len(fingerprint)+len(result))
	b = append(b, tagDone, byte(len(fingerprint)))
	b = append(b, fingerprint...)
	b = append(b, result...)
	return string(b), nil
}

// parseValue decodes a value read back by the claim script.
func parseValue(v string, pttl int64) (core.ClaimReply, error) {
	switch {
	case len(v) >= ownerLen && v[0] == tagRunning:
		return core.ClaimReply{
			State:       core.StateRunning,
			Fingerprint: v[ownerLen:],
			Remaining:   time.Duration(max(pttl, 0)) * time.Millisecond,
		}, nil
	case len(v) >= 1 && v[0] == tagDoneFP:
		return core.ClaimReply{State: core.StateDone, Fingerprint: v[1:]}, nil
	case len(v) >= 2 && v[0] == tagDone && len(v) >= 2+int(v[1]):
		n := 2 + int(v[1])
		var result []byte
		if len(v) > n {
			result = []byte(v[n:])
		}
		return core.ClaimReply{State: core.StateDone, Fingerprint: v[2:n], Result: result}, nil
	}
	return core.ClaimReply{}, fmt.Errorf("jobonce: key holds a value jobonce did not write (%d bytes); is another program using the key prefix?", len(v))
}
