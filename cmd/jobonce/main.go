// Command jobonce checks and repairs the Redis that a jobonce Guard uses.
//
//	go run ./cmd/jobonce [flags] check
//	go run ./cmd/jobonce [flags] inspect KEY
//	go run ./cmd/jobonce [flags] release KEY
//
// Flags may come before or after the command and KEY; no argument after
// "--" is a flag, for a KEY that starts with "-". -h or -help prints the
// usage.
//
// check reports, for each server, the eviction policy, the persistence
// (AOF, RDB snapshots) and the replication (role, connected replicas,
// largest replica lag) that decide whether done markers survive memory
// pressure, restarts and failovers, with a "RISK:" line for each way they can
// be lost and duplicates run (see redisstore.ServerInfo.Risks). -fail-on
// lists the kinds of risk (eviction, persistence, replication, or all, the
// default, or none) that make it fail, so it can run as a readiness probe or
// a CI step; -max-lag is the replica lag above which replication is a risk.
//
// inspect shows a key's state. release deletes a stuck running claim by hand,
// for example when a job must run again before its lease expires, but without
// -force only a claim whose holder it has proven dead: one renewed before (so
// its holder runs a heartbeat) and not renewed while release watches it. A
// claim's fence dates it by the Redis server's clock: its age plus its
// remaining lease exceed the lease only once it was renewed, so -lease must
// match the Guard's Config.Lease. It watches the lease for a third of the
// lease left when it read the key, plus 250ms, and at most -watch (a live
// holder's heartbeat renews the claim every Lease/3, so within a third of
// whatever lease is left; the 250ms are the renewal's round trip and
// scheduling); a claim younger than a third of the lease plus 250ms it
// watches until then, for a first renewal. Without -force it refuses a claim
// whose lease rises while it watches (the holder is alive, and deleting the
// claim would run a second copy beside it); one never renewed (its holder
// died before its first renewal, or runs with Config.DisableHeartbeat, and
// the two cannot be told apart: it says when the claim expires by itself);
// one whose lease left exceeds -lease; one -watch was too short to tell; and
// one without a fence (written by a version before fences). -force releases
// any of them but the last, which the token-checked delete cannot take. A
// -lease shorter than the Guard's makes a never-renewed claim look renewed:
// release refuses it while more than -lease of it is left, and in its last
// -lease takes its holder for dead; a longer one only makes it refuse renewed
// claims too. The delete is token-checked: it never deletes a claim taken
// after the inspection, nor a done marker. KEY is the key the application
// passes to the Guard; -prefix, -plain and -lease must match its Config.
//
// The Redis URL comes from -redis, else $REDIS_URL. A URL holding a '#' is
// refused: percent-encode '#' as %23 in the password. No message the command
// prints holds any of the URL's user info (all between "://" and its last
// "@").
//
// # Exit status
//
// 0 when the command succeeded (for check: no risk of a -fail-on kind) or
// printed the usage for -h, 1 when it could not run (bad flags, Redis
// unreachable, a release refused or failed), 2 when check found a risk of a
// -fail-on kind.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/redisstore"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		msg := err.Error()
		if !strings.HasPrefix(msg, "jobonce: ") {
			msg = "jobonce: " + msg
		}
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, msg)
		if errors.Is(err, errRisk) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// defaultRedisURL is the Redis used when neither -redis nor $REDIS_URL names
// one.
const defaultRedisURL = "redis://127.0.0.1:6379/0"

func run(ctx context.Context, args []string, out io.Writer) (err error) {
	fs := flag.NewFlagSet("jobonce", flag.ContinueOnError)
	// No default from the environment: usage prints defaults, and the URL
	// may hold a password.
	redisURL := fs.String("redis", "", "Redis URL (default $REDIS_URL, or "+defaultRedisURL+" when it is unset)")
	prefix := fs.String("prefix", "jobonce:", "the Guard's Config.KeyPrefix")
	plain := fs.Bool("plain", false, "the Guard uses Config.PlainKeys")
	failOn := fs.String("fail-on", "all", "check: risk kinds that fail it (exit 2), comma-separated among eviction, persistence, replication; or all, or none")
	maxLag := fs.Duration("max-lag", 10*time.Second, "check: replica lag above which replication is a risk")
	force := fs.Bool("force", false, "release: release the claim even when its holder is not proven dead (seen renewing, never renewed, or not watched long enough)")
	watch := fs.Duration("watch", defaultWatch, "release: the longest it watches the lease for a renewal by a live holder; it watches for a third of the lease left when it read the key, plus 250ms (a claim younger than a third of -lease plus 250ms: until then), and refuses without -force when this is shorter")
	lease := fs.Duration("lease", defaultLease, "release: the Guard's Config.Lease, which it must match")
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintln(out, "usage: jobonce [flags] check | inspect KEY | release KEY")
		fmt.Fprintln(out, "Flags may come before or after the command and KEY; no argument after -- is a flag.")
		fmt.Fprintln(out, "release deletes a running claim only once it has proven its holder dead (renewed before, not renewed while it watches); -force deletes it anyway.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(flagsFirst(fs, args)); err != nil {
		return err
	}
	raw := cmp.Or(*redisURL, os.Getenv("REDIS_URL"), defaultRedisURL)
	defer func() { err = redactError(err, raw) }()
	failKinds, err := parseFailOn(*failOn)
	if err != nil {
		return err
	}
	if *watch < 0 {
		return fmt.Errorf("-watch: %s is negative", *watch)
	}
	if *lease <= 0 {
		return fmt.Errorf("-lease: %s is not positive", *lease)
	}
	if err := checkFragment(raw); err != nil {
		return fmt.Errorf("-redis: %w", err)
	}
	opt, err := redis.ParseURL(raw)
	if err != nil {
		return fmt.Errorf("-redis: %w", err)
	}
	client := redis.NewClient(opt)
	defer client.Close()
	store, err := redisstore.New(client, &redisstore.Config{SkipEvictionCheck: true})
	if err != nil {
		return err
	}
	guard, err := core.New(store, &core.Config{KeyPrefix: *prefix, PlainKeys: *plain})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second+*watch)
	defer cancel()

	cmd, rest := fs.Arg(0), fs.Args()
	switch {
	case cmd == "check" && len(rest) == 1:
		return check(ctx, client, out, failKinds, *maxLag)
	case (cmd == "inspect" || cmd == "release") && len(rest) == 2:
		key, err := guard.StoredKey(rest[1])
		if err != nil {
			return err
		}
		rec, err := store.Inspect(ctx, key)
		if err != nil {
			return err
		}
		printRecord(out, key, rec)
		if cmd == "inspect" {
			return nil
		}
		return release(ctx, store, out, key, rec, releaseOptions{force: *force, watch: *watch, lease: *lease})
	}
	fs.Usage()
	return errors.New("unknown command or wrong number of arguments")
}

func printRecord(out io.Writer, key string, rec redisstore.Record) {
	fmt.Fprintf(out, "stored key: %q\n", key)
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
		fmt.Fprintln(out, "state: absent (never run, released, or expired)")
	}
}
