package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jobonce/jobonce/core/driver"
)

var inspectCommand = &command{
	name:    "inspect",
	args:    []string{"KEY"},
	keyed:   true,
	summary: "show what the store holds for a key",
	about: `inspect shows a key's stored key and its state: a running claim (its lease left, how long it has
been held, its token) or a done marker (its retention left, its result's size). KEY is the key the
application passes to the Guard, or the stored key 0x... that inspect prints. When nothing is stored,
it says what it looked up, tries the key's other forms, names the likely causes, and exits 1.`,
	run: runInspect,
}

func runInspect(ctx context.Context, c *invocation) error {
	t, err := readKey(ctx, c)
	if err != nil {
		return err
	}
	defer t.store.close()
	if t.rec.State == 0 {
		t.explainAbsent(ctx, c.out)
		return errors.New("inspect: nothing is stored under the key")
	}
	return nil
}

// target is the key a command acts on, as it read it.
type target struct {
	store  keyStore
	namer  *keyNamer
	lookup lookup
	rec    record
}

// readKey opens the store, reads the key c.keys[0] names and prints it. The
// caller closes t.store.
func readKey(ctx context.Context, c *invocation) (*target, error) {
	namer := newKeyNamer(c.opt.prefix, c.opt.plain)
	l, err := namer.resolve(c.keys[0])
	if err != nil {
		return nil, err
	}
	s, err := openStore(ctx, c)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	rec, err := s.inspect(ctx, l.stored)
	if err != nil {
		s.close()
		return nil, err
	}
	printRecord(c.out, l.stored, rec)
	return &target{store: s, namer: namer, lookup: l, rec: rec}, nil
}

// printRecord prints the stored key and rec, its state.
func printRecord(out io.Writer, key string, rec record) {
	fmt.Fprintf(out, "stored key: %s (reads %q)\n", storedForm(key), key)
	switch rec.State {
	case driver.StateRunning:
		held := "undated: no fence"
		if rec.Fence != 0 {
			held = "held for " + rec.Age.Round(time.Millisecond).String()
		}
		fmt.Fprintf(out, "state: running (lease ends in %s, %s, token %s, fingerprint %q)\n", rec.TTL, held, rec.Token, rec.Fingerprint)
	case driver.StateDone:
		fmt.Fprintf(out, "state: done (kept for %s more, fingerprint %q, result %d bytes)\n", rec.TTL, rec.Fingerprint, len(rec.Result))
	default:
		switch e := rec.expired; {
		case e != nil && e.done:
			fmt.Fprintf(out, "state: absent (its done row expired %s ago: its retention ran out, or forget deleted it; Prune deletes it)\n", e.ago.Round(time.Millisecond))
		case e != nil:
			fmt.Fprintf(out, "state: absent (its claim's row expired %s ago: the lease ended, or its holder or release let it go; Prune deletes it)\n", e.ago.Round(time.Millisecond))
		default:
			fmt.Fprintln(out, "state: absent (never run, released, or expired)")
		}
	}
}

// explainAbsent says, for a key found absent, what was looked up and where,
// whether the key's other forms hold something, and otherwise the likely
// causes.
func (t *target) explainAbsent(ctx context.Context, out io.Writer) {
	fmt.Fprintf(out, "looked up: %s, stored key %s, in %s\n", t.namer.describe(t.lookup), storedForm(t.lookup.stored), t.store.where())
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	found := false
	for _, alt := range t.namer.alternatives(t.lookup) {
		rec, err := t.store.inspect(ctx, alt.stored)
		switch {
		case err != nil:
			fmt.Fprintf(out, "hint: %s: reading it failed: %v\n", storedForm(alt.stored), err)
		case rec.State != 0:
			found = true
			fmt.Fprintf(out, "hint: %s: stored key %s holds a %s\n", alt.advice, storedForm(alt.stored), stateName(rec.State))
		}
	}
	switch e := t.rec.expired; {
	case found:
	case e != nil && e.done:
		fmt.Fprintln(out, "hint: the job ran, and its done marker outlived the Guard's Config.Retention or was forgotten (jobonce forget): a copy delivered now runs again")
	case e != nil:
		fmt.Fprintln(out, "hint: the key was claimed, and the claim ended without a done marker (the job failed, or its lease ran out)")
	case t.lookup.asStored:
		fmt.Fprintf(out, "hint: nothing is stored there; likely:\n  - %s;\n  - or the key's done marker outlived the Guard's Config.Retention and expired.\n", t.store.databaseHint())
	default:
		fmt.Fprintf(out, "hint: nothing under the key's other forms either; likely:\n  - -prefix %q or -plain=%t do not match the Guard's Config.KeyPrefix and Config.PlainKeys;\n  - %s;\n  - or the key's done marker outlived the Guard's Config.Retention and expired.\n",
			t.namer.prefix, t.namer.plain, t.store.databaseHint())
	}
}

// stateName names a key's state in a hint.
func stateName(s driver.State) string {
	if s == driver.StateRunning {
		return "running claim"
	}
	return "done marker"
}
