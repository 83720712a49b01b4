package core

import (
	"github.com/jobonce/jobonce/internal/groupcommit"
	"github.com/jobonce/jobonce/internal/storecall"
	"github.com/jobonce/jobonce/internal/storedkey"
)

// GroupRoundTrips is how many round trips the group commit has in flight at
// most, for tests that fill them all.
const GroupRoundTrips = groupcommit.RoundTrips

// Unreachable is unreachable, the classification of store failures under
// which FailOpen runs a job unguarded.
var Unreachable = unreachable

// ErrStorePanicked and ErrStoreStuck are the Guard's own store failures.
var ErrStorePanicked, ErrStoreStuck = storecall.ErrPanicked, storecall.ErrStuck

// EnqueueKey returns the stored key of Enqueue's marker (storedkey.Enqueue).
func EnqueueKey(prefix, key string) (string, error) {
	if skey, ok := storedkey.Enqueue(prefix, key); ok {
		return skey, nil
	}
	return "", errEmptyKey
}

// Executed reports whether the job's function ran for outcome o.
func Executed(o Outcome) bool { return o.executed() }
