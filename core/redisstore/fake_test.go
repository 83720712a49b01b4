package redisstore_test

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// fakeRedis speaks just enough RESP for a go-redis client to connect, and
// answers each script call (EVALSHA or EVAL) with what answer returns for
// the n-th one on its connection: a raw RESP reply, "" to stay silent, or
// "close" to close the connection.
type fakeRedis struct {
	ln     net.Listener
	answer func(n int) string
	auth   string // the reply to AUTH; "" for +OK
	// refuseInfo makes INFO answer an error (else a primary's role);
	// infos counts the INFO requests.
	refuseInfo atomic.Bool
	infos      atomic.Int64
	wg         sync.WaitGroup
	mu         sync.Mutex
	conns      []net.Conn
}

func startFakeRedis(t *testing.T, answer func(n int) string) *fakeRedis {
	t.Helper()
	return startFake(t, &fakeRedis{answer: answer})
}

// startFake starts f, whose answer and auth are set.
func startFake(t *testing.T, f *fakeRedis) *fakeRedis {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.ln = ln
	f.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.mu.Lock()
			f.conns = append(f.conns, c)
			f.mu.Unlock()
			f.wg.Go(func() { f.serve(c) })
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		f.mu.Lock()
		for _, c := range f.conns {
			_ = c.Close()
		}
		f.mu.Unlock()
		f.wg.Wait()
	})
	return f
}

func (f *fakeRedis) Addr() string { return f.ln.Addr().String() }

func (f *fakeRedis) serve(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	scripts := 0
	for {
		args, err := readCommand(r)
		if err != nil {
			return
		}
		var reply string
		switch strings.ToUpper(args[0]) {
		case "EVALSHA", "EVAL":
			reply = f.answer(scripts)
			scripts++
		case "HELLO":
			reply = "-ERR unknown command 'HELLO'\r\n"
		case "AUTH":
			reply = cmp.Or(f.auth, "+OK\r\n")
		case "CONFIG":
			reply = "-ERR unknown command 'CONFIG'\r\n" // as managed services answer
		case "INFO":
			f.infos.Add(1)
			reply = "$11\r\nrole:master\r\n"
			if f.refuseInfo.Load() {
				reply = "-ERR INFO refused\r\n"
			}
		default:
			reply = "+OK\r\n"
		}
		switch reply {
		case "":
		case "close":
			return
		default:
			if _, err := io.WriteString(c, reply); err != nil {
				return
			}
		}
	}
}

// readCommand reads one RESP array of bulk strings.
func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(line, "*") {
		return nil, fmt.Errorf("not an array: %q", line)
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil {
		return nil, err
	}
	args := make([]string, n)
	for i := range args {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		size, err := strconv.Atoi(strings.TrimSpace(line[1:]))
		if err != nil {
			return nil, err
		}
		b := make([]byte, size+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		args[i] = string(b[:size])
	}
	return args, nil
}
