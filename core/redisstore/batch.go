package redisstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"

	"github.com/jobonce/jobonce/core/driver"
	"github.com/redis/go-redis/v9"
)

// errUnanswered is the error of a pipelined command that the client left
// without a reply or an error of its own.
var errUnanswered = errors.New("jobonce: redisstore: the pipeline ended without answering this request")

// Batch implements driver.BatchStore: the complete scripts, then the claim
// scripts, pipelined in one round trip. With Config.WaitReplicas, one WAIT
// follows. Every request gets a reply or an error, never a zero reply. A
// nil complete error means its done marker was written, and acknowledged
// when asked. A write not acknowledged gets an error matching
// core.ErrUnreplicated, and a claim so answered is released.
// docs/operations.md explains the failure cases.
func (s *Store) Batch(ctx context.Context, completes []driver.CompleteRequest, claims []driver.ClaimRequest) ([]driver.ClaimReply, []error, []error) {
	return s.batch(ctx, completes, claims, false)
}

// batch is Batch; with await, the claims mark the keys they find running
// awaited (Await).
func (s *Store) batch(ctx context.Context, completes []driver.CompleteRequest, claims []driver.ClaimRequest, await bool) ([]driver.ClaimReply, []error, []error) {
	if len(claims) > 0 {
		defer s.checkIfDue(ctx)
	}
	replies := make([]driver.ClaimReply, len(claims))
	errs, unacked := s.pipeline(ctx, len(completes)+len(claims), func(i int) (*redis.Script, []string, []any, error) {
		if i < len(completes) {
			args, err := s.completeArgs(&completes[i])
			return completeScript, s.markedKeys(completes[i].Key), args, err
		}
		req := &claims[i-len(completes)]
		args, err := s.claimArgs(req)
		if await {
			return claimScript, s.markedKeys(req.Key), args, err
		}
		return claimScript, []string{req.Key}, args, err
	}, func(i int, cmd *redis.Cmd) error {
		if i < len(completes) {
			return tokenChecked(ctx, cmd)
		}
		v, err := cmd.Result()
		if err != nil {
			return cancelled(ctx, err)
		}
		replies[i-len(completes)], err = claimReply(v)
		return err
	})
	claimErrs, completeErrs := errs[len(completes):], errs[:len(completes):len(completes)]
	for i, err := range completeErrs {
		if err == nil && unacked[i] != nil {
			completeErrs[i] = unacked[i]
		}
	}
	s.releaseUnacknowledged(ctx, claims, replies, claimErrs, unacked[len(completes):])
	return replies, claimErrs, completeErrs
}

// releaseUnacknowledged releases the claims of a batch whose writes were not
// acknowledged, and answers those granted unacked: a failover could lose
// them, and another copy would then run alongside. Claims that found a done
// marker are answered unacked too (the marker could be lost, and the copy
// would be skipped); those that found another's claim running stand. Claims answered with an
// error (a context that ended during the wait, say) may have been granted
// too, so they are released as well; the release is token-checked, so one
// never granted costs nothing. A release that fails leaves the claim to
// lapse with its lease.
func (s *Store) releaseUnacknowledged(ctx context.Context, claims []driver.ClaimRequest, replies []driver.ClaimReply, errs, unacked []error) {
	var granted []int
	for i, err := range errs {
		switch {
		case unacked[i] == nil:
		case err == nil && replies[i].State == driver.StateDone:
			replies[i], errs[i] = driver.ClaimReply{}, unacked[i]
		case err != nil || replies[i].State == driver.StateClaimed:
			granted = append(granted, i)
		}
	}
	if len(granted) == 0 {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.wait.timeout)
	defer cancel()
	pipe := s.client.Pipeline()
	for _, i := range granted {
		releaseScript.Eval(rctx, pipe, []string{claims[i].Key}, ownerValue(claims[i].Token)) // EVAL: the script may not be loaded here
		if errs[i] == nil {
			replies[i], errs[i] = driver.ClaimReply{}, unacked[i]
		}
	}
	if _, err := pipe.Exec(rctx); err != nil {
		s.logger.WarnContext(ctx, "jobonce: redisstore: could not release claims whose writes were not acknowledged; they lapse with their leases",
			"claims", len(granted), "error", err)
	}
}

// entry is one script call of a pipeline.
type entry struct {
	script  *redis.Script
	keys    []string
	argv    []any
	cmd     *redis.Cmd
	execErr error // the pipeline's error, for a call it left unanswered
	unacked error // the wait's error, when its pipeline's writes went unacknowledged
}

// pipeline runs n scripts in one pipeline with EVALSHA; call(i) gives the
// script of entry i, its keys (the first decides its node) and its arguments, and reply(i, cmd) reads its
// answer. Entries whose arguments are invalid are not sent and keep call's
// error. Entries that find their script missing (NOSCRIPT, after a restart
// or failover) are run again once it is loaded.
//
// With Config.WaitReplicas or WaitAOF, the pipeline ends with WAIT (or
// WAITAOF), and pipeline also returns, per entry, the wait's error when its
// write was not acknowledged (core.ErrUnreplicated). On a Cluster client,
// the entries go to each primary's own client, in parallel, each pipeline
// with its wait, so one primary's wait answers for its own entries only.
func (s *Store) pipeline(ctx context.Context, n int,
	call func(i int) (*redis.Script, []string, []any, error), reply func(i int, cmd *redis.Cmd) error,
) (errs, unacked []error) {
	errs = make([]error, n)
	entries := make([]entry, n)
	sent := make([]int, 0, n)
	for i := range n {
		script, keys, argv, err := call(i)
		if err != nil {
			errs[i] = err
			continue
		}
		entries[i] = entry{script: script, keys: keys, argv: argv}
		sent = append(sent, i)
	}
	unacked = make([]error, n)
	if len(sent) == 0 {
		return errs, unacked
	}
	cluster, _ := s.client.(*redis.ClusterClient)
	run := func(idx []int) {
		if !s.wait.on() || cluster == nil {
			s.run(ctx, s.client, false, entries, idx, true)
		} else {
			s.runOnPrimaries(ctx, cluster, entries, idx, errs)
		}
	}
	run(sent)
	if again := unmarked(entries, sent); len(again) > 0 {
		run(again)
	}
	for _, i := range sent {
		unacked[i] = entries[i].unacked
		cmd := entries[i].cmd
		if cmd == nil {
			continue // errs[i] says why
		}
		if cmd.Err() == nil && cmd.Val() == nil {
			// Every script replies with a value; none means no reply came.
			cmd.SetErr(cmp.Or(entries[i].execErr, errUnanswered))
		}
		if err := cmd.Err(); err != nil && unacked[i] != nil && s.mayHaveWritten(err) {
			// The write went out with the wait, which did not answer: it
			// may have been applied, and it was not acknowledged.
			cmd.SetErr(fmt.Errorf("%w: %w", driver.ErrUnreplicated, err))
		}
		errs[i] = reply(i, cmd)
	}
	return errs, unacked
}

// mayHaveWritten reports whether err, a script's error in a pipeline that
// carried a wait, leaves open that the server ran the script: any error but
// the server's own answer (which says what it did) and, when the client
// makes one attempt only, a failure to get a connection at all (a refused
// dial, every pooled connection busy: the server could not be reached). A
// client that retries reports only its last attempt's error, and an
// earlier attempt cut during its WAIT may have written.
func (s *Store) mayHaveWritten(err error) bool {
	var answer redis.Error
	if errors.As(err, &answer) {
		return false
	}
	var netErr *net.OpError
	connectless := errors.Is(err, redis.ErrPoolTimeout) || (errors.As(err, &netErr) && netErr.Op == "dial")
	return !connectless || s.retries
}

// runOnPrimaries runs the entries sent on the primaries that own their keys,
// one pipeline each, side by side, each with its wait; an entry whose
// primary is unknown gets an error in errs. An entry answered ASK (its slot
// is being migrated, its key is on the importing primary) is sent again to
// that primary, after ASKING; one answered MOVED (its slot moved) is sent
// again to the slot's new owner once the slot map is reloaded. Either goes
// in a pipeline with the wait of the node it is sent to, so the wait judges
// the node that did the write. An entry follows at most maxRedirects
// redirects, within ctx; one still redirected, or whose target the slot map
// does not name, keeps an error.
func (s *Store) runOnPrimaries(ctx context.Context, cluster *redis.ClusterClient, entries []entry, sent []int, errs []error) {
	groups := make(map[hop][]int)
	for _, i := range sent {
		primary, err := cluster.MasterForKey(ctx, entries[i].keys[0])
		if err != nil {
			errs[i] = cancelled(ctx, err)
			continue
		}
		h := hop{on: primary}
		groups[h] = append(groups[h], i)
	}
	for redirects := 0; len(groups) > 0; redirects++ {
		var wg sync.WaitGroup
		for h, idx := range groups {
			wg.Go(func() { s.run(ctx, h.on, h.asking, entries, idx, true) })
		}
		wg.Wait()
		if redirects == maxRedirects {
			if s.redirected(entries, groups) != nil {
				cluster.ReloadState(ctx) // the next calls go where the slot is now
			}
			return
		}
		groups = s.follow(ctx, cluster, entries, s.redirected(entries, groups))
	}
}

// hop is where a pipeline of runOnPrimaries goes: a primary, and whether its
// scripts each follow ASKING (an ASK redirect).
type hop struct {
	on     *redis.Client
	asking bool
}

// target is the node a redirect names.
type target struct {
	addr string
	ask  bool
}

// redirected returns the entries of groups answered ASK or MOVED, by the
// node the redirect names.
func (s *Store) redirected(entries []entry, groups map[hop][]int) map[target][]int {
	var to map[target][]int
	for _, idx := range groups {
		for _, i := range idx {
			if addr, ask, ok := redirect(entries[i].cmd.Err()); ok {
				if to == nil {
					to = make(map[target][]int)
				}
				to[target{addr, ask}] = append(to[target{addr, ask}], i)
			}
		}
	}
	return to
}

// follow returns the pipelines that send the entries of to where their
// redirects name, with the slot map reloaded; an entry whose target is no
// primary in the map keeps its redirect, with the reason added.
func (s *Store) follow(ctx context.Context, cluster *redis.ClusterClient, entries []entry, to map[target][]int) map[hop][]int {
	if len(to) == 0 {
		return nil
	}
	byAddr, err := primaries(ctx, cluster)
	groups := make(map[hop][]int, len(to))
	for t, idx := range to {
		on := byAddr[t.addr]
		if on == nil {
			for _, i := range idx {
				cmd := entries[i].cmd
				if err != nil {
					cmd.SetErr(cancelled(ctx, fmt.Errorf("%w (not followed: %w)", cmd.Err(), err)))
				} else {
					cmd.SetErr(fmt.Errorf("%w (not followed: the cluster's slot map names no primary at %s)", cmd.Err(), t.addr))
				}
			}
			continue
		}
		h := hop{on: on, asking: t.ask}
		groups[h] = append(groups[h], idx...)
	}
	return groups
}

// run sends entries idx on one node in one pipeline, with the wait when
// configured, whose error it sets on the entries; with asking, each script
// follows an ASKING (the node imports the scripts' slot). With reload, the
// entries that found their script missing are sent again once it is loaded
// (with a wait of their own).
func (s *Store) run(ctx context.Context, on node, asking bool, entries []entry, idx []int, reload bool) {
	pipe := on.Pipeline()
	for _, i := range idx {
		e := &entries[i]
		if asking {
			pipe.Do(ctx, "asking")
		}
		e.cmd = e.script.EvalSha(ctx, pipe, e.keys, e.argv...)
		e.unacked = nil // the wait of this pipeline judges this write
	}
	var acked func() error
	if s.wait.on() {
		acked = s.wait.queue(ctx, pipe)
	}
	_, execErr := pipe.Exec(ctx) // errors are read per command
	var missing []int
	for _, i := range idx {
		e := &entries[i]
		e.execErr = execErr
		if err := e.cmd.Err(); reload && err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT")) {
			missing = append(missing, i)
		}
	}
	if acked != nil {
		if err := acked(); err != nil {
			for _, i := range idx {
				entries[i].unacked = err
			}
		}
	}
	if len(missing) == 0 {
		return
	}
	if acked == nil {
		for _, i := range missing {
			e := &entries[i]
			e.cmd = e.script.Run(ctx, on, e.keys, e.argv...) // loads the script
		}
		return
	}
	loaded := missing[:0:0]
	for _, i := range missing {
		if err := entries[i].script.Load(ctx, on).Err(); err != nil {
			entries[i].cmd.SetErr(cancelled(ctx, err))
			continue
		}
		loaded = append(loaded, i)
	}
	if len(loaded) > 0 {
		s.run(ctx, on, asking, entries, loaded, false)
	}
}
