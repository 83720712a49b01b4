package main

import (
	"cmp"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/internal/storedkey"
)

// storedForm returns a stored key as the commands print it: 0x and its bytes
// in hex, which a shell passes on as it is, whatever bytes the key holds
// (a hashed key's Ascii85 holds quotes, backslashes and dollars).
func storedForm(key string) string { return "0x" + hex.EncodeToString([]byte(key)) }

// parseStoredForm returns the bytes s spells as 0x (or \x, as psql prints a
// bytea) and an even number of hex digits, and whether it spells any.
func parseStoredForm(s string) (string, bool) {
	digits, ok := strings.CutPrefix(s, "0x")
	if !ok {
		digits, ok = strings.CutPrefix(s, `\x`)
	}
	if !ok || digits == "" {
		return "", false
	}
	b, err := hex.DecodeString(digits)
	if err != nil {
		return "", false
	}
	return string(b), true
}

// keyNamer derives stored keys from KEY as a Guard with the flags' Config
// does (Config.KeyPrefix, Config.PlainKeys).
type keyNamer struct {
	prefix string // the Guard's prefix, its default filled in
	plain  bool
}

func newKeyNamer(prefix string, plain bool) *keyNamer {
	return &keyNamer{prefix: cmp.Or(prefix, defaultPrefix), plain: plain}
}

// derive returns the stored key of key, hashed or plain, as core.Guard
// stores it.
func (n *keyNamer) derive(key string, plain bool) (string, error) {
	if stored, ok := storedkey.Key(n.prefix, key, plain); ok {
		return stored, nil
	}
	return "", fmt.Errorf("%w: key is empty", core.ErrInvalidKey)
}

// lookup is the stored key a command reads for KEY, and how it got it.
type lookup struct {
	arg      string // KEY as given
	stored   string
	asStored bool // KEY is the stored key's printed form
}

// resolve returns the stored key KEY names: KEY itself when it is a stored
// key's printed form (0x and hex) whose bytes begin with the prefix; else
// the key a Guard stores KEY under. An empty KEY gives an error matching
// core.ErrInvalidKey.
func (n *keyNamer) resolve(arg string) (lookup, error) {
	if b, ok := parseStoredForm(arg); ok && strings.HasPrefix(b, n.prefix) {
		return lookup{arg: arg, stored: b, asStored: true}, nil
	}
	stored, err := n.derive(arg, n.plain)
	if err != nil {
		return lookup{}, fmt.Errorf("KEY: %w", err)
	}
	return lookup{arg: arg, stored: stored}, nil
}

// describe says how l's stored key came from KEY.
func (n *keyNamer) describe(l lookup) string {
	if l.asStored {
		return "KEY as a stored key"
	}
	form := "hashed"
	if n.plain {
		form = "plain (-plain)"
	}
	return fmt.Sprintf("KEY %q, %s, under -prefix %q", l.arg, form, n.prefix)
}

// alternative is another stored key KEY may stand for, and the flag that
// would make a command read it.
type alternative struct {
	stored string
	advice string
}

// alternatives returns the other stored keys KEY may stand for: its other
// form (hashed or plain), KEY itself as a stored key, and the bytes of a
// printed stored form outside the prefix.
func (n *keyNamer) alternatives(l lookup) []alternative {
	var alts []alternative
	add := func(stored, advice string) {
		if stored == l.stored {
			return
		}
		for _, a := range alts {
			if a.stored == stored {
				return
			}
		}
		alts = append(alts, alternative{stored, advice})
	}
	if !l.asStored {
		if other, err := n.derive(l.arg, !n.plain); err == nil {
			if n.plain {
				add(other, "found hashed: the Guard hashes keys (Config.PlainKeys unset): drop -plain")
			} else {
				add(other, "found under -plain: the Guard stores keys plain (Config.PlainKeys): pass -plain")
			}
		}
	}
	if strings.HasPrefix(l.arg, n.prefix) {
		add(l.arg, "KEY is itself a stored key: pass it as "+storedForm(l.arg))
	}
	if b, ok := parseStoredForm(l.arg); ok && !l.asStored {
		add(b, fmt.Sprintf("KEY is a stored key outside -prefix %q: give the Guard's -prefix", n.prefix))
	}
	return alts
}
