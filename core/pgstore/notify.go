package pgstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobonce/jobonce/core/driver"
)

// Notifications (driver.Notifier). Await marks a key found running awaited
// (await.sql: an empty result on the running row, so the table needs no
// new column) in the transaction of its claim; the complete or release
// that ends a marked claim calls pg_notify on the store's channel with the
// key, delivered when its transaction commits. A commit that notifies takes
// a lock that serialises such commits; a complete nobody awaited notifies
// nothing, so the ordinary path pays no more than a NULL test. A Listener
// holds one connection of its own (not the pool's: LISTEN needs a session,
// so not PgBouncer's transaction pooling), listening to the channel from
// the start, so a key it is told about is listened to at once.

// channelName returns the store's channel: "jobonce:", the schema that
// holds the table, "." and the table's name, or "jobonce:" and a hash of
// them when that is longer than an identifier may be.
func channelName(schema, table string) string {
	name := schema + "." + table
	if c := "jobonce:" + name; len(c) <= maxIdentifier {
		return c
	}
	sum := sha256.Sum256([]byte(name))
	return "jobonce:" + hex.EncodeToString(sum[:12])
}

// Await implements driver.Notifier: Claim, in one round trip, with a key
// found running marked as awaited. The end of that claim then notifies
// the store's channel. A key that an uncommitted transaction holds past
// the lock wait is reported running, as by Claim.
func (s *Store) Await(ctx context.Context, req driver.ClaimRequest) (driver.ClaimReply, error) {
	if err := checkDuration("ClaimRequest.Lease", req.Lease); err != nil {
		return driver.ClaimReply{}, err
	}
	for attempt := 1; ; attempt++ {
		b := newBatch(true)
		lock := s.lockTimeoutFor(ctx, 2)
		b.Queue(s.sql.await, []byte(req.Key), uuid(req.Token), lock)
		b.Queue(s.sql.claim, s.claimArgs(ctx, &req, 2)...)
		var reply driver.ClaimReply
		var settled bool
		err := s.send(ctx, b, true, func(br pgx.BatchResults) error {
			if _, err := br.Exec(); err != nil {
				return err
			}
			rows, err := br.Query()
			if err != nil {
				return err
			}
			reply, settled, err = scanClaim(rows)
			return err
		})
		switch {
		case lockTimedOut(err):
			return driver.ClaimReply{State: driver.StateRunning, Remaining: s.cfg.RetryAfter}, nil
		case lookAgain(err) && ctx.Err() == nil:
			settled = false // a deadlock: nothing holds
		case err != nil:
			return driver.ClaimReply{}, s.fail(ctx, err)
		}
		if settled {
			return reply, nil
		}
		if attempt == claimAttempts {
			return driver.ClaimReply{State: driver.StateRunning}, nil
		}
	}
}

// Listen implements driver.Notifier. It connects as the pool does, with its
// settings and its BeforeConnect and AfterConnect hooks, and listens to the
// store's channel until Close. A connection that breaks is made again, and
// notify is then called with "": what came meanwhile is lost. It returns an
// error for a nil notify, or when it cannot connect or listen.
func (s *Store) Listen(ctx context.Context, notify func(key string)) (driver.Listener, error) {
	if notify == nil {
		return nil, errors.New("jobonce: pgstore: Listen: notify is nil")
	}
	conn, err := s.listenConn(ctx)
	if err != nil {
		return nil, err
	}
	lctx, cancel := context.WithCancel(context.Background())
	l := &listener{s: s, notify: notify, conn: conn, ctx: lctx, cancel: cancel, keys: make(map[string]struct{})}
	l.wg.Go(l.read)
	return l, nil
}

// listenConn connects as the pool connects, through its BeforeConnect and
// AfterConnect hooks (a password from IAM token authentication, a role),
// and listens to the store's channel.
func (s *Store) listenConn(ctx context.Context) (*pgx.Conn, error) {
	cfg := s.pool.Config() // a copy
	if cfg.BeforeConnect != nil {
		if err := cfg.BeforeConnect(ctx, cfg.ConnConfig); err != nil {
			return nil, fmt.Errorf("jobonce: pgstore: connect to listen: the pool's BeforeConnect: %w", err)
		}
	}
	conn, err := pgx.ConnectConfig(ctx, cfg.ConnConfig)
	if err != nil {
		return nil, fmt.Errorf("jobonce: pgstore: connect to listen: %w", err)
	}
	if cfg.AfterConnect != nil {
		if err := cfg.AfterConnect(ctx, conn); err != nil {
			s.closeConn(conn)
			return nil, fmt.Errorf("jobonce: pgstore: connect to listen: the pool's AfterConnect: %w", err)
		}
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{s.channel}.Sanitize()); err != nil {
		s.closeConn(conn)
		return nil, fmt.Errorf("jobonce: pgstore: LISTEN: %w", s.wrap(err))
	}
	return conn, nil
}

// closeConn closes a connection listenConn made, through the pool's
// BeforeClose hook.
func (s *Store) closeConn(conn *pgx.Conn) {
	if before := s.pool.Config().BeforeClose; before != nil {
		before(conn)
	}
	ctx, cancel := context.WithTimeout(context.Background(), rollbackTimeout)
	defer cancel()
	_ = conn.Close(ctx)
}

// listener is a pgstore driver.Listener. Its connection is used by its
// reader alone, then closed by Close.
type listener struct {
	s      *Store
	notify func(key string)
	conn   *pgx.Conn
	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu   sync.Mutex
	keys map[string]struct{} // the keys listened to: the channel carries every key
}

// listens reports whether key is listened to.
func (l *listener) listens(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.keys[key]
	return ok
}

// read hands each notification's key to notify until Close, connecting
// again when the connection breaks.
func (l *listener) read() {
	defer func() {
		if l.conn != nil { // nil once closed, while connecting again
			l.s.closeConn(l.conn)
		}
	}()
	var pause time.Duration
	for {
		n, err := l.conn.WaitForNotification(l.ctx)
		if l.ctx.Err() != nil {
			return
		}
		if err != nil {
			l.s.closeConn(l.conn)
			l.conn = nil
			for {
				pause = min(max(2*pause, 10*time.Millisecond), time.Second)
				t := time.NewTimer(pause)
				select {
				case <-l.ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
				ctx, cancel := context.WithTimeout(l.ctx, 5*time.Second)
				conn, err := l.s.listenConn(ctx)
				cancel()
				if err == nil {
					l.conn = conn
					break
				}
				if l.ctx.Err() != nil {
					return
				}
			}
			pause = 0
			l.notify("") // notifications sent meanwhile were lost
			continue
		}
		if key, err := hex.DecodeString(n.Payload); err == nil && l.listens(string(key)) {
			l.notify(string(key))
		}
	}
}

// Add implements driver.Listener: the Listener listens to every key from
// the start, so listening to key has begun (notify reports it at once),
// unless its connection is being made again, which then notifies every key.
func (l *listener) Add(_ context.Context, key string) error {
	if l.ctx.Err() != nil {
		return errors.New("jobonce: pgstore: Listener is closed")
	}
	l.mu.Lock()
	l.keys[key] = struct{}{}
	l.mu.Unlock()
	l.notify(key)
	return nil
}

// Remove implements driver.Listener.
func (l *listener) Remove(_ context.Context, key string) error {
	l.mu.Lock()
	delete(l.keys, key)
	l.mu.Unlock()
	return nil
}

// Close implements driver.Listener.
func (l *listener) Close() error {
	l.cancel()
	l.wg.Wait()
	return nil
}
