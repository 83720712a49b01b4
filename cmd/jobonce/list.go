package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jobonce/jobonce/core/driver"
)

var listCommand = &command{
	name:    "list",
	summary: "list the running claims (and with -done the done markers), oldest first",
	about: `list shows the running claims under -prefix, oldest first, with their age (since the claim was
taken, by the store's clock), the lease left, and their holder (the first 8 hex digits of the
claim's token, which inspect prints whole). A claim held longer than -lease is "past-lease": its
holder's heartbeat renewed it, so the holder was alive at its last renewal and its job runs long
(or hangs with its heartbeat running); release watches it. A claim whose holder died is not
listed once its lease ran out: on Redis it expired with its TTL, on PostgreSQL its row is no longer
live and a later copy may claim the key. -done lists done markers too, with their retention left.

It reads a bounded part of the store. On Redis it scans the keys under -prefix with SCAN (never
KEYS), COUNT 1000 at a time, at most -scan keys on each server (every primary of a Cluster),
and reads the first 25 bytes of each value. On PostgreSQL it reads, through the expiry index, at
most -scan of the rows whose lease or retention ends within -lease, which holds every live
claim of a Guard whose Lease is at most -lease, and with -done at most -scan of the rows with
the most retention left. It prints at most -limit entries and says what it left out.`,
	flags: func(fs *flag.FlagSet, o *options) {
		fs.StringVar(&o.prefix, "prefix", defaultPrefix, "the Guard's Config.KeyPrefix: the keys listed")
		fs.DurationVar(&o.lease, "lease", defaultLease, "the Guard's Config.Lease (the longest, when several Guards share the store): a claim held longer is past-lease")
		fs.IntVar(&o.scan, "scan", defaultScan, "the most keys (rows) read on each server")
		fs.IntVar(&o.limit, "limit", defaultLimit, "the most entries printed")
		fs.BoolVar(&o.done, "done", false, "list the done markers too")
	},
	run: runList,
}

// The defaults of -scan and -limit.
const (
	defaultScan  = 100_000
	defaultLimit = 100
)

// listOptions are list's flags, for a store.
type listOptions struct {
	prefix string
	lease  time.Duration
	scan   int
	done   bool
}

// entry is a running claim or a done marker a store's list found.
type entry struct {
	key   string
	state driver.State
	token driver.Token  // a running claim's
	fence int64         // a running claim's; 0 when it has none
	age   time.Duration // a running claim's, by its fence and the store's clock
	left  time.Duration // the lease or retention left
}

// listing is what a store's list read.
type listing struct {
	// claims and done are what was found; done holds markers only with
	// listOptions.done.
	claims, done []entry
	// doneCount is how many done markers were seen, -1 when they were not
	// read (PostgreSQL without listOptions.done).
	doneCount int
	// others counts keys under the prefix that hold neither a claim nor a
	// marker (awaited marks, another program's values).
	others int
	// read is how many keys or rows were read, and partial says the bound
	// (-scan) stopped a read before its end.
	read    int
	partial bool
	// notes are what the store says of the read, one line each.
	notes []string
}

func runList(ctx context.Context, c *invocation) error {
	o := c.opt
	switch {
	case o.scan <= 0:
		return fmt.Errorf("-scan: %d is not positive", o.scan)
	case o.limit <= 0:
		return fmt.Errorf("-limit: %d is not positive", o.limit)
	case o.lease <= 0:
		return fmt.Errorf("-lease: %s is not positive", o.lease)
	case o.prefix == "":
		return errors.New("-prefix: empty: give the Guard's Config.KeyPrefix")
	}
	s, err := openStore(ctx, c)
	if err != nil {
		return err
	}
	defer s.close()
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	l, err := s.list(ctx, listOptions{prefix: o.prefix, lease: o.lease, scan: o.scan, done: o.done})
	if err != nil {
		return fmt.Errorf("list: %w", err)
	}
	printListing(c.out, s.where(), l, o.prefix, o.lease, o.limit)
	return nil
}

// printListing prints l, read from where: its claims oldest first, then its
// done markers with the most retention left first, at most limit of them,
// and a summary.
func printListing(out io.Writer, where string, l listing, prefix string, lease time.Duration, limit int) {
	slices.SortFunc(l.claims, func(a, b entry) int {
		if (a.fence == 0) != (b.fence == 0) { // undated ones first: written by an earlier version
			if a.fence == 0 {
				return -1
			}
			return 1
		}
		return cmp.Or(cmp.Compare(b.age, a.age), strings.Compare(a.key, b.key))
	})
	slices.SortFunc(l.done, func(a, b entry) int { return cmp.Or(cmp.Compare(b.left, a.left), strings.Compare(a.key, b.key)) })
	fmt.Fprintf(out, "%s, keys under -prefix %q:\n", where, prefix)
	entries := append(append([]entry(nil), l.claims...), l.done...)
	shown := entries[:min(len(entries), limit)]
	past := 0
	for _, e := range l.claims {
		if e.fence != 0 && e.age > lease {
			past++
		}
	}
	if len(shown) > 0 {
		w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "STATE\tAGE\tLEFT\tHOLDER\tSTORED KEY\tREADS")
		for _, e := range shown {
			state, age, holder := "done", "-", "-"
			if e.state == driver.StateRunning {
				state, age, holder = "running", "undated", e.token.String()[:8]
				if e.fence != 0 {
					age = e.age.Round(time.Millisecond).String()
					if e.age > lease {
						state = "past-lease"
					}
				}
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", state, age, e.left.Round(time.Millisecond), holder, storedForm(e.key), readable(e.key))
		}
		w.Flush()
	}
	fmt.Fprintf(out, "%s, %d held past -lease %s", count(len(l.claims), "running claim"), past, lease)
	if l.doneCount >= 0 {
		fmt.Fprintf(out, "; %s", count(l.doneCount, "done marker"))
		if len(l.done) == 0 && l.doneCount > 0 {
			fmt.Fprint(out, " (-done lists them)")
		}
	}
	fmt.Fprintln(out, ".")
	if len(shown) < len(entries) {
		fmt.Fprintf(out, "%d of %d shown (-limit %d).\n", len(shown), len(entries), limit)
	}
	if l.others > 0 {
		fmt.Fprintf(out, "%s under the prefix: neither a claim nor a marker (awaited marks, or another program's values).\n", count(l.others, "other key"))
	}
	for _, n := range l.notes {
		fmt.Fprintln(out, n)
	}
}

// readable returns a stored key as a quoted string, its end cut off past
// 60 bytes.
func readable(key string) string {
	const most = 60
	if len(key) > most {
		return fmt.Sprintf("%q…", key[:most])
	}
	return fmt.Sprintf("%q", key)
}

// count returns "1 thing" or "n things".
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
