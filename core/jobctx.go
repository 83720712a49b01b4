package core

import (
	"context"

	"github.com/jobonce/jobonce/internal/jobctx"
)

// IdempotencyKey returns the idempotency key of the job running with ctx,
// the same for every copy of the job (docs/semantics.md). It reports false
// outside a job's function and for a job without a key.
func IdempotencyKey(ctx context.Context) (string, bool) {
	return jobctx.IdempotencyKey(ctx)
}

// Fence returns the fencing token of the job running with ctx, larger than
// the fence of every earlier claim of the key (docs/semantics.md). It
// reports false outside a job's function and for a job without a claim.
func Fence(ctx context.Context) (int64, bool) {
	return jobctx.Fence(ctx)
}
