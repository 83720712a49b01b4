package redisstore

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/jobonce/jobonce/core/driver"
)

// A key's value is one string, so a done marker costs one small Redis string:
//
//	running:             "F" token(16 bytes) fence(8 bytes, big-endian) fingerprint
//	running, unfenced:   "R" token(16 bytes) fingerprint
//	done:                "w" writer(8 bytes) done value
//
// and a done value, alone in markers written before writers were kept:
//
//	done without result: "d" fingerprint
//	done with result:    "D" len(fingerprint)(1 byte) fingerprint result
//	                     "L" len(fingerprint)(uvarint) fingerprint result
//
// claim.lua writes running values, with the fence it read from the server's
// clock. "R" is what versions before fences wrote: it is still read, so a
// claim they hold during an upgrade is reported running with its
// fingerprint. "D" holds fingerprints of up to 255 bytes, "L" longer ones. A
// done marker written with a non-nil Result, even an empty one, is "D" or
// "L", so a duplicate gets back nil exactly when the copy that ran stored
// nil. The writer is the first 8 bytes of the token of the claim that
// wrote the marker: complete.lua tells by it a request sent again by that
// claim (its own marker: written) from another claim's (the lease was
// lost). A marker without one is nobody's, so a request sent again that
// finds it answers the lease lost; Config.LegacyMarkers writes such markers,
// for a rolling upgrade from the release before writers were kept. A done
// marker keeps no fence: the next claim after it expires takes its fence
// from the clock alone. The lease and the retention are the key's TTL.

const (
	tagRunning         = 'F'
	tagRunningUnfenced = 'R'
	tagDone            = 'D'
	tagDoneLong        = 'L'
	tagDoneFP          = 'd'
	tagWriter          = 'w'
	ownerLen           = 1 + len(driver.Token{})
	fenceLen           = 8
	writerLen          = 1 + 8
)

// ownerValue returns the prefix of a running value that identifies its owner.
func ownerValue(token driver.Token) string {
	var b [ownerLen]byte
	b[0] = tagRunning
	copy(b[1:], token[:])
	return string(b[:])
}

// runningFence returns the fence stored in a running value, or 0 when v
// holds none.
func runningFence(v string) int64 {
	if len(v) < ownerLen+fenceLen || v[0] != tagRunning {
		return 0
	}
	return int64(binary.BigEndian.Uint64([]byte(v[ownerLen : ownerLen+fenceLen])))
}

// doneValue returns the done marker token writes. With legacy
// (Config.LegacyMarkers) it is the done value alone, as the release before
// writers were kept wrote and reads it: it names no writer.
func doneValue(token driver.Token, fingerprint string, result []byte, legacy bool) string {
	w := writerLen
	if legacy {
		w = 0
	}
	var b []byte
	switch {
	case result == nil:
		b = make([]byte, 0, w+1+len(fingerprint))
		b = appendWriter(b, token, legacy)
		b = append(b, tagDoneFP)
	case len(fingerprint) <= 255:
		b = make([]byte, 0, w+2+len(fingerprint)+len(result))
		b = appendWriter(b, token, legacy)
		b = append(b, tagDone, byte(len(fingerprint)))
	default:
		b = make([]byte, 0, w+1+binary.MaxVarintLen64+len(fingerprint)+len(result))
		b = appendWriter(b, token, legacy)
		b = append(b, tagDoneLong)
		b = binary.AppendUvarint(b, uint64(len(fingerprint)))
	}
	b = append(b, fingerprint...)
	b = append(b, result...)
	return string(b)
}

func appendWriter(b []byte, token driver.Token, legacy bool) []byte {
	if legacy {
		return b
	}
	b = append(b, tagWriter)
	return append(b, token[:writerLen-1]...)
}

// parseValue decodes a value read back by the claim script, with the key's
// TTL: a running claim's remaining lease or a done marker's remaining
// retention.
func parseValue(v string, pttl int64) (driver.ClaimReply, error) {
	remaining := fromMillis(pttl)
	switch {
	case len(v) >= ownerLen+fenceLen && v[0] == tagRunning:
		return driver.ClaimReply{State: driver.StateRunning, Fingerprint: v[ownerLen+fenceLen:], Remaining: remaining, Fence: runningFence(v)}, nil
	case len(v) >= ownerLen && v[0] == tagRunningUnfenced:
		return driver.ClaimReply{State: driver.StateRunning, Fingerprint: v[ownerLen:], Remaining: remaining}, nil
	case len(v) >= writerLen && v[0] == tagWriter:
		return parseDone(v, v[writerLen:], remaining)
	}
	return parseDone(v, v, remaining)
}

// parseDone decodes d, the done value of v.
func parseDone(v, d string, remaining time.Duration) (driver.ClaimReply, error) {
	switch {
	case len(d) >= 1 && d[0] == tagDoneFP:
		return driver.ClaimReply{State: driver.StateDone, Fingerprint: d[1:], Remaining: remaining}, nil
	case len(d) >= 2 && d[0] == tagDone && len(d) >= 2+int(d[1]):
		return doneReply(d, 2, int(d[1]), remaining)
	case len(d) >= 1 && d[0] == tagDoneLong:
		n, size := binary.Uvarint([]byte(d[1:min(len(d), 1+binary.MaxVarintLen64)]))
		if size > 0 && n <= uint64(len(d)-1-size) {
			return doneReply(d, 1+size, int(n), remaining)
		}
	}
	return driver.ClaimReply{}, fmt.Errorf("jobonce: redisstore: key holds a value jobonce did not write (%d bytes); is another program using the key prefix?", len(v))
}

// doneReply decodes a done marker with a result: the fingerprint is the n
// bytes at v[at:], the result is what follows.
func doneReply(v string, at, n int, remaining time.Duration) (driver.ClaimReply, error) {
	result := make([]byte, len(v)-at-n) // not nil, even when empty
	copy(result, v[at+n:])
	return driver.ClaimReply{State: driver.StateDone, Fingerprint: v[at : at+n], Result: result, Remaining: remaining}, nil
}

// fromMillis converts a TTL in milliseconds to a Duration, saturating at
// the longest Duration.
func fromMillis(ms int64) time.Duration {
	const most = int64(time.Duration(1<<63-1) / time.Millisecond)
	return time.Duration(min(max(ms, 0), most)) * time.Millisecond
}
