package testenv

import (
	"io"
	"net"
	"sync"
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
}

// StartProxy listens on addr ("127.0.0.1:0" for any free port), retrying for
// a few seconds while the address is still taken, and forwards every
// connection to target.
func StartProxy(t testing.TB, addr, target string) *Proxy {
	t.Helper()
	p := &Proxy{}
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
			p.wg.Go(func() { _, _ = io.Copy(out, in); _ = out.Close() })
			p.wg.Go(func() { _, _ = io.Copy(in, out); _ = in.Close() })
		}
	}
}

// Cut closes the listener and every forwarded connection, as a network
// partition would, and waits for the forwarding goroutines.
func (p *Proxy) Cut() {
	p.once.Do(func() {
		_ = p.ln.Close()
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
