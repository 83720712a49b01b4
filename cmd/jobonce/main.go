// Command jobonce checks and repairs the store of a jobonce Guard: Redis
// (redisstore) or PostgreSQL (pgstore).
//
//	go run ./cmd/jobonce [flags] check
//	go run ./cmd/jobonce [flags] list
//	go run ./cmd/jobonce [flags] key ADAPTER NAME
//	go run ./cmd/jobonce [flags] inspect KEY
//	go run ./cmd/jobonce [flags] release KEY
//	go run ./cmd/jobonce [flags] forget KEY
//	go run ./cmd/jobonce help [COMMAND]
//
// "jobonce help COMMAND", "jobonce COMMAND -h" and "jobonce -h COMMAND"
// print a command's usage and flags; "jobonce help" and "jobonce -h" the
// overview. Flags may come before or after the command and KEY; no argument
// after "--" is a flag, for a KEY that starts with "-". A flag of another
// command is refused, naming the command it belongs to.
//
// # Stores
//
// The store is PostgreSQL when -postgres names a database URL, or when
// $DATABASE_URL is set and neither -redis nor $REDIS_URL is; otherwise
// Redis, at -redis, else $REDIS_URL, else redis://127.0.0.1:6379/0; a Redis
// URL that names more nodes with addr parameters
// (redis://host:port?addr=host:port&addr=..., go-redis's cluster URL) is a
// Redis Cluster. Giving both -redis and -postgres is an error. On
// PostgreSQL, -schema and -table must name the Guard's table
// (pgstore.Config.Schema and Table: by default "jobonce_keys" found through
// the connection's search_path); they are refused on Redis. A URL holding a
// '#' is refused: percent-encode '#' as %23 in the password. No message the
// command prints holds any of a URL's user info (all between "://" and its
// last "@") or a password given as a parameter (password=...). The clients'
// own logs (go-redis's pool messages) are silenced: an error is the
// command's one line on stderr.
//
// # Keys
//
// KEY is the key the application passes to the Guard; -prefix and -plain
// must match its Config.KeyPrefix and Config.PlainKeys. Every command
// prints the stored key as 0x and its bytes in hex, which a shell takes as
// it is, and accepts that form as KEY too (0x or \x, as psql prints a
// bytea, then hex whose bytes begin with -prefix). When a key is absent,
// inspect, release and forget say which stored key they looked up, try the
// key's other form (hashed or -plain) and KEY itself as a stored key, say
// where they found it, and otherwise name the likely causes: -prefix or
// -plain not matching the Guard's, another database or table, or a
// retention that ran out (on PostgreSQL, an expired row waiting for Prune
// says so).
//
// # list
//
// list prints the running claims under -prefix, oldest first: their age
// (since the claim was taken, by its fence and the store's clock), the
// lease left, the holder (the first 8 hex digits of its token) and the
// stored key; "past-lease" marks a claim held longer than -lease (the
// Guard's Config.Lease), which its holder's heartbeat renewed: a long job,
// or one that hangs while its heartbeat runs. A claim whose holder died
// drops out once its lease runs out (a Redis key expires, a PostgreSQL row
// stops being live). -done lists done markers too. It reads a bounded part
// of the store: on Redis, SCAN of the keys under -prefix (COUNT 1000, at
// most -scan keys on each server, every primary of a Cluster client) and
// the first 25 bytes of each value; on PostgreSQL, through the expiry index,
// at most -scan of the rows whose lease or retention ends within -lease
// (every live claim of a Guard whose Lease is at most -lease), and with
// -done at most -scan of the rows with the most retention left. It prints
// at most -limit entries, and says what it left out.
//
// # key
//
// key prints the key an adapter gives a job under its default
// configuration (asynqonce.DefaultKey, sqsonce.DefaultKey,
// riveronce.DefaultKey, watermillonce.DefaultKey) and its stored key under
// -prefix and -plain, which inspect, release and forget take; it reads no
// store. ADAPTER is asynq, sqs, river or watermill, NAME the task type, the
// queue (a URL or a name), the River kind or the Watermill handler. The
// payload (a task's payload, an SQS body, River's args as the river_job.args
// column prints them, a Watermill payload) comes from -payload FILE or
// stdin; -topic names a Watermill handler's topic, -message-id an SQS FIFO
// message, -metadata and -job-id a River job's metadata and ID.
//
// # check
//
// check reports what decides whether the store keeps done markers, with a
// "RISK:" line for each way they can be lost and duplicates run. On Redis,
// for each server: the eviction policy, the persistence (AOF, RDB
// snapshots) and the replication (role, connected replicas, largest replica
// lag) that decide whether done markers survive memory pressure, restarts
// and failovers (see redisops.ServerInfo.Risks). On PostgreSQL: the
// server's version and role, fsync and synchronous_commit (off loses the
// last commits in a crash: a persistence risk), the standbys streaming from
// it, whether commits wait for a synchronous one, and the largest flush lag
// (no standby, or asynchronous ones lagging over -max-lag: a replication
// risk), then whether the table, its fence column and its expiry index are
// present and valid (a missing table or column fails check: workers cannot
// start), and how many expired rows wait for Prune. -fail-on lists the
// kinds of risk (eviction, persistence, replication, or all, the default,
// or none) that make it fail, so it can gate a deploy (a CI step, an init
// container; a running worker answers Guard.Ready); -max-lag is the replica
// lag above which replication is a risk.
//
// # inspect, release, forget
//
// inspect shows a key's state. release deletes a stuck running claim by hand,
// for example when a job must run again before its lease expires, but only
// with -force: no observation made from outside proves a holder dead before
// its lease ends, since a holder cut off from the store (a partition, a hung
// call, an exhausted pool) runs its job on until its own deadline and looks
// the same as a crashed one. Without -force it refuses (exit 1) and says
// what it saw and when the claim expires by itself (or that its holder
// renews it). It first watches the lease for a third of the lease left plus
// 250ms, at most -watch (a live holder's heartbeat renews the claim every
// Lease/3, so within a third of
// whatever lease is left; the 250ms are the renewal's round trip and
// scheduling), and tells: the holder is alive and renewing (the lease rose);
// no renewal seen (its holder is probably dead, cut off from the store, or
// runs with Config.DisableHeartbeat); never renewed (the claim's age by its
// fence, the server's clock, plus its lease left do not exceed -lease, which
// should match the Guard's Config.Lease: a fence written by another
// primary's clock before a failover can make this wrong, which decides
// nothing); or undated (no fence: written by a version before fences, which
// the token-checked delete cannot take even with -force). -force watches as
// well, then deletes; -watch 0 skips the watch. The delete is token-checked:
// it never deletes a claim taken after the inspection, nor a done marker. On
// PostgreSQL the claim's row expires at once and stays until pruned, as
// when its holder releases it.
//
// forget deletes a done marker, so that the next copy of its job runs again.
// It shows the marker, then asks "delete? [y/N]" and reads the answer from
// stdin (anything but y or yes, end of input included, deletes nothing);
// -yes deletes without asking. It refuses a running claim (release ends
// those), and deletes the marker only if the key still holds the one it
// showed, in one step (a Lua script on Redis, one UPDATE on PostgreSQL,
// where the row expires at once and stays until pruned): a claim or marker
// written since is kept.
//
// # Exit status
//
// 0 when the command succeeded (for check: no risk of a -fail-on kind) or
// printed the usage it was asked for (help, -h); 1 when it could not run or
// did not do what it was asked: no command, an unknown command or flag, a
// store unreachable, a table not migrated, a release or forget refused,
// declined or failed, a key absent for inspect, release or forget; 2 when
// check found a risk of a -fail-on kind. No command is 1, not 2, so that a
// deploy gate never reads a wrong invocation as a risk.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

func main() {
	quietClientLogs()
	err := run(context.Background(), os.Args[1:], os.Stdin, os.Stdout)
	if err == nil || errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	fmt.Fprintln(os.Stderr, errorLine(err))
	if errors.Is(err, errRisk) {
		os.Exit(2)
	}
	os.Exit(1)
}

// errorLine returns err as the command's one line on stderr: prefixed with
// "jobonce: " and with the lines of a joined error joined by "; " (or by a
// space after a colon).
func errorLine(err error) string {
	msg := strings.NewReplacer(":\n", ": ", "\n", "; ").Replace(err.Error())
	msg = strings.Join(strings.Fields(msg), " ")
	if !strings.HasPrefix(msg, "jobonce: ") {
		msg = "jobonce: " + msg
	}
	return msg
}

// run runs the command args name, reading answers from in and printing to
// out. Its error is flag.ErrHelp after a usage asked for with -h, and wraps
// errRisk when check found a risk of a -fail-on kind.
func run(ctx context.Context, args []string, in io.Reader, out io.Writer) (err error) {
	var o options
	defer func() { err = redactError(err, o.urls()...) }()
	name := commandName(args)
	if name == "" || name == "help" {
		return runHelp(args, out)
	}
	cmd := findCommand(name)
	if cmd == nil {
		return fmt.Errorf("unknown command %q: jobonce help lists the commands", name)
	}
	fs := cmd.flagSet(&o, out)
	if err := fs.Parse(flagsFirst(fs, args)); err != nil {
		return foreignFlag(err, cmd)
	}
	keys := fs.Args()[1:]
	if len(keys) != len(cmd.args) {
		fmt.Fprintf(out, "usage: jobonce [flags] %s\n", cmd.synopsis())
		return fmt.Errorf("%s takes %s, got %d arguments: jobonce help %s prints its usage", cmd.name, cmd.argsText(), len(keys), cmd.name)
	}
	return cmd.run(ctx, &invocation{opt: &o, set: setFlags(fs), keys: keys, in: in, out: out})
}
