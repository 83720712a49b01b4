package testenv

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// SlotMigration is one slot of a RedisCluster being moved from one primary
// to another in the steps redis-cli --cluster reshard takes: Begin marks it
// importing on To and migrating on From (From answers ASK for its keys that
// it no longer holds), MoveKeys moves its keys (MIGRATE), Finish gives it
// to To (From answers MOVED).
type SlotMigration struct {
	Slot     int
	From, To *RedisServer

	c            *RedisCluster
	fromID, toID string
}

// BeginSlotMigration starts moving slot from its primary to primary to:
// CLUSTER SETSLOT IMPORTING on to, then MIGRATING on the owner.
func (c *RedisCluster) BeginSlotMigration(t testing.TB, slot int, to *RedisServer) *SlotMigration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m := &SlotMigration{Slot: slot, From: c.SlotOwner(t, slot), To: to, c: c}
	if m.From == to {
		t.Fatalf("redis cluster: slot %d is on %s already", slot, to.Addr)
	}
	var err error
	if m.fromID, err = m.From.client.ClusterMyID(ctx).Result(); err != nil {
		t.Fatalf("CLUSTER MYID on %s: %v", m.From.Addr, err)
	}
	if m.toID, err = to.client.ClusterMyID(ctx).Result(); err != nil {
		t.Fatalf("CLUSTER MYID on %s: %v", to.Addr, err)
	}
	if err := to.client.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", m.fromID).Err(); err != nil {
		t.Fatalf("CLUSTER SETSLOT %d IMPORTING on %s: %v", slot, to.Addr, err)
	}
	if err := m.From.client.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", m.toID).Err(); err != nil {
		t.Fatalf("CLUSTER SETSLOT %d MIGRATING on %s: %v", slot, m.From.Addr, err)
	}
	return m
}

// MoveKeys moves the slot's keys from From to To (CLUSTER GETKEYSINSLOT,
// MIGRATE … KEYS, which keeps their TTLs) until From holds none, and
// returns how many it moved.
func (m *SlotMigration) MoveKeys(t testing.TB) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	moved := 0
	for {
		keys, err := m.From.client.ClusterGetKeysInSlot(ctx, m.Slot, 100).Result()
		if err != nil {
			t.Fatalf("CLUSTER GETKEYSINSLOT %d on %s: %v", m.Slot, m.From.Addr, err)
		}
		if len(keys) == 0 {
			return moved
		}
		args := []any{"MIGRATE", "127.0.0.1", m.To.Port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		if err := m.From.client.Do(ctx, args...).Err(); err != nil {
			t.Fatalf("MIGRATE of slot %d from %s to %s: %v", m.Slot, m.From.Addr, m.To.Addr, err)
		}
		moved += len(keys)
	}
}

// Finish gives the slot to To: CLUSTER SETSLOT NODE on To, then on From,
// then on every other running primary; and waits until every running node
// names To the slot's owner. Replicas learn it by gossip, and until they
// do, one of the old owner's replicas can give the slot back to its
// primary (once its epoch grew, by another move), so the next move of any
// slot waits for this.
func (m *SlotMigration) Finish(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	order := []*RedisServer{m.To, m.From}
	for _, p := range m.c.primaryNodes(t) {
		if p != m.To && p != m.From {
			order = append(order, p)
		}
	}
	for _, p := range order {
		if err := p.client.Do(ctx, "CLUSTER", "SETSLOT", m.Slot, "NODE", m.toID).Err(); err != nil {
			t.Fatalf("CLUSTER SETSLOT %d NODE on %s: %v", m.Slot, p.Addr, err)
		}
	}
	var why string
	if !poll(15*time.Second, func() bool {
		why = ""
		for _, n := range m.c.Nodes {
			if !n.Running() {
				continue
			}
			view, err := clusterView(ctx, n)
			if err != nil {
				why = err.Error()
				return false
			}
			for _, v := range view {
				if v.is("master") && v.owns(m.Slot) && v.addr != m.To.Addr {
					why = fmt.Sprintf("%s names %s the owner", n.Addr, v.addr)
					return false
				}
			}
		}
		return true
	}) {
		t.Fatalf("redis cluster: move of slot %d to %s not agreed after 15s: %s", m.Slot, m.To.Addr, why)
	}
}

// MigrateSlot moves slot to primary to with its keys (Begin, MoveKeys,
// Finish) and returns how many keys it moved.
func (c *RedisCluster) MigrateSlot(t testing.TB, slot int, to *RedisServer) int {
	t.Helper()
	m := c.BeginSlotMigration(t, slot, to)
	n := m.MoveKeys(t)
	m.Finish(t)
	return n
}

// KeySlot returns the slot of key (a key as stored, hash tags apply).
func (c *RedisCluster) KeySlot(t testing.TB, key string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	slot, err := c.live(t).client.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		t.Fatalf("CLUSTER KEYSLOT: %v", err)
	}
	return int(slot)
}

// SlotOwner returns the primary that owns slot, as the first running node
// sees it.
func (c *RedisCluster) SlotOwner(t testing.TB, slot int) *RedisServer {
	t.Helper()
	for _, n := range c.view(t) {
		if n.is("master") && n.owns(slot) {
			if s := c.Node(n.addr); s != nil {
				return s
			}
		}
	}
	t.Fatalf("redis cluster: no primary owns slot %d", slot)
	return nil
}

// Primaries returns the running primaries, as the first running node sees
// them, in the order of Nodes.
func (c *RedisCluster) Primaries(t testing.TB) []*RedisServer {
	t.Helper()
	return c.primaryNodes(t)
}

func (c *RedisCluster) primaryNodes(t testing.TB) []*RedisServer {
	t.Helper()
	masters := make(map[string]bool)
	for _, n := range c.view(t) {
		if n.is("master") && !n.is("fail") {
			masters[n.addr] = true
		}
	}
	var ps []*RedisServer
	for _, s := range c.Nodes {
		if masters[s.Addr] && s.Running() {
			ps = append(ps, s)
		}
	}
	return ps
}

// view returns CLUSTER NODES as the first running primary sees it (a
// primary is told of a slot's move at once, a replica by gossip), or the
// first running node when none is a primary.
func (c *RedisCluster) view(t testing.TB) []clusterNode {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var first []clusterNode
	for _, s := range c.Nodes {
		if !s.Running() {
			continue
		}
		nodes, err := clusterView(ctx, s)
		if err != nil {
			t.Fatalf("CLUSTER NODES on %s: %v", s.Addr, err)
		}
		for _, n := range nodes {
			if n.is("myself") && n.is("master") {
				return nodes
			}
		}
		if first == nil {
			first = nodes
		}
	}
	if first == nil {
		t.Fatal("redis cluster: no node is running")
	}
	return first
}

// live returns the first running node.
func (c *RedisCluster) live(t testing.TB) *RedisServer {
	t.Helper()
	for _, n := range c.Nodes {
		if n.Running() {
			return n
		}
	}
	t.Fatal("redis cluster: no node is running")
	return nil
}

// ReplicasOf returns the running replicas of primary, as the first running
// primary sees them.
func (c *RedisCluster) ReplicasOf(t testing.TB, primary *RedisServer) []*RedisServer {
	t.Helper()
	nodes := c.view(t)
	var id string
	for _, n := range nodes {
		if n.addr == primary.Addr {
			id = n.id
		}
	}
	var rs []*RedisServer
	for _, n := range nodes {
		if n.is("slave") && n.master == id {
			if s := c.Node(n.addr); s != nil && s.Running() {
				rs = append(rs, s)
			}
		}
	}
	return rs
}
