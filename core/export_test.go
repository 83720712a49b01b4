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

// EnqueueKey is storedkey.Enqueue, the stored key of Enqueue's marker.
var EnqueueKey = storedkey.Enqueue
