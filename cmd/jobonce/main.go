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
// for example when a job must run again before its lease expires, but only
// with -force: no observation made from outside proves a holder dead before
// its lease ends, since a holder cut off from Redis (a partition, a hung
// call, an exhausted pool) runs its job on until its own deadline and looks
// the same as a crashed one. Without -force it refuses (exit 1) and says
// what it saw and when the claim expires by itself. It first watches the
// lease for a third of the lease left plus 250ms, at most -watch (a live
// holder's heartbeat renews the claim every Lease/3, so within a third of
// whatever lease is left; the 250ms are the renewal's round trip and
// scheduling), and tells: the holder is alive and renewing (the lease rose);
// no renewal seen (its holder is probably dead, cut off from Redis, or runs
// with Config.DisableHeartbeat); never renewed (the claim's age by its fence,
// the server's clock, plus its lease left do not exceed -lease, which should
// match the Guard's Config.Lease: a fence written by another primary's
// clock before a failover can make this wrong, which decides nothing); or
// undated (no fence: written by a version before fences, which the
// token-checked delete cannot take even with -force). -force watches as
// well, then deletes; -watch 0 skips the watch. The delete is token-checked:
// it never deletes a claim taken after the inspection, nor a done marker.
// KEY is the key the application passes to the Guard; -prefix and -plain
// must match its Config.
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
	force := fs.Bool("force", false, "release: delete the running claim, at the risk of a second copy running beside a holder alive but cut off from Redis; without it, release only says what it saw")
	watch := fs.Duration("watch", defaultWatch, "release: the longest it watches the lease for a renewal by a live holder (it watches for a third of the lease left plus 250ms); 0 skips the watch")
	lease := fs.Duration("lease", defaultLease, "release: the Guard's Config.Lease, by which it tells a claim renewed before from one never renewed")
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintln(out, "usage: jobonce [flags] check | inspect KEY | release KEY")
		fmt.Fprintln(out, "Flags may come before or after the command and KEY; no argument after -- is a flag.")
		fmt.Fprintln(out, "release watches a running claim and says what it saw; it deletes it only with -force.")
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
