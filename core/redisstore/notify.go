package redisstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobonce/jobonce/core/driver"
)

// Notifications (driver.Notifier). A claim that Await finds held by another
// token sets the key's awaited mark, a key of its own in the key's hash
// slot that expires with the running claim's lease; complete.lua and
// release.lua delete a mark they find and publish the key on a channel
// named after it (SPUBLISH on Redis Cluster, where the channel lives on the
// key's primary), so a claim nobody waits for ends as before, without a
// publish. Claim and done marker values do not change: a worker of an
// earlier release ignores marks and never publishes, which costs a waiting
// copy latency only.

// markSuffix follows a key's hash tag in the name of its awaited mark.
const markSuffix = "\x00awaited"

// sharded is the complete and release scripts' argument for SPUBLISH.
const sharded = "s"

// markKey returns the name of key's awaited mark: the key and markSuffix
// when its hash tag decides its slot, otherwise the key as the mark's hash
// tag ("{key}" and markSuffix), so the mark shares the key's slot. On a
// Cluster client, a key without a hash tag that holds a "}" can have no
// such mark (no tag names its slot); ok is then false and the key is never
// notified.
func (s *Store) markKey(key string) (mark string, ok bool) {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key + markSuffix, true
		}
	}
	if s.cluster && strings.IndexByte(key, '}') >= 0 {
		return "", false
	}
	return "{" + key + "}" + markSuffix, true
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
// found running marked awaited for as long as the running claim's lease.
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

// Listen implements driver.Notifier: a Listener subscribes to the channels
// of the keys it is given on one connection per node that publishes them
// (the server behind a single-node or Sentinel client; each Ring shard; on
// Cluster, each primary holding a key, with SSUBSCRIBE), each read by a
// goroutine of the Listener's until Close. A connection that breaks is made
// again and subscribes again, and each key's subscription, confirmed again,
// is notified, so that its waiters read it again. Another UniversalClient
// gives an error.
func (s *Store) Listen(_ context.Context, notify func(key string)) (driver.Listener, error) {
	switch s.client.(type) {
	case *redis.Client, *redis.ClusterClient, *redis.Ring:
	default:
		return nil, fmt.Errorf("jobonce: redisstore: Listen needs a *redis.Client, *redis.ClusterClient or *redis.Ring, not a %T", s.client)
	}
	if notify == nil {
		return nil, errors.New("jobonce: redisstore: Listen: notify is nil")
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &listener{s: s, notify: notify, ctx: ctx, cancel: cancel,
		nodes: make(map[string]*pubsub), keys: make(map[string][]*pubsub)}, nil
}

// listener is a redisstore driver.Listener.
type listener struct {
	s      *Store
	notify func(key string)
	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // the readers

	mu     sync.Mutex
	nodes  map[string]*pubsub   // by node address
	keys   map[string][]*pubsub // the subscriptions of each key
	closed bool
}

// pubsub is one node's subscription connection.
type pubsub struct {
	ps      *redis.PubSub
	sharded bool
}

// pingEvery is how long a reader waits for a message before it pings its
// connection, which finds one that broke silently.
const pingEvery = 30 * time.Second

// Add implements driver.Listener: it subscribes to key's channel on the
// nodes that publish it. The subscription's confirmation is notified.
func (l *listener) Add(ctx context.Context, key string) error {
	nodes, err := l.route(ctx, key)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return errors.New("jobonce: redisstore: Listener is closed")
	}
	subs := l.keys[key][:0]
	var errs []error
	for _, node := range nodes {
		p := l.node(node)
		var err error
		if p.sharded {
			err = p.ps.SSubscribe(ctx, key)
		} else {
			err = p.ps.Subscribe(ctx, key)
		}
		if err != nil {
			errs = append(errs, cancelled(ctx, err))
			continue
		}
		subs = append(subs, p)
	}
	l.keys[key] = subs
	return errors.Join(errs...)
}

// Remove implements driver.Listener.
func (l *listener) Remove(ctx context.Context, key string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var errs []error
	for _, p := range l.keys[key] {
		var err error
		if p.sharded {
			err = p.ps.SUnsubscribe(ctx, key)
		} else {
			err = p.ps.Unsubscribe(ctx, key)
		}
		if err != nil {
			errs = append(errs, cancelled(ctx, err))
		}
	}
	delete(l.keys, key)
	return errors.Join(errs...)
}

// closeWait bounds how long Close waits for the Listener's goroutines.
const closeWait = time.Second

// Close implements driver.Listener: it closes the connections and waits
// for their readers to end, for closeWait at most. A reader that is making
// its connection again holds it until go-redis gives up (the client's
// DialTimeout and ReadTimeout, or the server's answer): Close then returns
// an error, and that reader, with the goroutine closing its connection,
// ends on its own by then, without notifying.
func (l *listener) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.cancel()
	nodes := slices.Collect(maps.Values(l.nodes))
	l.mu.Unlock()
	for _, p := range nodes {
		l.wg.Go(func() { _ = p.ps.Close() }) // waits for a reader making its connection
	}
	done := make(chan struct{})
	go func() {
		l.wg.Wait()
		close(done)
	}()
	t := time.NewTimer(closeWait)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
		return errors.New("jobonce: redisstore: Listener closed with a reader still making its connection; it ends with the client's dial and read timeouts")
	}
}

// route returns the clients of the nodes that publish key's channel.
func (l *listener) route(ctx context.Context, key string) ([]*redis.Client, error) {
	switch c := l.s.client.(type) {
	case *redis.Client:
		return []*redis.Client{c}, nil
	case *redis.ClusterClient:
		primary, err := c.MasterForKey(ctx, key)
		if err != nil {
			return nil, cancelled(ctx, err)
		}
		return []*redis.Client{primary}, nil
	case *redis.Ring:
		// A Ring routes a key to a shard by a hash of its own: listen on
		// every shard.
		var mu sync.Mutex
		var shards []*redis.Client
		err := c.ForEachShard(ctx, func(_ context.Context, shard *redis.Client) error {
			mu.Lock()
			shards = append(shards, shard)
			mu.Unlock()
			return nil
		})
		if err != nil {
			return nil, cancelled(ctx, err)
		}
		return shards, nil
	}
	return nil, fmt.Errorf("jobonce: redisstore: cannot listen through a %T", l.s.client)
}

// node returns the subscription connection of node, made and given a
// reader on first use. l.mu is held.
func (l *listener) node(node *redis.Client) *pubsub {
	addr := node.Options().Addr
	if p := l.nodes[addr]; p != nil {
		return p
	}
	p := &pubsub{ps: node.Subscribe(l.ctx), sharded: l.s.cluster}
	l.nodes[addr] = p
	l.wg.Add(1)
	go l.read(p)
	return p
}

// read reads p's connection until Close: each message and each
// (re)subscription confirmation notifies its key. A failed read is tried
// again after a pause that grows to a second; go-redis makes the
// connection again and subscribes it to its channels again.
func (l *listener) read(p *pubsub) {
	defer l.wg.Done()
	var pause time.Duration
	for {
		msg, err := p.ps.ReceiveTimeout(l.ctx, pingEvery)
		if l.ctx.Err() != nil {
			return
		}
		if err != nil {
			if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
				_ = p.ps.Ping(l.ctx)
				continue
			}
			pause = min(max(2*pause, 10*time.Millisecond), time.Second)
			t := time.NewTimer(pause)
			select {
			case <-l.ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		pause = 0
		switch m := msg.(type) {
		case *redis.Message:
			l.notify(m.Channel)
		case *redis.Subscription:
			switch m.Kind {
			case "subscribe", "ssubscribe", "sunsubscribe":
				// Subscribed, again after a reconnection, or dropped by the
				// server as the key's slot moved: read the key again.
				l.notify(m.Channel)
			}
		}
	}
}
