package redisstore_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/redisstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// migrationSlots is how many slots the keys of the slot migration drill's
// jobs fall in.
const migrationSlots = 8

// migrationStoreTimeout is the drill's Config.StoreTimeout: how long a
// marker that meets a migration is retried.
const migrationStoreTimeout = 2 * time.Second

// TestClusterSlotMigrationDrill: a Cluster of three primaries with a
// replica each and WaitReplicas 1; from a third of the way in, every slot
// that holds jobs' keys (a few dozen each) is resharded as redis-cli
// --cluster reshard does (importing, migrating, its keys moved, assigned)
// to the next primary, and back the round after, round after round, while
// the jobs run, until every job's two deliveries were acknowledged and
// every slot went there and back at least once. While slots move, every
// tenth job runs until its slot's keys (its claim among them) have moved to
// the importing primary, and the slot stays migrating until the job is
// answered, so its marker meets ASK; every thirtieth runs for a whole
// round, its claim moved with its slot; every other job's claim, marker or
// redelivery meets ASK or MOVED as it happens to.
func TestClusterSlotMigrationDrill(t *testing.T) {
	testenv.Short(t)
	start := time.Now()
	cluster := testenv.StartRedisCluster(t, 3, 1)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(),
		DialTimeout: 500 * time.Millisecond, ReadTimeout: time.Second, WriteTimeout: time.Second})
	t.Cleanup(func() { _ = client.Close() })
	require.Eventually(t, func() bool { return client.Ping(context.Background()).Err() == nil },
		10*time.Second, 50*time.Millisecond)
	store, err := redisstore.New(client, &redisstore.Config{Logger: quiet, SkipEvictionCheck: true,
		WaitReplicas: 1, WaitTimeout: 500 * time.Millisecond})
	require.NoError(t, err)
	// A marker that meets ASK is retried for migrationStoreTimeout; its
	// claim, unrenewed, lapses 2s later, and a redelivery runs the job.
	// Plain keys keep the jobs' hash tags.
	g, err := core.New(store, &core.Config{Logger: quiet, KeyPrefix: testenv.Prefix(t), PlainKeys: true,
		Lease: 2 * time.Second, StoreTimeout: migrationStoreTimeout})
	require.NoError(t, err)
	setup := time.Since(start)

	// The jobs' keys share migrationSlots slots (hash tags), a few dozen
	// keys to a slot.
	jobKey := func(k int) string { return fmt.Sprintf("{drill-%d}job-%d", k%migrationSlots, k) }
	var slots []int
	slotOf := make([]int, drillJobs)
	for k := range drillJobs {
		key, err := g.StoredKey(jobKey(k))
		require.NoError(t, err)
		slotOf[k] = cluster.KeySlot(t, key)
		if !slices.Contains(slots, slotOf[k]) {
			slots = append(slots, slotOf[k])
		}
	}
	primaries := cluster.Primaries(t)
	require.Len(t, primaries, 3)
	home := make(map[int]*testenv.RedisServer, len(slots))
	for _, slot := range slots {
		home[slot] = cluster.SlotOwner(t, slot)
	}

	p := newMigrationProgress()
	d := &drill{g: g, key: jobKey, block: func(k int) {
		switch {
		case k%30 == 0:
			p.waitRound()
		case k%10 == 0:
			p.waitKeysMoved(k, slotOf[k])
		}
	}}
	var rounds, moves, keys, met int
	c := d.run(t, func() {
		p.begin()
		defer p.end()
		// Two rounds at least, then on while jobs are left, for a while.
		deadline := time.Now().Add(drillWithin / 4)
		for rounds < 2 || d.finished.Load() < drillJobs && time.Now().Before(deadline) {
			for _, slot := range slots {
				to := home[slot] // back, on odd rounds
				if rounds%2 == 0 {
					to = primaries[(slices.Index(primaries, to)+1)%len(primaries)]
				}
				m := cluster.BeginSlotMigration(t, slot, to)
				keys += m.MoveKeys(t)
				// The jobs of the slot that were waiting for this finish
				// now, their claims on the importing primary: their markers
				// meet ASK. The slot stays migrating until they are
				// answered (within the markers' StoreTimeout).
				released := p.keysMoved(slot)
				met += len(released)
				before := make([]int32, len(released))
				for i, k := range released {
					before[i] = d.acked[k].Load()
				}
				answered := func() bool {
					for i, k := range released {
						if d.acked[k].Load() == before[i] {
							return false
						}
					}
					return true
				}
				for end := time.Now().Add(migrationStoreTimeout + 2*time.Second); !answered() && time.Now().Before(end); {
					time.Sleep(time.Millisecond)
				}
				m.Finish(t)
				moves++
			}
			rounds++
			p.roundOver()
		}
		cluster.WaitHealthy(t, 30*time.Second)
	})
	testenv.Report(t, "cluster slot migration drill, WaitReplicas=1: %d jobs, %d duplicate effects, %d missing, %d unhandled; %d slot moves (%d slots, %d rounds, %d keys moved, %d jobs finished while their slot migrated), %d jobs finished when they began; outcomes %s",
		c.jobs, c.dups, c.missing, c.unhandled, moves, len(slots), rounds, keys, met, c.atKill, c.outcomeList())
	t.Logf("cluster slot migration drill: %s in all, %s of it to start the cluster", time.Since(start).Round(time.Millisecond), setup.Round(time.Millisecond))
	require.Zero(t, c.missing, "jobs never run")
	require.Zero(t, c.unhandled, "jobs with a delivery not acknowledged by the deadline")
	require.Zero(t, c.dups, "duplicate effects")
	require.Positive(t, keys, "the moves carried claims and markers")
}

// migrationProgress tells running jobs of a drill's slot moves.
type migrationProgress struct {
	mu      sync.Mutex
	moving  bool
	waiting map[int][]int         // slot → jobs waiting until its keys moved
	moved   map[int]chan struct{} // slot → closed once its keys moved
	round   chan struct{}         // closed at the end of the round
}

func newMigrationProgress() *migrationProgress {
	return &migrationProgress{waiting: make(map[int][]int), moved: make(map[int]chan struct{}), round: make(chan struct{})}
}

func (p *migrationProgress) begin() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.moving = true
}

// keysMoved says the keys of slot moved to the importing primary, and
// returns the jobs it lets go on.
func (p *migrationProgress) keysMoved(slot int) []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	released := p.waiting[slot]
	delete(p.waiting, slot)
	if ch, ok := p.moved[slot]; ok {
		close(ch)
		delete(p.moved, slot)
	}
	return released
}

func (p *migrationProgress) roundOver() {
	p.mu.Lock()
	defer p.mu.Unlock()
	close(p.round)
	p.round = make(chan struct{})
}

// end lets every waiting job go on, and the jobs after run at once.
func (p *migrationProgress) end() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.moving = false
	for _, ch := range p.moved {
		close(ch)
	}
	clear(p.moved)
	close(p.round)
}

// waitKeysMoved waits, while slots move, until the keys of slot (job k's)
// have moved to the importing primary.
func (p *migrationProgress) waitKeysMoved(k, slot int) {
	p.mu.Lock()
	if !p.moving {
		p.mu.Unlock()
		return
	}
	ch, ok := p.moved[slot]
	if !ok {
		ch = make(chan struct{})
		p.moved[slot] = ch
	}
	p.waiting[slot] = append(p.waiting[slot], k)
	p.mu.Unlock()
	wait(ch)
}

// waitRound waits, while slots move, until the round is over.
func (p *migrationProgress) waitRound() {
	p.mu.Lock()
	if !p.moving {
		p.mu.Unlock()
		return
	}
	ch := p.round
	p.mu.Unlock()
	wait(ch)
}

func wait(ch chan struct{}) {
	select {
	case <-ch:
	case <-time.After(drillWithin):
		panic(fmt.Sprintf("no slot moved within %s", drillWithin))
	}
}
