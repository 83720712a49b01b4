package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
)

var releaseCommand = &command{
	name:    "release",
	args:    []string{"KEY"},
	keyed:   true,
	summary: "delete a stuck running claim, only with -force",
	about: `release deletes a key's running claim by hand, for example when a job must run again before its
lease expires, but only with -force: no observation made from outside proves a holder dead before
its lease ends, since a holder cut off from the store runs its job on until its own deadline. It
first watches the lease (a third of the lease left plus 250ms, at most -watch) and says what it
saw: the holder renewing, no renewal, a claim never renewed, or one it cannot date. Without -force
it refuses (exit 1) and says when the claim expires by itself, or that its holder renews it. The
delete is token-checked: it never deletes a claim taken after the inspection, nor a done marker
(forget deletes those).`,
	flags: func(fs *flag.FlagSet, o *options) {
		fs.BoolVar(&o.force, "force", false, "delete the running claim, at the risk of a second copy running beside a holder alive but cut off from the store; without it, release only says what it saw")
		fs.DurationVar(&o.watch, "watch", defaultWatch, "the longest it watches the lease for a renewal by a live holder (it watches for a third of the lease left plus 250ms); 0 skips the watch")
		fs.DurationVar(&o.lease, "lease", defaultLease, "the Guard's Config.Lease, by which it tells a claim renewed before from one never renewed")
	},
	run: runRelease,
}

func runRelease(ctx context.Context, c *invocation) error {
	o := c.opt
	if o.watch < 0 {
		return fmt.Errorf("-watch: %s is negative", o.watch)
	}
	if o.lease <= 0 {
		return fmt.Errorf("-lease: %s is not positive", o.lease)
	}
	t, err := readKey(ctx, c)
	if err != nil {
		return err
	}
	defer t.store.close()
	switch t.rec.State {
	case 0:
		t.explainAbsent(ctx, c.out)
		return errors.New("release: nothing is stored under the key; nothing released")
	case driver.StateDone:
		return errors.New("release: the key holds no running claim but a done marker (forget deletes those); nothing released")
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout+o.watch)
	defer cancel()
	return release(ctx, t.store, c.out, t.lookup.stored, t.rec, releaseOptions{force: o.force, watch: o.watch, lease: o.lease})
}

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

// releaseOptions are release's flags.
type releaseOptions struct {
	force bool          // delete the running claim
	watch time.Duration // the longest it watches the lease; 0: not at all
	lease time.Duration // the Guard's Config.Lease
}

// leaseTolerance is how far a claim's age plus its remaining lease may
// exceed the lease before release takes it for renewed: the clock's and
// the TTL's rounding, and the claim's own round trip.
func leaseTolerance(lease time.Duration) time.Duration {
	return 50*time.Millisecond + lease/50
}

// release deletes the running claim rec, just read from key, only with
// opt.force: no observation made from outside proves a holder dead before
// its lease ends, since a holder cut off from the store (a partition, a hung
// call, an exhausted pool) runs its job on until its own deadline and looks
// the same as a crashed one. It first watches the lease for a third of what
// is left plus renewalMargin (a live holder renews within that), at most
// opt.watch, and says what it saw: the holder renewing, no renewal, a claim
// never renewed (its age plus lease left, by the fence, do not exceed
// opt.lease), or one it cannot date (no fence); and when the claim expires
// by itself, or that its holder renews it. The delete is token-checked: it
// removes only the claim it watched, never one taken since, nor a done
// marker.
func release(ctx context.Context, store claimStore, out io.Writer, key string, rec record, opt releaseOptions) error {
	if rec.State != driver.StateRunning {
		return errors.New("release: the key holds no running claim; nothing released")
	}
	need := (rec.TTL/3 + renewalMargin).Round(time.Millisecond)
	window := min(need, opt.watch)
	last, seen, alive := rec, "not watched (-watch 0)", false
	if window > 0 {
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
			alive = true
			seen = fmt.Sprintf("the holder is alive and renewing its claim (the lease rose from %s to %s after %s of watching)", w.from, w.to, w.watched)
		default:
			seen = fmt.Sprintf("no renewal seen in %s of watching", w.watched)
			if window < need {
				seen += fmt.Sprintf(" (a live holder may renew up to %s after it was read: -watch %s would see it)", need, need)
			}
		}
		last = w.last
	}
	var diagnosis string
	cutOff := "cut off from " + store.name()
	switch {
	case alive:
		diagnosis = seen
	case rec.Fence == 0:
		diagnosis = "the claim is undated: it has no fence (a version before fences wrote it)"
	case last.Age+last.TTL <= opt.lease+leaseTolerance(opt.lease):
		diagnosis = fmt.Sprintf("the claim was taken %s ago and never renewed: its holder died before its first renewal, runs with Config.DisableHeartbeat, or is %s", last.Age.Round(time.Millisecond), cutOff)
	default:
		diagnosis = "its holder is probably dead, " + cutOff + ", or runs with Config.DisableHeartbeat"
	}
	if !alive {
		diagnosis = seen + ": " + diagnosis
	}
	if !opt.force {
		ends := fmt.Sprintf("the claim expires by itself in %s", last.TTL)
		if alive {
			ends = fmt.Sprintf("its lease (%s left) is renewed while its job runs: the claim ends with the job", last.TTL)
		}
		return fmt.Errorf("release: refused: %s; %s; -force deletes it now, at the risk of a second copy running beside a holder that is alive but %s", diagnosis, ends, cutOff)
	}
	return releaseClaim(ctx, store, out, key, rec, diagnosis)
}

// releaseClaim deletes rec's claim on key, token-checked, and says so;
// diagnosis is what release saw of its holder.
func releaseClaim(ctx context.Context, store claimStore, out io.Writer, key string, rec record, diagnosis string) error {
	if err := store.release(ctx, key, rec.Token); err != nil {
		if errors.Is(err, core.ErrLeaseLost) && rec.Fence == 0 {
			return fmt.Errorf("release: the token-checked delete takes only claims with a fence, and this one has none (or it changed since it was read); nothing released: it expires by itself in %s at most", rec.TTL)
		}
		if errors.Is(err, core.ErrLeaseLost) {
			return errors.New("release: the claim changed since it was read; nothing released")
		}
		return fmt.Errorf("release: %w", err)
	}
	fmt.Fprintf(out, "released although %s (-force); a holder still alive runs beside the next copy until it next renews or completes the claim and finds it gone\n", diagnosis)
	return nil
}

// watched is what watchLease saw.
type watched struct {
	last     record        // the last read
	watched  time.Duration // how long it watched
	renewed  bool          // the lease rose, from the read before
	from, to time.Duration // the lease before and after it rose
}

// watchLease reads key every pollEvery for window, and stops early when the
// key no longer holds rec's claim or its lease rose.
func watchLease(ctx context.Context, store claimStore, key string, rec record, window time.Duration) (watched, error) {
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
		cur, err := store.inspect(ctx, key)
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
