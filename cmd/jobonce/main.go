// Command jobonce checks and repairs the Redis that a jobonce Guard uses.
//
//	go run ./cmd/jobonce [flags] check
//	go run ./cmd/jobonce [flags] inspect KEY
//	go run ./cmd/jobonce [flags] release KEY
//
// check reports the eviction policy and persistence settings that decide
// whether done markers survive memory pressure and restarts. inspect shows a
// key's state. release deletes a stuck running claim by hand (token-checked,
// so it never deletes a claim taken after the inspection), for example when
// a job must run again before its lease expires. KEY is the key the
// application passes to the Guard; -prefix and -plain must match its Config.
package main

import (
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
		fmt.Fprintln(os.Stderr, "jobonce:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("jobonce", flag.ContinueOnError)
	url := fs.String("redis", envOr("REDIS_URL", "redis://127.0.0.1:6379/0"), "Redis URL (or $REDIS_URL)")
	prefix := fs.String("prefix", "jobonce:", "the Guard's Config.KeyPrefix")
	plain := fs.Bool("plain", false, "the Guard uses Config.PlainKeys")
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintln(out, "usage: jobonce [flags] check | inspect KEY | release KEY")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	opt, err := redis.ParseURL(*url)
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
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()

	cmd, rest := fs.Arg(0), fs.Args()
	switch {
	case cmd == "check" && len(rest) == 1:
		return check(ctx, client, out)
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
		if rec.State != driver.StateRunning {
			return errors.New("release: the key holds no running claim; nothing released")
		}
		if err := store.Release(ctx, key, rec.Token); err != nil {
			return fmt.Errorf("release: %w (the claim changed since it was read)", err)
		}
		fmt.Fprintln(out, "released: the next delivery of the job will run it")
		return nil
	}
	fs.Usage()
	return errors.New("unknown command or wrong number of arguments")
}

func printRecord(out io.Writer, key string, rec redisstore.Record) {
	fmt.Fprintf(out, "stored key: %q\n", key)
	switch rec.State {
	case driver.StateRunning:
		fmt.Fprintf(out, "state: running (lease ends in %s, token %s, fingerprint %q)\n", rec.TTL, rec.Token, rec.Fingerprint)
	case driver.StateDone:
		fmt.Fprintf(out, "state: done (kept for %s more, fingerprint %q, result %d bytes)\n", rec.TTL, rec.Fingerprint, len(rec.Result))
	default:
		fmt.Fprintln(out, "state: absent (never run, released, or expired)")
	}
}

func check(ctx context.Context, client *redis.Client, out io.Writer) error {
	cfg, err := client.ConfigGet(ctx, "*").Result()
	if err != nil {
		return fmt.Errorf("CONFIG GET (is it disabled on this server?): %w", err)
	}
	ok := true
	policy := cfg["maxmemory-policy"]
	fmt.Fprintf(out, "maxmemory: %s, maxmemory-policy: %s\n", cfg["maxmemory"], policy)
	if strings.HasPrefix(policy, "allkeys-") {
		ok = false
		fmt.Fprintln(out, "  RISK: allkeys-* can evict claims and done markers, letting duplicates run; use noeviction or volatile-*")
	}
	fmt.Fprintf(out, "appendonly: %s, save: %q\n", cfg["appendonly"], cfg["save"])
	if cfg["appendonly"] != "yes" && cfg["save"] == "" {
		ok = false
		fmt.Fprintln(out, "  RISK: no persistence: a restart forgets every done marker, so redelivered jobs run again")
	}
	if ok {
		fmt.Fprintln(out, "ok: done markers are neither evicted nor lost on restart")
	}
	return nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
