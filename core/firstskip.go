package core

import "sync"

// firstSkips remembers the Source and Kind pairs of which a Duplicate under
// an adapter's default key (Job.DefaultKey), or in shadow mode a job
// enforcement would skip as one, has been seen, up to maxKinds
// pairs, so that the first skip of each is logged at Info. Once maxKinds
// pairs are remembered, the first skips of further pairs are logged at
// Debug like later ones: Kind comes from a small fixed set (see Job.Kind).
type firstSkips struct {
	mu   sync.RWMutex
	seen map[[2]string]struct{}
}

func newFirstSkips() *firstSkips {
	return &firstSkips{seen: map[[2]string]struct{}{}}
}

// first reports whether this is the first skip of source and kind, and
// remembers it.
func (f *firstSkips) first(source, kind string) bool {
	pair := [2]string{source, kind}
	f.mu.RLock()
	_, seen := f.seen[pair]
	full := len(f.seen) >= maxKinds
	f.mu.RUnlock()
	if seen || full {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, seen := f.seen[pair]; seen || len(f.seen) >= maxKinds {
		return false
	}
	f.seen[pair] = struct{}{}
	return true
}

// firstSkipMessage returns the message of the Info record of a kind's first
// skip under an adapter's default key, in the adapter's words (hint);
// shadow is true for a job that shadow mode ran and enforcement would skip.
func firstSkipMessage(hint *KeyHint, shadow bool) string {
	key, settings := hint.Key, hint.Settings
	if key == "" {
		key = "kind and payload hash"
	}
	if settings == "" {
		settings = "give the job a Key that names each occurrence"
	}
	what := "jobonce: skipped a duplicate"
	if shadow {
		what = "jobonce: shadow mode ran a job that enforcement would skip as a duplicate"
	}
	return what + " under the default key (" + key + "), the first of its kind; " +
		"later ones are logged at Debug. If this work repeats on purpose, key it by occurrence: " + settings
}
