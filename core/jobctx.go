package core

import (
	"context"

	"github.com/jobonce/jobonce/internal/jobctx"
)

// IdempotencyKey returns the idempotency key of the job whose function
// runs with ctx, for an external API that accepts one (an Idempotency-Key
// header, a request id): the same for every copy, redelivery and retry of
// the job, different for jobs with different keys (or Guards with different
// KeyPrefix), 30 characters of [A-Za-z0-9_-] starting with "jobonce-". A
// repeat the Guard cannot prevent (a crash between the effect and its done
// marker, a duplicate after Retention) then reaches the API with the same
// key and is absorbed there. It reports false outside a job's function and
// for a job without a key (Job.Unguarded with an empty Key).
func IdempotencyKey(ctx context.Context) (string, bool) {
	return jobctx.IdempotencyKey(ctx)
}

// Fence returns the fencing token of the claim under which the job whose
// function runs with ctx runs: a number larger than the fence of every
// earlier claim of the same key (see driver.ClaimReply.Fence for how long
// that holds), so a store the job writes to can refuse the late write of a
// copy whose claim lapsed and was taken over ("UPDATE … SET …, fence = $1
// WHERE id = $2 AND fence < $1"). It reports false outside a job's function
// and for a job that runs without a claim (Unguarded, shadow mode).
func Fence(ctx context.Context) (int64, bool) {
	return jobctx.Fence(ctx)
}
