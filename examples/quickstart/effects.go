package main

import (
	"sync"
	"sync/atomic"
	"time"
)

// effects stands for the system a job acts on, and counts the effects made
// on it per job. A request with an idempotency key is treated as an API that
// accepts one does (Stripe's Idempotency-Key header): a key it has already
// applied is absorbed, answered with its first reply and no second effect.
type effects struct {
	made     []atomic.Int32 // per job
	applied  sync.Map       // idempotency keys already applied
	keyed    atomic.Int64   // requests that carried an idempotency key
	absorbed atomic.Int64   // of those, the ones refused as repeats
}

func newEffects(jobs int) *effects {
	return &effects{made: make([]atomic.Int32, jobs)}
}

// apply makes job id's effect, unless key was applied before.
func (e *effects) apply(id int, key string) {
	if key != "" {
		e.keyed.Add(1)
		if _, seen := e.applied.LoadOrStore(key, struct{}{}); seen {
			e.absorbed.Add(1)
			return
		}
	}
	e.made[id].Add(1)
}

// result is one row of the table.
type result struct {
	effects, duplicates, missing int
	gap                          int // deliveries the killed consumer acted on and never acknowledged
	keyed, absorbed              int // requests with an idempotency key, and the repeats absorbed
	took                         time.Duration
}

// tally counts the effects, the jobs with more than one, and the jobs with
// none.
func (e *effects) tally() result {
	r := result{keyed: int(e.keyed.Load()), absorbed: int(e.absorbed.Load())}
	for i := range e.made {
		n := int(e.made[i].Load())
		r.effects += n
		if n == 0 {
			r.missing++
		} else {
			r.duplicates += n - 1
		}
	}
	return r
}
