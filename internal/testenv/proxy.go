package testenv

import (
	"bytes"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy forwards TCP connections from a loopback address to a server until
// Cut or the end of the test: a store that goes away (Cut) or comes back
// (StartProxy on the address a client was failing to reach).
type Proxy struct {
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn
	cut   bool // Cut ran: connections accepted since are closed at once
	once  sync.Once
	drop  atomic.Pointer[[]byte]  // DropReplyOnce's match, until it is used
	lost  atomic.Bool             // the reply DropReplyOnce asked for was lost
	quiet atomic.Pointer[silence] // LoseRequestOnce's or HoldReplyOnce's match, until it is used
	hush  atomic.Bool             // a connection was silenced
	stop  chan struct{}           // closed by Cut: silenced connections end
}

// silence is a request that silences its connection: delivered or not.
type silence struct {
	match     []byte
	delivered bool
}

// StartProxy listens on addr ("127.0.0.1:0" for any free port), retrying for
// a few seconds while the address is still taken, and forwards every
// connection to target.
func StartProxy(t testing.TB, addr, target string) *Proxy {
	t.Helper()
	p := &Proxy{stop: make(chan struct{})}
	deadline := time.Now().Add(5 * time.Second)
	for {
		var err error
		if p.ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("proxy: listen on %s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond) // the port is still in use: poll until free
	}
	p.wg.Go(p.serve(target))
	t.Cleanup(p.Cut)
	return p
}

// Addr returns the address the proxy listens on.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) serve(target string) func() {
	return func() {
		for {
			in, err := p.ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				_ = in.Close()
				continue
			}
			p.mu.Lock()
			if p.cut {
				p.mu.Unlock()
				_, _ = in.Close(), out.Close()
				return
			}
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			var dropping, silent atomic.Bool // this connection's next reply is lost; nothing more passes
			p.wg.Go(func() {
				_, _ = io.Copy(out, &requests{r: in, p: p, dropping: &dropping, silent: &silent})
				_ = out.Close()
			})
			p.wg.Go(func() {
				_, _ = io.Copy(in, &replies{r: out, p: p, dropping: &dropping, silent: &silent})
				_ = in.Close()
			})
		}
	}
}

// DropReplyOnce makes the proxy lose the reply to the first request that
// contains match, from now on: the request reaches the server, which
// answers it, but the client's connection is closed instead of the answer
// arriving, as when a network fails after a write. A client that sends its
// request again (go-redis does, after a connection error) reaches the
// server again on a new connection.
func (p *Proxy) DropReplyOnce(match []byte) { p.drop.Store(&match) }

// ReplyDropped reports whether the reply DropReplyOnce asked for was lost.
func (p *Proxy) ReplyDropped() bool { return p.lost.Load() }

// LoseRequestOnce makes the proxy lose the first request that contains
// match, from now on, and silence its connection, as when a network
// partitions while the request is on its way: the request never reaches the
// server, nothing more passes either way, and neither end is closed (the
// server's stays open until Cut, even after the client gives up).
func (p *Proxy) LoseRequestOnce(match []byte) { p.quiet.Store(&silence{match: match}) }

// HoldReplyOnce makes the proxy hold back the reply to the first request
// that contains match, from now on, as when a network partitions right
// after a write: the request reaches the server, which answers it, but
// nothing more passes either way on that connection, and neither end is
// closed until Cut.
func (p *Proxy) HoldReplyOnce(match []byte) {
	p.quiet.Store(&silence{match: match, delivered: true})
}

// Silenced reports whether LoseRequestOnce or HoldReplyOnce has silenced a
// connection.
func (p *Proxy) Silenced() bool { return p.hush.Load() }

// requests reads a client's requests, arming its connection's dropping when
// one matches DropReplyOnce, and silencing it when one matches
// LoseRequestOnce or HoldReplyOnce.
type requests struct {
	r        io.Reader
	p        *Proxy
	dropping *atomic.Bool
	silent   *atomic.Bool
}

func (q *requests) Read(b []byte) (int, error) {
	if q.silent.Load() {
		return q.p.silence()
	}
	n, err := q.r.Read(b)
	if m := q.p.drop.Load(); m != nil && n > 0 && bytes.Contains(b[:n], *m) && q.p.drop.CompareAndSwap(m, nil) {
		q.dropping.Store(true) // before the request goes on: its reply comes after
	}
	if s := q.p.quiet.Load(); s != nil && n > 0 && bytes.Contains(b[:n], s.match) && q.p.quiet.CompareAndSwap(s, nil) {
		q.silent.Store(true) // before the request goes on: its reply comes after
		q.p.hush.Store(true)
		if !s.delivered {
			return q.p.silence()
		}
	}
	return n, err
}

// silence passes nothing until Cut, then ends the connection's copy.
func (p *Proxy) silence() (int, error) {
	<-p.stop
	return 0, io.EOF
}

// replies reads a server's replies; once dropping is armed, the next one
// is lost and the connection ends.
type replies struct {
	r        io.Reader
	p        *Proxy
	dropping *atomic.Bool
	silent   *atomic.Bool
}

func (a *replies) Read(b []byte) (int, error) {
	n, err := a.r.Read(b)
	if a.silent.Load() {
		return a.p.silence()
	}
	if n > 0 && a.dropping.Load() {
		a.p.lost.Store(true)
		return 0, io.ErrUnexpectedEOF
	}
	return n, err
}

// Cut closes the listener and every forwarded connection, as a network
// partition would, and waits for the forwarding goroutines.
func (p *Proxy) Cut() {
	p.once.Do(func() {
		_ = p.ln.Close()
		close(p.stop)
		p.mu.Lock()
		p.cut = true
		for _, c := range p.conns {
			_ = c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
}

// ClosedAddr returns a loopback address that nothing listens on, for a
// client of a store that is down; StartProxy on it brings the store up.
func ClosedAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	return addr
}

// SilentAddr returns a loopback address that accepts connections and never
// answers, until the end of the test.
func SilentAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	var (
		conns []net.Conn // read after wg.Wait only
		wg    sync.WaitGroup
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

// Flaky is a proxy on one address that a test cuts and brings back as often
// as it likes.
type Flaky struct {
	t            testing.TB
	addr, target string
	mu           sync.Mutex
	p            *Proxy // nil while cut
}

// StartFlaky starts a proxy to target on a free loopback port.
func StartFlaky(t testing.TB, target string) *Flaky {
	p := StartProxy(t, "127.0.0.1:0", target)
	return &Flaky{t: t, addr: p.Addr(), target: target, p: p}
}

// Addr returns the address the proxy listens on, cut or not.
func (f *Flaky) Addr() string { return f.addr }

// Cut closes the listener and every forwarded connection.
func (f *Flaky) Cut() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.p != nil {
		f.p.Cut()
		f.p = nil
	}
}

// Restore listens again on the same address.
func (f *Flaky) Restore() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.p == nil {
		f.p = StartProxy(f.t, f.addr, f.target)
	}
}
