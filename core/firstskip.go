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

// firstSkipHint is what the first skip's record says of an adapter: what
// its default key is made of, in its words, and the settings that key work
// which repeats on purpose by occurrence.
type firstSkipHint struct{ key, settings string }

// firstSkipHints are the adapters' hints, by Job.Source.
var firstSkipHints = map[string]firstSkipHint{
	"asynq": {"task type and payload hash", "asynqonce: set Config.Key, or list the task type in Config.PeriodicTypes (tasks of an asynq.Scheduler, or of EnqueueOnce once per window) or Config.UnguardedTypes"},
	"river": {"kind and args hash", "riveronce: set Config.Key, give the args a OnceKey (Keyer), or exempt the kind with Config.Skip"},
	"sqs":   {"queue and body hash", "sqsonce: set Config.KeyAttribute or Config.Key"},
	"watermill": {"handler, topic and payload hash",
		"watermillonce: set Config.Key (the message UUID, a metadata field), or exempt messages with Config.Skip"},
}

// firstSkipMessage returns the message of the Info record of a kind's first
// skip under an adapter's default key; shadow is true for a job that shadow
// mode ran and enforcement would skip.
func firstSkipMessage(source string, shadow bool) string {
	hint, ok := firstSkipHints[source]
	if !ok {
		hint = firstSkipHint{"kind and payload hash", "give the job a Key that names each occurrence"}
	}
	what := "jobonce: skipped a duplicate"
	if shadow {
		what = "jobonce: shadow mode ran a job that enforcement would skip as a duplicate"
	}
	return what + " under the default key (" + hint.key + "), the first of its kind; " +
		"later ones are logged at Debug. If this work repeats on purpose, key it by occurrence: " + hint.settings
}
