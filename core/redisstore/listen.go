package redisstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobonce/jobonce/core/driver"
)

// Listen implements driver.Notifier. The Listener subscribes to its keys'
// channels on one connection per node that publishes them, read by a
// goroutine of its own until Close. Add returns once the node confirmed the
// subscription, or with an error when it refused it. A connection that
// breaks is made again; each key is then subscribed to again and notified.
// Listen returns an error for a nil notify, or a client other than a
// *redis.Client, *redis.ClusterClient or *redis.Ring.
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
		nodes: make(map[string]*subscription), keys: make(map[string][]*subscription),
		adds: make(map[string][]*pendingAdd)}, nil
}

// listener is a redisstore driver.Listener. Its lock comes before a
// subscription's.
type listener struct {
	s      *Store
	notify func(key string)
	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // the readers, and the moves of keys to their new nodes

	mu     sync.Mutex
	nodes  map[string]*subscription   // by node address
	keys   map[string][]*subscription // the nodes each key is subscribed on
	adds   map[string][]*pendingAdd   // Adds waiting for their key's confirmations
	closed bool
}

// pendingAdd is an Add waiting for its key's subscriptions to be confirmed.
type pendingAdd struct {
	left map[*subscription]bool // the nodes yet to confirm
	done chan error             // its answer, once
}

// errClosed is the error of a call to a closed Listener.
var errClosed = errors.New("jobonce: redisstore: Listener is closed")

// Add implements driver.Listener: it subscribes to key's channel on the
// nodes that publish it and returns once each confirmed, which is notified
// first. Its error says why the subscription failed: ctx ended, or a node
// refused it (see Listen).
func (l *listener) Add(ctx context.Context, key string) error {
	clients, err := l.route(ctx, key)
	if err != nil {
		return err
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return errClosed
	}
	subs := make([]*subscription, len(clients))
	p := &pendingAdd{left: make(map[*subscription]bool), done: make(chan error, 1)}
	for i, c := range clients {
		subs[i] = l.node(c)
		p.left[subs[i]] = true
	}
	l.keys[key] = subs
	l.adds[key] = append(l.adds[key], p)
	for _, sub := range subs {
		sub.subscribe(key) // under l.mu, so that sub is not retired meanwhile
	}
	l.mu.Unlock()
	select {
	case err = <-p.done:
	case <-ctx.Done():
		err = fmt.Errorf("jobonce: redisstore: subscribe to a key's channel: %w", ctx.Err())
	case <-l.ctx.Done():
		err = errClosed
	}
	if err != nil {
		l.mu.Lock()
		l.adds[key] = slices.DeleteFunc(l.adds[key], func(q *pendingAdd) bool { return q == p })
		if len(l.adds[key]) == 0 {
			delete(l.adds, key)
		}
		l.mu.Unlock()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sendTimeout)
		_ = l.Remove(rctx, key)
		cancel()
	}
	return err
}

// Remove implements driver.Listener.
func (l *listener) Remove(ctx context.Context, key string) error {
	l.mu.Lock()
	subs := l.keys[key]
	delete(l.keys, key)
	l.mu.Unlock()
	var errs []error
	for _, sub := range subs {
		if err := sub.unsubscribe(ctx, key); err != nil {
			errs = append(errs, cancelled(ctx, err))
		}
	}
	return errors.Join(errs...)
}

// closeWait bounds how long Close waits for the Listener's goroutines.
const closeWait = time.Second

// Close implements driver.Listener: it closes the connections and waits
// for their readers to end, for closeWait at most. A reader that is making
// its connection again ends with the Listener's context; one whose client
// does not end its calls with their context (no ContextTimeoutEnabled)
// holds it until go-redis gives up (the client's DialTimeout and
// ReadTimeout): Close then returns an error, and that reader, with the
// goroutine closing its connection, ends on its own by then, without
// notifying.
func (l *listener) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.cancel()
	subs := slices.Collect(maps.Values(l.nodes))
	l.mu.Unlock()
	for _, sub := range subs {
		l.wg.Go(sub.close) // waits for a reader making its connection
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

// node returns the subscription of node, made and given a reader on first
// use. l.mu is held and the Listener is open.
func (l *listener) node(node *redis.Client) *subscription {
	addr := node.Options().Addr
	if sub := l.nodes[addr]; sub != nil {
		return sub
	}
	sub := &subscription{l: l, client: node, addr: addr, sharded: l.s.cluster,
		keys: make(map[string]bool), unsent: make(map[string]int)}
	l.nodes[addr] = sub
	l.wg.Go(sub.read)
	return sub
}

// confirmed notifies key, whose subscription sub confirmed, and answers
// the Adds of key that waited for sub alone.
func (l *listener) confirmed(sub *subscription, key string) {
	l.notify(key)
	l.mu.Lock()
	defer l.mu.Unlock()
	adds := l.adds[key]
	for _, p := range adds {
		delete(p.left, sub)
		if len(p.left) == 0 {
			p.done <- nil
		}
	}
	adds = slices.DeleteFunc(adds, func(p *pendingAdd) bool { return len(p.left) == 0 })
	if len(adds) == 0 {
		delete(l.adds, key)
	} else {
		l.adds[key] = adds
	}
}

// refused answers the Adds of keys, whose subscription sub's node refused
// with err, with an error naming the ACL the signal needs, says so once
// for the Store, and notifies the keys no Add waited for (a subscription
// made again, whose waiters are then deaf and read their keys again).
func (l *listener) refused(sub *subscription, keys []string, err error) {
	l.s.warnRefused(err)
	refusal := fmt.Errorf("jobonce: redisstore: Redis refused to subscribe to the key's channel; the user needs the channels of the Guard's keys (ACL &<KeyPrefix>*, by default &jobonce:*, or allchannels): %w", err)
	var deaf []string
	l.mu.Lock()
	for _, key := range keys {
		if subs := slices.DeleteFunc(l.keys[key], func(s *subscription) bool { return s == sub }); len(subs) > 0 {
			l.keys[key] = subs
		} else {
			delete(l.keys, key)
		}
		adds := l.adds[key]
		if len(adds) == 0 {
			deaf = append(deaf, key)
		}
		for _, p := range adds {
			p.done <- refusal
		}
		delete(l.adds, key)
	}
	l.mu.Unlock()
	for _, key := range deaf {
		l.notify(key)
	}
}

// warnRefused says, once for the Store, that Redis refused a subscription.
func (s *Store) warnRefused(err error) {
	if s.refused.CompareAndSwap(false, true) {
		s.logger.Warn("jobonce: redisstore: Redis refused to subscribe to a key's channel (NOPERM): copies that wait for a running job poll the store "+
			"instead of being woken when it ends; grant the user the channels of the Guard's keys: ACL SETUSER <user> &<KeyPrefix>* "+
			"(by default &jobonce:*), or allchannels", "error", redacted(err, s.client))
	}
}

// move subscribes to key at the primary that holds it now, after sub's
// node ended its subscription as key's slot moved away. It waits, a second
// at most, for the Cluster client to learn the slot's new owner.
func (l *listener) move(sub *subscription, key string) {
	c, ok := l.s.client.(*redis.ClusterClient)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(l.ctx, moveWait)
	defer cancel()
	var owner *redis.Client
	for pause := time.Millisecond; ; pause = min(2*pause, 100*time.Millisecond) {
		c.ReloadState(ctx)
		p, err := c.MasterForKey(ctx, key)
		if err == nil {
			owner = p
			if p.Options().Addr != sub.addr {
				break
			}
		}
		if !sleepCtx(ctx, pause) {
			break
		}
	}
	if owner == nil || l.ctx.Err() != nil {
		return
	}
	l.reassign(sub, key, owner)
}

// moveWait bounds how long a key whose slot moved waits for the Cluster
// client to learn its new owner; it is then subscribed to where the client
// says, and a refusal there (MOVED) makes that connection again.
const moveWait = time.Second

// reassign moves key's subscription from sub to owner's node.
func (l *listener) reassign(sub *subscription, key string, owner *redis.Client) {
	l.mu.Lock()
	if l.closed || !slices.Contains(l.keys[key], sub) {
		l.mu.Unlock()
		return // removed meanwhile
	}
	to := l.node(owner)
	l.keys[key] = slices.DeleteFunc(l.keys[key], func(s *subscription) bool { return s == sub || s == to })
	l.keys[key] = append(l.keys[key], to)
	for _, p := range l.adds[key] {
		if p.left[sub] {
			delete(p.left, sub)
			p.left[to] = true
		}
	}
	to.subscribe(key)
	l.mu.Unlock()
}

// reroute moves the keys of sub, whose connection broke, to the primaries
// that hold them now (a failover or a slot's move), and retires sub when it
// has no key left: its reader then ends. It reports whether it retired sub.
func (l *listener) reroute(sub *subscription) bool {
	if c, ok := l.s.client.(*redis.ClusterClient); ok {
		ctx, cancel := context.WithTimeout(l.ctx, moveWait)
		c.ReloadState(ctx)
		for _, key := range sub.listed() {
			if owner, err := c.MasterForKey(ctx, key); err == nil && owner.Options().Addr != sub.addr {
				sub.drop(key)
				l.reassign(sub, key, owner)
			}
		}
		cancel()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !sub.retire() {
		return false
	}
	if l.nodes[sub.addr] == sub {
		delete(l.nodes, sub.addr)
	}
	return true
}

// sleepCtx waits d, and reports false when ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
