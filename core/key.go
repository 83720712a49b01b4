package core

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
)

// MaxKeyLen is the longest key PlainKey stores as it is. A longer key is
// replaced by "#" and the unpadded base64url SHA-256 of the key (44 bytes),
// so no stored key exceeds len(prefix)+MaxKeyLen bytes whatever the caller
// passes.
const MaxKeyLen = 128

// StoredKey returns the key a store holds for a user key under prefix, as a
// Guard and pgstore's transactional mode derive it: HashedKey by default,
// PlainKey when plain is set (Config.PlainKeys). It returns an error matching
// ErrInvalidKey when key is empty. Any bytes are allowed in key.
func StoredKey(prefix, key string, plain bool) (string, error) {
	if plain {
		return PlainKey(prefix, key)
	}
	return HashedKey(prefix, key)
}

// PlainKey returns prefix and key, readable in redis-cli, with keys longer
// than MaxKeyLen hashed. It returns an error matching ErrInvalidKey when key
// is empty.
func PlainKey(prefix, key string) (string, error) {
	if key == "" {
		return "", fmt.Errorf("%w: key is empty", ErrInvalidKey)
	}
	if len(key) <= MaxKeyLen {
		return prefix + key, nil
	}
	sum := sha256.Sum256([]byte(key))
	buf := make([]byte, 0, len(prefix)+1+base64.RawURLEncoding.EncodedLen(len(sum)))
	buf = append(buf, prefix...)
	buf = append(buf, '#')
	buf = base64.RawURLEncoding.AppendEncode(buf, sum[:])
	return string(buf), nil
}

// HashedKey returns the compact stored key the Guard uses by default: prefix
// followed by 16 unpadded base64url characters of the key's SHA-256 (96
// bits). Every stored key has the same short length, which keeps a Redis done
// marker under 150 bytes. It returns an error matching ErrInvalidKey when key
// is empty.
func HashedKey(prefix, key string) (string, error) {
	if key == "" {
		return "", fmt.Errorf("%w: key is empty", ErrInvalidKey)
	}
	sum := sha256.Sum256([]byte(key))
	buf := make([]byte, 0, len(prefix)+16)
	buf = append(buf, prefix...)
	buf = base64.RawURLEncoding.AppendEncode(buf, sum[:12])
	return string(buf), nil
}

// Fingerprint returns a short, stable fingerprint of a payload for conflict
// detection: the first 8 bytes of its SHA-256, unpadded base64url (11 bytes).
// Adapters use it for their default keys and fingerprints.
func Fingerprint(payload []byte) string {
	sum := sha256.Sum256(payload)
	return base64.RawURLEncoding.EncodeToString(sum[:8])
}
