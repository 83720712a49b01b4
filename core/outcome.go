package core

// Outcome says what Guard.Do did with one delivery of a job.
type Outcome uint8

const (
	// Ran: this copy claimed the key, the function succeeded, and the done
	// marker was recorded.
	Ran Outcome = iota + 1
	// Duplicate: the key was already done; the function did not run.
	Duplicate
	// Running: another copy holds a live claim; the function did not run and
	// the error is a *RunningError.
	Running
	// Conflict: the key is held or done with a different payload fingerprint;
	// the function did not run and the error matches ErrConflict.
	Conflict
	// Failed: the function returned an error or panicked; the claim was
	// released so a retry can run at once.
	Failed
	// LeaseLost: the function succeeded, but the claim's token was gone when
	// the done marker was written (the lease expired; another copy may have run).
	LeaseLost
	// Unrecorded: the function succeeded, but the store failed to record the
	// done marker after retries. The job counts as done for the framework.
	Unrecorded
	// Unguarded: the store was unreachable and FailOpen ran the function without
	// a claim.
	Unguarded
	// Unavailable: the store was unreachable and the function did not run (fail
	// closed); the error matches ErrStoreUnavailable.
	Unavailable
	// Rejected: the input was invalid (for example an empty key); nothing ran.
	Rejected
	// Canceled: the caller's context ended before the key's state was known
	// (or before the job could start, releasing the claim); nothing ran, and
	// the error matches the context's error (context.Canceled or
	// context.DeadlineExceeded). It is not a store outage: FailOpen never runs
	// such a job, and it is logged at Debug.
	Canceled
)

var outcomeNames = [...]string{
	0:           "unknown",
	Ran:         "ran",
	Duplicate:   "duplicate",
	Running:     "running",
	Conflict:    "conflict",
	Failed:      "failed",
	LeaseLost:   "lease_lost",
	Unrecorded:  "unrecorded",
	Unguarded:   "unguarded",
	Unavailable: "unavailable",
	Rejected:    "rejected",
	Canceled:    "canceled",
}

// String returns the outcome's name in snake case, as used in logs and metrics.
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "unknown"
}

// Executed reports whether the job's function ran for this outcome.
func (o Outcome) Executed() bool {
	switch o {
	case Ran, Failed, LeaseLost, Unrecorded, Unguarded:
		return true
	}
	return false
}
