package core

import (
	"crypto/sha256"
	"encoding/base64"

	"github.com/jobonce/jobonce/internal/storedkey"
)

// MaxKeyLen is the longest key stored as it is under Config.PlainKeys. A longer key is
// replaced by "#" and the unpadded base64url SHA-256 of the key (44 bytes),
// so no stored key exceeds len(prefix)+MaxKeyLen bytes whatever the caller
// passes.
const MaxKeyLen = 128

// internal/storedkey derives the stored keys under the same bound: this
// constant does not compile unless the two are equal.
const _ = uint(MaxKeyLen-storedkey.MaxKeyLen) + uint(storedkey.MaxKeyLen-MaxKeyLen)

// Fingerprint returns a short, stable fingerprint of a payload for default
// keys and conflict detection: 128 bits of its SHA-256, unpadded base64url
// (22 bytes). Adapters use it for their default keys and fingerprints.
func Fingerprint(payload []byte) string {
	sum := sha256.Sum256(payload)
	return base64.RawURLEncoding.EncodeToString(sum[:storedkey.HashBytes])
}

// StoredKey returns the key the store holds for a user key under this
// Guard's configuration (Config.KeyPrefix and Config.PlainKeys), for tools
// that inspect or release keys by hand. It returns an error matching
// ErrInvalidKey when key is empty.
func (g *Guard) StoredKey(key string) (string, error) {
	if stored, ok := storedkey.Key(g.cfg.KeyPrefix, key, g.cfg.PlainKeys); ok {
		return stored, nil
	}
	return "", errEmptyKey
}
