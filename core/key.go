package core

import (
	"crypto/sha256"
	"encoding/base64"

	"github.com/jobonce/jobonce/internal/storedkey"
)

// MaxKeyLen is the longest key stored as it is under Config.PlainKeys. A
// longer key is stored as a hash.
const MaxKeyLen = 128

// internal/storedkey derives the stored keys under the same bound: this
// constant does not compile unless the two are equal.
const _ = uint(MaxKeyLen-storedkey.MaxKeyLen) + uint(storedkey.MaxKeyLen-MaxKeyLen)

// Fingerprint returns a payload's fingerprint, for Job.Fingerprint and
// default keys: 128 bits of its SHA-256, in unpadded base64url (22 bytes).
func Fingerprint(payload []byte) string {
	sum := sha256.Sum256(payload)
	return base64.RawURLEncoding.EncodeToString(sum[:storedkey.HashBytes])
}

// StoredKey returns the key the store holds for key, or an error matching
// ErrInvalidKey when key is empty.
func (g *Guard) StoredKey(key string) (string, error) {
	if stored, ok := storedkey.Key(g.cfg.KeyPrefix, key, g.cfg.PlainKeys); ok {
		return stored, nil
	}
	return "", errEmptyKey
}
