package redisstore

import (
	"context"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/jobonce/jobonce/core/driver"
)

// Notifications (driver.Notifier). A claim that Await finds held by another
// token sets the key's awaited mark, a key of its own in the key's hash
// slot that expires with the running claim's lease; complete.lua and
// release.lua delete a mark they find and publish the key on a channel
// named after it (SPUBLISH on Redis Cluster, where the channel lives on the
// key's primary), so a claim nobody waits for ends without a publish. Claim and done marker values do not change: a worker of an
// earlier release ignores marks and never publishes, which costs a waiting
// copy latency only.

// markSuffix follows a key's hash tag in the name of its awaited mark.
const markSuffix = "\x00awaited"

// sharded is the complete and release scripts' argument for SPUBLISH.
const sharded = "s"

// markKey returns the name of key's awaited mark, which begins with the
// key, so that an ACL that allows the key (~<KeyPrefix>*) allows its mark:
// the key and markSuffix when its hash tag decides its slot, otherwise the
// key, the key again as the mark's hash tag ("{key}") and markSuffix, so
// the mark shares the key's slot. A key without a hash tag that holds a
// brace cannot name its slot so: on a Cluster client such a key can have no
// mark (ok is then false and the key is never notified); elsewhere, where
// no slot binds them, its mark is the key and markSuffix.
func (s *Store) markKey(key string) (mark string, ok bool) {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key + markSuffix, true
		}
	}
	if strings.ContainsAny(key, "{}") {
		if s.cluster {
			return "", false
		}
		return key + markSuffix, true
	}
	return key + "{" + key + "}" + markSuffix, true
}

// markedKeys returns the keys of a script on key: the key, and its awaited
// mark when it can have one.
func (s *Store) markedKeys(key string) []string {
	if mark, ok := s.markKey(key); ok {
		return []string{key, mark}
	}
	return []string{key}
}

// runMarked runs script on key and its awaited mark (markedKeys). A
// Cluster node answers a script on two keys TRYAGAIN, running nothing,
// while their slot migrates and one of them is missing (a mark most often
// is): the script then runs on the key alone, reading no mark, which costs
// a copy that awaits the key its signal, not its outcome.
func (s *Store) runMarked(ctx context.Context, script *redis.Script, key string, args []any) *redis.Cmd {
	keys := s.markedKeys(key)
	cmd := script.Run(ctx, s.client, keys, args...)
	if len(keys) > 1 && tryAgain(cmd.Err()) {
		return script.Run(ctx, s.client, keys[:1], args...)
	}
	return cmd
}

// unmarked takes the awaited mark off the entries of idx that a Cluster
// node answered TRYAGAIN (see runMarked), to be sent again, and returns
// them.
func unmarked(entries []entry, idx []int) []int {
	var again []int
	for _, i := range idx {
		e := &entries[i]
		if len(e.keys) > 1 && e.cmd != nil && tryAgain(e.cmd.Err()) {
			e.keys = e.keys[:1]
			again = append(again, i)
		}
	}
	return again
}

func tryAgain(err error) bool { return err != nil && redis.HasErrorPrefix(err, "TRYAGAIN") }

// Await implements driver.Notifier: Claim in one round trip, with a key
// found running marked as awaited while the running claim's lease lasts.
func (s *Store) Await(ctx context.Context, req driver.ClaimRequest) (driver.ClaimReply, error) {
	if s.wait.on() {
		replies, errs, _ := s.batch(ctx, nil, []driver.ClaimRequest{req}, true)
		return replies[0], errs[0]
	}
	defer s.checkIfDue(ctx)
	args, err := s.claimArgs(&req)
	if err != nil {
		return driver.ClaimReply{}, err
	}
	v, err := s.runMarked(ctx, claimScript, req.Key, args).Result()
	if err != nil {
		return driver.ClaimReply{}, cancelled(ctx, err)
	}
	return claimReply(v)
}
