package core

// GroupRoundTrips is how many round trips the group commit has in flight at
// most, for tests that fill them all.
const GroupRoundTrips = groupRoundTrips

// Unreachable is unreachable, the classification of store failures under
// which FailOpen runs a job unguarded.
var Unreachable = unreachable

// ErrStorePanicked and ErrStoreStuck are the Guard's own store failures.
var ErrStorePanicked, ErrStoreStuck = errStorePanicked, errStoreStuck

// EnqueueKey is enqueueKey, the stored key of Enqueue's marker.
var EnqueueKey = enqueueKey
