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
// within a third of the remaining lease read at any moment, and first a
// third of the lease after its claim. renewalMargin is how much later its
// renewal may land: the heartbeat's round trip and scheduling.
const renewalMargin = 250 * time.Millisecond

// pollEvery is how often release reads the lease it watches.
const pollEvery = 25 * time.Millisecond

// defaultWatch is -watch's default: a little more than the 10.25s in which a
// holder renews the default 30s Lease.
const defaultWatch = 11 * time.Second

// defaultLease is -lease's default: core.Config.Lease's.
const defaultLease = 30 * time.Second

// claimStore is what release needs of a store.
type claimStore interface {
	Inspect(ctx context.Context, key string) (redisstore.Record, error)
	Release(ctx context.Context, key string, token driver.Token) error
}

// releaseOptions are release's flags.
type releaseOptions struct {
	force bool          // release even a claim not proven dead
	watch time.Duration // the longest it watches the lease
	lease time.Duration // the Guard's Config.Lease
}

// leaseTolerance is how far a claim's age plus its remaining lease may
// exceed the lease before release takes it for renewed: the clock's and
// the TTL's rounding, and the claim's own round trip.
func leaseTolerance(lease time.Duration) time.Duration {
	return 50*time.Millisecond + lease/50
}

// release deletes the running claim rec, just read from key, only once it
// has proven its holder dead: the claim was renewed before (age plus lease
// left exceed the lease: its holder runs a heartbeat), and it sees no
// renewal in a third of the lease left plus renewalMargin, at most
// opt.watch. It refuses, unless opt.force is set, a claim seen renewed (a
// live holder), one never renewed (a holder that died before its first
// renewal or runs without a heartbeat: the two look the same), one it
// cannot date (no fence), one whose lease left exceeds opt.lease, and one it
// could not watch long enough (the token-checked delete cannot take a claim
// without a fence even then). A claim younger than a third of the lease
// plus renewalMargin it watches until then, at most opt.watch, for a
// first renewal. The delete is token-checked: it removes only the claim it
// watched, never one taken since, nor a done marker.
func release(ctx context.Context, store claimStore, out io.Writer, key string, rec redisstore.Record, opt releaseOptions) error {
	if rec.State != driver.StateRunning {
		return errors.New("release: the key holds no running claim; nothing released")
	}
	tol := leaseTolerance(opt.lease)
	renewed := rec.Age+rec.TTL > opt.lease+tol
	var doubt string // why the holder is not proven dead; empty once it is
	var need time.Duration
	switch {
	case rec.Fence == 0:
		doubt = "the claim has no fence (a version before fences wrote it), so release cannot tell whether its holder renews it"
	case rec.TTL > opt.lease+tol:
		doubt = fmt.Sprintf("its lease left (%s) is longer than -lease %s; -lease must match the Guard's Config.Lease", rec.TTL, opt.lease)
	case renewed:
		need = rec.TTL/3 + renewalMargin
	default:
		need = max(opt.lease/3+renewalMargin-rec.Age, 0)
	}
	need = need.Round(time.Millisecond)
	last := rec
	if need > 0 {
		window := min(need, opt.watch)
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
		case w.renewed:
			live := fmt.Sprintf("the holder is alive and renewing its claim (the lease rose from %s to %s after %s of watching)", w.from, w.to, w.watched)
			if !opt.force {
				return fmt.Errorf("release: refused: %s; -force releases it anyway, and it runs beside the next copy until its next renewal finds the claim gone", live)
			}
			return releaseClaim(ctx, store, out, key, rec, live)
		case window < need && renewed:
			doubt = fmt.Sprintf("no renewal in %s of watching, but a live holder with this lease may renew up to %s after it was read; run it again with -watch %s, or once less of the lease is left", w.watched, need, need)
		case window < need:
			doubt = fmt.Sprintf("no renewal in %s of watching, %s after the claim, but a live holder first renews up to %s after its claim; run it again with -watch %s", w.watched, w.last.Age.Round(time.Millisecond), opt.lease/3+renewalMargin, need)
		case renewed:
			fmt.Fprintf(out, "no renewal in %s of watching: the holder renewed its claim before, and a live holder renews within %s\n", w.watched, need)
		}
		last = w.last
	}
	if doubt == "" && !renewed {
		doubt = fmt.Sprintf("the claim was taken %s ago and never renewed: its holder died before its first renewal, or runs with Config.DisableHeartbeat, and the two cannot be told apart; it expires by itself in %s", last.Age.Round(time.Millisecond), last.TTL)
	}
	if doubt != "" && !opt.force {
		return fmt.Errorf("release: refused: %s; -force releases it anyway", doubt)
	}
	return releaseClaim(ctx, store, out, key, rec, doubt)
}

// releaseClaim deletes rec's claim on key, token-checked, and says so; doubt
// is why its holder may be alive, empty when it was proven dead.
func releaseClaim(ctx context.Context, store claimStore, out io.Writer, key string, rec redisstore.Record, doubt string) error {
	if err := store.Release(ctx, key, rec.Token); err != nil {
		if errors.Is(err, core.ErrLeaseLost) && rec.Fence == 0 {
			return fmt.Errorf("release: the token-checked delete takes only claims with a fence, and this one has none (or it changed since it was read); nothing released: it expires by itself in %s at most", rec.TTL)
		}
		if errors.Is(err, core.ErrLeaseLost) {
			return errors.New("release: the claim changed since it was read; nothing released")
		}
		return fmt.Errorf("release: %w", err)
	}
	if doubt != "" {
		fmt.Fprintf(out, "released although %s (-force): a live holder runs beside the next copy until it next renews or completes the claim and finds it gone\n", doubt)
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
