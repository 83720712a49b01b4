package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/redisstore"
)

// A live holder's heartbeat renews its lease every Lease/3, so it renews
// within a third of the remaining lease read at any moment. renewalMargin is
// how much later its renewal may land: the heartbeat's round trip and
// scheduling.
const renewalMargin = 250 * time.Millisecond

// pollEvery is how often release reads the lease it watches.
const pollEvery = 25 * time.Millisecond

// defaultWatch is -watch's default: a little more than the 10.25s in which a
// holder renews the default 30s Lease.
const defaultWatch = 11 * time.Second

// claimStore is what release needs of a store.
type claimStore interface {
	Inspect(ctx context.Context, key string) (redisstore.Record, error)
	Release(ctx context.Context, key string, token driver.Token) error
}

// release deletes the running claim rec, just read from key, unless its
// holder is alive. It watches the lease for a third of what is left of it
// (plus renewalMargin), at most maxWatch: a rise of the lease, or another
// token, means a live holder, and it refuses unless force is set. It refuses
// also, without force, when maxWatch was too short to tell. The delete is
// token-checked: it removes only the claim it watched, never one taken since,
// nor a done marker.
func release(ctx context.Context, store claimStore, out io.Writer, key string, rec redisstore.Record, force bool, maxWatch time.Duration) error {
	if rec.State != driver.StateRunning {
		return errors.New("release: the key holds no running claim; nothing released")
	}
	need := (rec.TTL/3 + renewalMargin).Round(time.Millisecond)
	window := min(need, maxWatch)
	fmt.Fprintf(out, "watching the lease for up to %s for a renewal by its holder\n", window)
	w, err := watchLease(ctx, store, key, rec, window)
	if err != nil {
		return err
	}
	switch {
	case w.last.State == driver.StateDone:
		return fmt.Errorf("release: the job finished after %s of watching (the key holds its done marker); nothing released", w.watched)
	case w.last.State != driver.StateRunning:
		return fmt.Errorf("release: the claim ended after %s of watching (expired, or released by its holder); nothing released", w.watched)
	case w.last.Token != rec.Token:
		return fmt.Errorf("release: the key was claimed again after %s of watching (token %s, now %s): that claim is another copy's, alive; nothing released", w.watched, rec.Token, w.last.Token)
	}
	var live string
	switch {
	case w.renewed:
		live = fmt.Sprintf("the holder is alive and renewing its claim (the lease rose from %s to %s after %s of watching)", w.from, w.to, w.watched)
		if !force {
			return fmt.Errorf("release: refused: %s; -force releases it anyway, and it runs beside the next copy until its next renewal finds the claim gone", live)
		}
	case window < need:
		live = fmt.Sprintf("no renewal in %s of watching, but a live holder with this lease may renew up to %s after it was read", w.watched, need)
		if !force {
			return fmt.Errorf("release: refused: %s; run it again with -watch %s, or once less of the lease is left, or -force releases it anyway", live, need)
		}
	default:
		fmt.Fprintf(out, "no renewal in %s of watching: a live holder renews within %s\n", w.watched, need)
	}
	if err := store.Release(ctx, key, rec.Token); err != nil {
		if errors.Is(err, core.ErrLeaseLost) {
			return errors.New("release: the claim changed since it was read; nothing released")
		}
		return fmt.Errorf("release: %w", err)
	}
	if live != "" {
		fmt.Fprintf(out, "released although %s (-force): it loses the claim at its next renewal, and until then it may run beside the next copy\n", live)
		return nil
	}
	fmt.Fprintln(out, "released: the next delivery of the job will run it")
	return nil
}

// watched is what watchLease saw.
type watched struct {
	last     redisstore.Record // the last read
	watched  time.Duration     // how long it watched
	renewed  bool              // the lease rose, from the read before
	from, to time.Duration     // the lease before and after it rose
}

// watchLease reads key every pollEvery for window, and stops early when the
// key no longer holds rec's claim or its lease rose.
func watchLease(ctx context.Context, store claimStore, key string, rec redisstore.Record, window time.Duration) (watched, error) {
	start := time.Now()
	timer := time.NewTimer(min(pollEvery, window))
	defer timer.Stop()
	prev := rec
	for {
		select {
		case <-ctx.Done():
			return watched{}, fmt.Errorf("release: watching the lease: %w", ctx.Err())
		case <-timer.C:
		}
		cur, err := store.Inspect(ctx, key)
		if err != nil {
			return watched{}, fmt.Errorf("release: watching the lease: %w", err)
		}
		w := watched{last: cur, watched: time.Since(start).Round(time.Millisecond)}
		if cur.State != driver.StateRunning || cur.Token != rec.Token {
			return w, nil
		}
		if cur.TTL > prev.TTL {
			w.renewed, w.from, w.to = true, prev.TTL, cur.TTL
			return w, nil
		}
		left := window - time.Since(start)
		if left <= 0 {
			return w, nil
		}
		prev = cur
		timer.Reset(min(pollEvery, left))
	}
}
