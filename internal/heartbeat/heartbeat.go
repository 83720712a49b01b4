// Package heartbeat keeps a claim alive while its job runs: it renews the
// claim's lease through an extend function every third of the lease, and
// ends the job's context when the lease is lost.
package heartbeat

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jobonce/jobonce/core/driver"
)

// Heartbeat extends a claim's lease every Lease/3 while the job runs and
// until its done marker is written. It uses a timer rather than a goroutine,
// so a job shorter than Lease/3 costs no store call; Stop waits for a beat in
// flight, so nothing outlives the job, for at most StoreTimeout, so a store
// call that ignores its context cannot hold the caller. A stopped
// heartbeat with no beat pending or in flight is used again (see heartbeats),
// with its timer.
type Heartbeat struct {
	cfg      *Config
	ctx      context.Context // the job's context, for its values only
	key      string
	token    driver.Token
	cancel   context.CancelCauseFunc
	deadline time.Time // local estimate of when the lease ends, less safeMargin

	mu       sync.Mutex
	timer    *time.Timer
	stopped  bool
	inflight chan struct{} // closed when the beat in flight ends; nil when none
}

// heartbeats holds stopped heartbeats that no beat refers to any more.
var heartbeats sync.Pool

// Config is what the heartbeats of a Guard share.
type Config struct {
	// Extend renews the lease of the claim of key under token for lease.
	Extend func(ctx context.Context, key string, token driver.Token, lease time.Duration) error
	// Lease is the claim's lease.
	Lease time.Duration
	// Timeout bounds each renewal, and Stop's wait for one in flight.
	Timeout time.Duration
}

// Start starts the heartbeat of the claim of key under token, whose lease
// runs from started, for a job whose context is ctx (for its values only)
// and whose cancel ends it, with cause driver.driver.ErrLeaseLost, when the lease
// is lost. It returns nil, a heartbeat that does nothing, when cfg is nil.
func Start(ctx context.Context, cfg *Config, key string, token driver.Token, started time.Time, cancel context.CancelCauseFunc) *Heartbeat {
	if cfg == nil {
		return nil
	}
	h, _ := heartbeats.Get().(*Heartbeat)
	if h == nil {
		h = new(Heartbeat)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cfg, h.ctx, h.key, h.token, h.cancel = cfg, ctx, key, token, cancel
	h.deadline, h.stopped = started.Add(cfg.Lease-safeMargin(cfg.Lease)), false
	first := time.Until(started.Add(cfg.Lease / 3))
	if h.timer == nil {
		h.timer = time.AfterFunc(first, h.beat)
	} else {
		h.timer.Reset(first)
	}
	return h
}

// Stop ends the heartbeat and waits for a beat in flight. It is nil-safe.
func (h *Heartbeat) Stop() {
	if h == nil {
		return
	}
	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		return
	}
	h.stopped = true
	// Once Stop reports true, the timer's function does not run: nothing
	// refers to h any more, so it can serve another job.
	inflight := h.inflight
	if h.timer.Stop() && inflight == nil {
		h.cfg, h.ctx, h.cancel = nil, nil, nil
		h.mu.Unlock()
		heartbeats.Put(h)
		return
	}
	h.mu.Unlock()
	if inflight == nil {
		return
	}
	wait := time.NewTimer(h.cfg.Timeout)
	defer wait.Stop()
	select {
	case <-inflight:
	case <-wait.C:
	}
}

func (h *Heartbeat) beat() {
	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		return
	}
	inflight := make(chan struct{})
	h.inflight = inflight
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.inflight = nil
		h.mu.Unlock()
		close(inflight)
	}()

	lease := h.cfg.Lease
	sent := time.Now()
	until := h.deadline
	if limit := sent.Add(h.cfg.Timeout); limit.Before(until) {
		until = limit
	}
	ctx, cancel := context.WithDeadline(context.WithoutCancel(h.ctx), until)
	// A store call that ignores its context must not keep the job running
	// past the lease: the job's context ends when the lease does. The
	// expiry may fire as it is stopped, so it holds this job's cancel
	// itself: h may serve another job by the time it runs.
	jobCancel := h.cancel
	expiry := time.AfterFunc(time.Until(h.deadline), func() {
		jobCancel(fmt.Errorf("%w: the lease ran out while its renewal was pending", driver.ErrLeaseLost))
	})
	err := h.cfg.Extend(ctx, h.key, h.token, lease)
	expiry.Stop()
	cancel()
	var next time.Duration
	switch {
	case err == nil:
		h.deadline = sent.Add(lease - safeMargin(lease))
		next = lease / 3
	case errors.Is(err, driver.ErrLeaseLost):
		h.cancel(err)
		return
	default:
		left := time.Until(h.deadline)
		if left <= 0 {
			h.cancel(fmt.Errorf("%w: store unreachable until the lease ran out: %w", driver.ErrLeaseLost, err))
			return
		}
		next = min(lease/10, left)
	}
	h.mu.Lock()
	if !h.stopped {
		h.timer.Reset(next)
	}
	h.mu.Unlock()
}

// safeMargin is how long before its lease runs out, by the local clock, a
// job whose renewal is pending is told to stop: 1% of the lease plus 2ms, at
// most a tenth of it. A timer can fire late on a loaded machine, and a clock
// can drift; without the margin, a copy that claims the key the moment the
// store lets the lease lapse could start while the first is not yet told.
func safeMargin(lease time.Duration) time.Duration {
	return min(lease/100+2*time.Millisecond, lease/10)
}
