package core

// GroupRoundTrips is how many round trips the group commit has in flight at
// most, for tests that fill them all.
const GroupRoundTrips = groupRoundTrips
