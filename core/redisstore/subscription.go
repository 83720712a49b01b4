package redisstore

import (
	"context"
	"errors"
	"net"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// subscription is a Listener's connection to one node: the keys it is to
// be subscribed to there, and a reader that makes the connection, subscribes
// it to them, and hands what comes to the Listener.
//
// A go-redis PubSub that meets an error makes its connection again within
// the failing call and sends, in one command, every channel it was
// subscribed to: on Cluster, keys of several slots, which Redis refuses
// (CROSSSLOT). So a connection that met any error is never read again: the
// reader makes a new one, subscribes each key itself, one SSUBSCRIBE per
// key on Cluster, and an answer on it belongs to the command it answers
// (sent), which tells a refused key's from another's.
type subscription struct {
	l       *listener
	client  *redis.Client
	addr    string
	sharded bool // SSUBSCRIBE: a Cluster client

	mu     sync.Mutex
	ps     *redis.PubSub   // nil while the connection is made again
	keys   map[string]bool // the keys to be subscribed to on the node
	sent   [][]string      // the keys of each subscribe command not yet answered, oldest first
	unsent map[string]int  // unsubscribe commands not yet answered, by key
}

// Timeouts of a subscription's own calls.
const (
	connectTimeout = 5 * time.Second // making its connection
	sendTimeout    = time.Second     // writing a command on it
)

// pingEvery is how long a reader waits for a message before it pings its
// connection, which finds one that broke silently.
const pingEvery = 30 * time.Second

// subscribe subscribes to key on the node, or leaves it for the reader
// while the connection is made again.
func (sub *subscription) subscribe(key string) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	sub.keys[key] = true
	if sub.ps != nil {
		sub.send(key)
	}
}

// send sends a subscribe command of keys. sub.mu is held and the
// connection made. A command that fails ends the connection: the reader
// makes it again and subscribes to every key.
func (sub *subscription) send(keys ...string) {
	sub.sent = append(sub.sent, keys)
	ctx, cancel := context.WithTimeout(sub.l.ctx, sendTimeout)
	defer cancel()
	var err error
	if sub.sharded {
		err = sub.ps.SSubscribe(ctx, keys...)
	} else {
		err = sub.ps.Subscribe(ctx, keys...)
	}
	if err != nil {
		sub.end()
	}
}

// unsubscribe stops subscribing to key on the node.
func (sub *subscription) unsubscribe(ctx context.Context, key string) error {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if !sub.keys[key] {
		return nil
	}
	delete(sub.keys, key)
	if sub.ps == nil {
		return nil
	}
	sub.unsent[key]++
	var err error
	if sub.sharded {
		err = sub.ps.SUnsubscribe(ctx, key)
	} else {
		err = sub.ps.Unsubscribe(ctx, key)
	}
	if err != nil {
		sub.end()
	}
	return err
}

// end closes the connection, for the reader to make it again. sub.mu is
// held.
func (sub *subscription) end() {
	if sub.ps != nil {
		_ = sub.ps.Close()
		sub.ps = nil
	}
}

// endIf ends ps, if it is still the connection.
func (sub *subscription) endIf(ps *redis.PubSub) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if sub.ps == ps {
		sub.end()
	} else {
		_ = ps.Close()
	}
}

// close ends the connection for good, at Close.
func (sub *subscription) close() {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	sub.end()
}

// listed returns the keys to be subscribed to on the node.
func (sub *subscription) listed() []string {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	keys := make([]string, 0, len(sub.keys))
	for k := range sub.keys {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// drop forgets key, which moved to another node.
func (sub *subscription) drop(key string) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	delete(sub.keys, key)
}

// retire reports whether sub, whose connection is being made again, has no
// key left: the caller then takes it out of the Listener's nodes, holding
// l.mu, under which keys are given to a node.
func (sub *subscription) retire() bool {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	return len(sub.keys) == 0 && sub.ps == nil
}

// connect makes the connection and subscribes to every key, and reports
// whether it could.
func (sub *subscription) connect() bool {
	l := sub.l
	ps := sub.client.Subscribe(l.ctx)
	ctx, cancel := context.WithTimeout(l.ctx, connectTimeout)
	err := ps.Ping(ctx) // makes the connection, subscribed to nothing
	cancel()
	if err != nil {
		_ = ps.Close()
		return false
	}
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if l.ctx.Err() != nil {
		_ = ps.Close()
		return false
	}
	sub.ps, sub.sent = ps, nil
	clear(sub.unsent)
	keys := make([]string, 0, len(sub.keys))
	for k := range sub.keys {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if sub.sharded {
		for _, k := range keys { // keys of different slots: a command each
			if sub.ps == nil {
				break
			}
			sub.send(k)
		}
	} else {
		for chunk := range slices.Chunk(keys, 512) {
			if sub.ps == nil {
				break
			}
			sub.send(chunk...)
		}
	}
	return sub.ps != nil
}

// current returns the connection, or nil while it is made again.
func (sub *subscription) current() *redis.PubSub {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	return sub.ps
}

// read makes the connection and reads it until Close, making it again
// after a pause that grows to a second whenever it meets an error. Each
// message, and each subscription confirmed (again after a new connection)
// is notified.
func (sub *subscription) read() {
	l := sub.l
	var pause time.Duration
	for {
		if l.ctx.Err() != nil {
			return
		}
		ps := sub.current()
		if ps == nil {
			if !sleepCtx(l.ctx, pause) {
				return
			}
			pause = min(max(2*pause, 10*time.Millisecond), time.Second)
			if l.reroute(sub) {
				return
			}
			sub.connect()
			continue
		}
		msg, err := ps.ReceiveTimeout(l.ctx, pingEvery)
		if l.ctx.Err() != nil {
			return
		}
		if err != nil {
			sub.failed(ps, err)
			continue
		}
		switch m := msg.(type) {
		case *redis.Message:
			pause = 0
			l.notify(m.Channel)
		case *redis.Subscription:
			switch m.Kind {
			case "subscribe", "ssubscribe":
				pause = 0
				sub.confirmed(m.Channel)
			case "unsubscribe", "sunsubscribe":
				sub.unsubscribed(m.Channel)
			}
		}
	}
}

// failed handles a failed read of ps: a timeout pings it, a refusal
// (NOPERM) answers the command it refused, and anything else ends the
// connection, for the reader to make it again.
func (sub *subscription) failed(ps *redis.PubSub, err error) {
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		ctx, cancel := context.WithTimeout(sub.l.ctx, sendTimeout)
		defer cancel()
		if ps.Ping(ctx) != nil {
			sub.endIf(ps)
		}
		return
	}
	if redis.HasErrorPrefix(err, "NOPERM") {
		sub.mu.Lock()
		if sub.ps == ps && len(sub.sent) > 0 {
			keys := sub.sent[0]
			sub.sent = sub.sent[1:]
			for _, k := range keys {
				delete(sub.keys, k)
			}
			sub.mu.Unlock()
			sub.l.refused(sub, keys, err)
			return
		}
		sub.mu.Unlock()
	}
	sub.endIf(ps) // MOVED (a slot moved), or an answer to no command of ours
}

// confirmed takes key's confirmation off the commands sent, and tells the
// Listener.
func (sub *subscription) confirmed(key string) {
	sub.mu.Lock()
	for i, keys := range sub.sent {
		if j := slices.Index(keys, key); j >= 0 {
			if keys = slices.Delete(keys, j, j+1); len(keys) == 0 {
				sub.sent = slices.Delete(sub.sent, i, i+1)
			} else {
				sub.sent[i] = keys
			}
			break
		}
	}
	sub.mu.Unlock()
	sub.l.confirmed(sub, key)
}

// unsubscribed handles the end of key's subscription: one Remove asked
// for, or, on Cluster, one the node ended as key's slot moved away, which
// is notified (the key is to be read again) and moved to its new owner.
func (sub *subscription) unsubscribed(key string) {
	sub.mu.Lock()
	if n := sub.unsent[key]; n > 0 {
		if n == 1 {
			delete(sub.unsent, key)
		} else {
			sub.unsent[key] = n - 1
		}
		sub.mu.Unlock()
		return
	}
	moved := sub.sharded && sub.keys[key]
	if moved {
		delete(sub.keys, key)
	}
	sub.mu.Unlock()
	if moved {
		sub.l.notify(key)
		sub.l.wg.Go(func() { sub.l.move(sub, key) })
	}
}
