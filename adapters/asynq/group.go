package asynqonce

import (
	"context"
	"sync"
	"time"
)

// group merges calls made at the same time into one batch call (group
// commit). Calls that arrive while a batch is in flight queue up, and when it
// returns the first of them sends the whole queue. A call that finds no batch
// in flight sends its own at once, unless the previous call came less than
// linger ago: it then waits up to linger for a second call and goes as soon
// as one comes. A wait that ends alone (calls come one after another, not
// side by side) stops the waits until a call finds another in flight. No
// goroutine is started: the caller that sends a batch is one of its members.
type group[I, O any] struct {
	send    func(ctx context.Context, in []I) []O
	timeout time.Duration // bounds a batch sent on behalf of others
	linger  time.Duration // how long a lone caller waits for a companion; 0: never

	mu      sync.Mutex
	busy    bool        // a batch is in flight
	waiting *call[I, O] // a lone caller lingering for a companion
	last    time.Time   // when the last call arrived
	alone   bool        // the last linger found no companion: do not linger until calls overlap
	queue   []*call[I, O]
	pool    sync.Pool // of *call[I, O]

	// Owned by the caller sending a batch (one at a time): buffers reused
	// from batch to batch.
	spare []*call[I, O]
	in    []I
}

type call[I, O any] struct {
	in   I
	out  O
	ok   bool      // out was set by a batch
	tell chan bool // true: send the queue; false: out is ready
}

func (g *group[I, O]) newCall(in I) *call[I, O] {
	if c, ok := g.pool.Get().(*call[I, O]); ok {
		c.in = in
		return c
	}
	return &call[I, O]{in: in, tell: make(chan bool, 1)}
}

// do runs in as part of a batch and returns its output. ok is false when the
// batch that held it panicked; the caller then sends it on its own.
func (g *group[I, O]) do(ctx context.Context, in I) (out O, ok bool) {
	c := g.newCall(in)
	var now time.Time
	if g.linger > 0 {
		now = time.Now()
	}
	g.mu.Lock()
	g.queue = append(g.queue, c)
	lead := !g.busy
	g.busy = true
	if !lead {
		g.alone = false
	}
	linger := lead && g.linger > 0 && !g.alone && now.Sub(g.last) < g.linger
	if g.linger > 0 {
		g.last = now
	}
	if linger {
		g.waiting = c
	} else if w := g.waiting; w != nil {
		g.waiting = nil
		w.tell <- true
	}
	g.mu.Unlock()
	if linger {
		t := time.NewTimer(g.linger)
		select {
		case <-c.tell:
			t.Stop()
		case <-t.C:
			g.mu.Lock()
			if g.waiting == c {
				g.waiting = nil
				g.alone = true
			} else {
				<-c.tell // a companion is telling us
			}
			g.mu.Unlock()
		}
	} else if !lead {
		lead = <-c.tell
	}
	if lead {
		g.flush(ctx)
	}
	out, ok = c.out, c.ok
	var zeroI I
	var zeroO O
	c.in, c.out, c.ok = zeroI, zeroO, false
	g.pool.Put(c)
	return out, ok
}

// flush sends the queue as one batch, tells its members, and hands the next
// batch to the first caller queued meanwhile.
func (g *group[I, O]) flush(ctx context.Context) {
	g.mu.Lock()
	batch := g.queue
	g.queue = g.spare[:0]
	g.mu.Unlock()

	defer func() {
		// Runs on panic too: members not served send on their own.
		for _, c := range batch[1:] {
			c.tell <- false
		}
		clear(batch)
		var zero I
		for i := range g.in {
			g.in[i] = zero
		}
		g.mu.Lock()
		g.spare = batch[:0]
		if len(g.queue) > 0 {
			next := g.queue[0]
			g.mu.Unlock()
			next.tell <- true
			return
		}
		g.busy = false
		g.mu.Unlock()
	}()

	in := g.in[:0]
	for _, c := range batch {
		in = append(in, c.in)
	}
	g.in = in
	if len(batch) > 1 {
		// One member's cancellation must not fail the others.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), g.timeout)
		defer cancel()
	}
	out := g.send(ctx, in)
	for i, c := range batch {
		c.out, c.ok = out[i], true
	}
}
