// Package jobctx is what a running job's context carries for its
// function: its idempotency key and its claim's fence (core.IdempotencyKey,
// core.Fence).
package jobctx

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"

	"github.com/jobonce/jobonce/internal/storedkey"
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

// With returns the context a job's function runs with: ctx carrying the
// job's key under the Guard's key prefix, for its idempotency key, and,
// when it holds a claim, its fence (0 when it holds none).
func With(ctx context.Context, prefix, key string, fence int64) context.Context {
	return &jobContext{Context: ctx, info: jobInfo{prefix: prefix, key: key, fence: fence}}
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
	return idempotencyKeyPrefix + base64.RawURLEncoding.EncodeToString(h.Sum(sum[:0])[:storedkey.HashBytes])
}

// IdempotencyKey returns the idempotency key of the job whose function
// runs with ctx (see core.IdempotencyKey).
func IdempotencyKey(ctx context.Context) (string, bool) {
	info, _ := ctx.Value(jobInfoKey{}).(*jobInfo)
	if info == nil || info.key == "" {
		return "", false
	}
	return idempotencyKey(info.prefix, info.key), true
}

// Fence returns the fence of the claim under which the job whose function
// runs with ctx runs (see core.Fence).
func Fence(ctx context.Context) (int64, bool) {
	info, _ := ctx.Value(jobInfoKey{}).(*jobInfo)
	if info == nil || info.fence == 0 {
		return 0, false
	}
	return info.fence, true
}
