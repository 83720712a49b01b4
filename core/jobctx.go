package core

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
)

// jobInfo is what a running job's context carries for its function. The
// idempotency key is derived when the function asks for it, so jobs that do
// not pay nothing for it.
type jobInfo struct {
	prefix, key string // the Guard's KeyPrefix and the job's key; key "" when it has none
	fence       int64  // 0 when the job holds no claim
}

type jobInfoKey struct{}

// jobContext carries a jobInfo: context.WithValue with the value inside,
// one allocation rather than two.
type jobContext struct {
	context.Context
	info jobInfo
}

func (c *jobContext) Value(key any) any {
	if key == (jobInfoKey{}) {
		return &c.info
	}
	return c.Context.Value(key)
}

// withJob returns the context a job's function runs with: ctx carrying the
// job's idempotency key and, when it holds a claim, its fence.
func (g *Guard) withJob(ctx context.Context, job Job, fence int64) context.Context {
	return &jobContext{Context: ctx, info: jobInfo{prefix: g.cfg.KeyPrefix, key: job.Key, fence: fence}}
}

// idempotencyKeyPrefix starts every idempotency key, so one can be told
// from other identifiers in an external system's logs.
const idempotencyKeyPrefix = "jobonce-"

// idempotencyKey derives the idempotency key of a job from the Guard's key
// prefix and the job's key: 128 bits of SHA-256, base64url, after
// idempotencyKeyPrefix (30 characters in all).
func idempotencyKey(prefix, key string) string {
	h := sha256.New()
	h.Write([]byte("jobonce idempotency key\x00"))
	h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(prefix)))) // no prefix/key split is ambiguous
	h.Write([]byte(prefix))
	h.Write([]byte(key))
	var sum [sha256.Size]byte
	return idempotencyKeyPrefix + base64.RawURLEncoding.EncodeToString(h.Sum(sum[:0])[:hashBytes])
}

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
	info, _ := ctx.Value(jobInfoKey{}).(*jobInfo)
	if info == nil || info.key == "" {
		return "", false
	}
	return idempotencyKey(info.prefix, info.key), true
}

// Fence returns the fencing token of the claim under which the job whose
// function runs with ctx runs: a number larger than the fence of every
// earlier claim of the same key (see driver.ClaimReply.Fence for how long
// that holds), so a store the job writes to can refuse the late write of a
// copy whose claim lapsed and was taken over ("UPDATE … SET …, fence = $1
// WHERE id = $2 AND fence < $1"). It reports false outside a job's function
// and for a job that runs without a claim (Unguarded, shadow mode).
func Fence(ctx context.Context) (int64, bool) {
	info, _ := ctx.Value(jobInfoKey{}).(*jobInfo)
	if info == nil || info.fence == 0 {
		return 0, false
	}
	return info.fence, true
}
