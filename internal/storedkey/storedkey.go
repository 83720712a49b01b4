// Package storedkey derives the keys and fingerprints a store holds from
// the ones a job names: hashed by default, plain (prefixed) on request, and
// the namespace of Guard.Enqueue's markers kept apart from both.
package storedkey

import (
	"crypto/sha256"
	"encoding/ascii85"
	"encoding/base64"
	"strings"
)

// MaxKeyLen is the longest key stored as it is under Config.PlainKeys. A longer key is
// replaced by "#" and the unpadded base64url SHA-256 of the key (44 bytes),
// so no stored key exceeds len(prefix)+MaxKeyLen bytes whatever the caller
// passes.
const MaxKeyLen = 128

// maxFingerprintLen is the longest fingerprint the Guard hands to its store
// as it is. A longer one is stored as "#" and the unpadded base64url SHA-256
// of it (44 bytes), so fingerprints of any length work on every store.
const maxFingerprintLen = 64

// HashBytes is how many bytes of SHA-256 hashedKey and core.Fingerprint keep:
// 128 bits, so that at 10⁹ distinct keys a day two of them collide about
// once in 10¹⁹ years.
const HashBytes = 16

// enqueueNamespace follows the prefix in Guard.Enqueue's markers. plainKey hashes
// every key that starts with it (or with "#"), so no job key can be stored
// under the name of an Enqueue marker.
const enqueueNamespace = "enq#"

// Key returns the key a store holds for a user key under prefix, as a
// Guard derives it for leased claims and its transactional mode alike:
// hashedKey by default, plainKey when plain is set (Config.PlainKeys). It
// reports false when key is empty. Any bytes are allowed in key.
func Key(prefix, key string, plain bool) (string, bool) {
	if plain {
		return plainKey(prefix, key)
	}
	return hashedKey(prefix, key)
}

// plainKey returns prefix and key, readable in redis-cli. A key longer than
// MaxKeyLen, or one that starts with "#" or "enq#" (names the Guard keeps for
// hashed keys and Enqueue markers), is stored as "#" and its SHA-256 instead.
// It reports false when key is empty.
func plainKey(prefix, key string) (string, bool) {
	if key == "" {
		return "", false
	}
	if len(key) <= MaxKeyLen && !strings.HasPrefix(key, "#") && !strings.HasPrefix(key, enqueueNamespace) {
		return prefix + key, true
	}
	return prefix + "#" + hash(key, sha256.Size), true
}

// hashedKey returns the compact stored key the Guard uses by default: prefix
// followed by 128 bits of the key's SHA-256 in Ascii85 (20 printable
// characters, none of them a brace, so never a Redis Cluster hash tag).
// Stored keys stay short, which keeps a Redis done marker under 150 bytes.
// It reports false when key is empty.
func hashedKey(prefix, key string) (string, bool) {
	if key == "" {
		return "", false
	}
	sum := sha256.Sum256([]byte(key))
	var enc [(HashBytes + 3) / 4 * 5]byte // ascii85.MaxEncodedLen(HashBytes), on the stack
	n := ascii85.Encode(enc[:], sum[:HashBytes])
	return prefix + string(enc[:n]), true
}

// Enqueue returns the stored key of Guard.Enqueue's marker for key: always
// hashed, in a namespace no job key is stored in (see plainKey).
func Enqueue(prefix, key string) (string, bool) {
	if key == "" {
		return "", false
	}
	return prefix + enqueueNamespace + hash(key, HashBytes), true
}

// Fingerprint returns the fingerprint a store keeps for fp: fp itself
// up to maxFingerprintLen bytes, else "#" and its SHA-256.
func Fingerprint(fp string) string {
	if len(fp) <= maxFingerprintLen {
		return fp
	}
	return "#" + hash(fp, sha256.Size)
}

// hash returns the first n bytes of s's SHA-256, unpadded base64url.
func hash(s string, n int) string {
	sum := sha256.Sum256([]byte(s))
	return base64.RawURLEncoding.EncodeToString(sum[:n])
}
