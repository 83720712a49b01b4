package redisstore_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/redisstore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// Failover drills: real redis-server processes (a primary, a replica and a
// Sentinel; a Cluster with replicas) on loopback, a Guard running jobs each
// delivered twice at the same moment, and the primary SIGKILLed a third of
// the way in. Each drill counts the jobs whose effect happened more than
// once and the jobs that never ran, with WaitReplicas 0 and 1.

const (
	drillJobs    = 300
	drillWorkers = 16               // goroutines taking deliveries; the two of a job go to two of them
	drillWithin  = 40 * time.Second // every delivery is handled by then
)

// drillGuard returns a Guard on client whose store waits for w replicas.
func drillGuard(t *testing.T, client redis.UniversalClient, w int) *core.Guard {
	t.Helper()
	store, err := redisstore.New(client, &redisstore.Config{Logger: quiet, SkipEvictionCheck: true,
		WaitReplicas: w, WaitTimeout: 500 * time.Millisecond})
	require.NoError(t, err)
	g, err := core.New(store, &core.Config{Logger: quiet, KeyPrefix: testenv.Prefix(t),
		// The lease and a done marker's StoreTimeout outlast a failover
		// (Sentinel: about 2s here), so a claim held across it is still
		// held on the promoted replica, and a marker written during it is
		// retried until the new primary takes it.
		Lease: 6 * time.Second, StoreTimeout: 4 * time.Second})
	require.NoError(t, err)
	return g
}

// drill is one run of drillJobs jobs through a Guard.
type drill struct {
	g *core.Guard
	// block, when set, runs inside the job function after its effect.
	block func(k int)
	// key, when set, names job k's key; otherwise it is "job-k".
	key func(k int) string

	effects  [drillJobs]atomic.Int32 // runs of each job's function: the effect
	excused  [drillJobs]atomic.Bool  // a run of the job was reported LeaseLost or Unrecorded
	acked    [drillJobs]atomic.Int32 // deliveries of the job acknowledged (nil error)
	finished atomic.Int32            // jobs whose two deliveries were acknowledged
	third    chan struct{}           // closed once a third of the jobs finished
	once     sync.Once

	mu       sync.Mutex
	outcomes map[core.Outcome]int
	odd      []string // outcomes that a job whose function never fails should not get

	atKill, atRecovery int
}

// drillCounts is what a drill found.
type drillCounts struct {
	jobs, dups, excused, missing, unhandled int
	atKill, atRecovery                      int // jobs finished when the failover began and when it was over
	outcomes                                map[core.Outcome]int
}

func (c drillCounts) String() string {
	return fmt.Sprintf("%d jobs, %d duplicate effects (%d after a LeaseLost/Unrecorded run, %d after Ran), %d missing, %d unhandled; %d finished at the kill, %d when the old primary was a replica again; outcomes %s",
		c.jobs, c.dups, c.excused, c.dups-c.excused, c.missing, c.unhandled, c.atKill, c.atRecovery, c.outcomeList())
}

// outcomeList is the outcomes of every Do, "Ran=300 Duplicate=600".
func (c drillCounts) outcomeList() string {
	var outs []string
	for o := core.Ran; o <= core.Canceled; o++ {
		if n := c.outcomes[o]; n > 0 {
			outs = append(outs, fmt.Sprintf("%s=%d", o, n))
		}
	}
	return strings.Join(outs, " ")
}

// run delivers every job twice, to two workers at once, each retrying
// Running and Unavailable with a short backoff until its delivery is
// acknowledged; once a third of the jobs finished it calls failover on the
// test goroutine, then waits for the deliveries and counts.
func (d *drill) run(t *testing.T, failover func()) drillCounts {
	t.Helper()
	d.third = make(chan struct{})
	d.outcomes = make(map[core.Outcome]int)
	ctx, cancel := context.WithTimeout(context.Background(), drillWithin)
	defer cancel()

	deliveries := make(chan int)
	var wg sync.WaitGroup
	for range drillWorkers {
		wg.Go(func() {
			for k := range deliveries {
				d.deliver(ctx, k)
			}
		})
	}
	recovered := make(chan struct{})
	wg.Go(func() {
		defer close(deliveries)
		for k := range drillJobs {
			for range 2 {
				select {
				case deliveries <- k:
				case <-ctx.Done():
					return
				}
			}
		}
		// Once the failover is over, every job is delivered once more, as
		// a queue redelivers (a producer's retry, a visibility timeout): a
		// done marker the failover lost lets this copy run again.
		select {
		case <-recovered:
		case <-ctx.Done():
			return
		}
		for k := range drillJobs {
			select {
			case deliveries <- k:
			case <-ctx.Done():
				return
			}
		}
	})
	select {
	case <-d.third:
	case <-ctx.Done():
		t.Fatalf("a third of the jobs did not finish within %s", drillWithin)
	}
	d.atKill = int(d.finished.Load())
	failover()
	d.atRecovery = int(d.finished.Load())
	close(recovered)
	wg.Wait()

	c := drillCounts{jobs: drillJobs, outcomes: d.outcomes, atKill: d.atKill, atRecovery: d.atRecovery}
	for k := range drillJobs {
		switch n := d.effects[k].Load(); {
		case n == 0:
			c.missing++
		case n > 1:
			c.dups++
			if d.excused[k].Load() {
				c.excused++
			}
		}
		if d.acked[k].Load() < 3 {
			c.unhandled++
		}
	}
	for _, s := range d.odd {
		t.Error(s)
	}
	return c
}

// deliver is one delivery of job k: Do until acknowledged or ctx ends.
func (d *drill) deliver(ctx context.Context, k int) {
	key := "job-" + strconv.Itoa(k)
	if d.key != nil {
		key = d.key(k)
	}
	fn := func(context.Context) error {
		d.effects[k].Add(1)
		if d.block != nil {
			d.block(k)
		}
		return nil
	}
	backoff := 5 * time.Millisecond
	for {
		out, err := d.g.Do(ctx, key, fn)
		d.mu.Lock()
		d.outcomes[out]++
		d.mu.Unlock()
		switch out {
		case core.Ran, core.Duplicate, core.LeaseLost, core.Unrecorded:
			if out == core.LeaseLost || out == core.Unrecorded {
				d.excused[k].Store(true)
			}
			if d.acked[k].Add(1) == 2 && d.finished.Add(1) >= drillJobs/3 {
				d.once.Do(func() { close(d.third) })
			}
			return
		case core.Running, core.Unavailable:
		case core.Canceled:
			if ctx.Err() != nil {
				return // the drill's deadline: counted unhandled
			}
		default:
			d.mu.Lock()
			d.odd = append(d.odd, fmt.Sprintf("job %d: outcome %s: %v", k, out, err))
			d.mu.Unlock()
			return
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return
		}
		backoff = min(2*backoff, 100*time.Millisecond)
	}
}

// TestSentinelFailoverDrill: a primary, one replica and a Sentinel; a third
// of the way in, the replica's link is cut while a tenth of the jobs run
// on, then the primary is SIGKILLed; the Sentinel promotes the replica,
// without the writes it missed, and the killed process is started again
// (empty) on its port,
// where the Sentinel makes it a replica of the new primary, so that
// WaitReplicas=1 can be met again.
func TestSentinelFailoverDrill(t *testing.T) {
	testenv.Short(t)
	for _, w := range []int{0, 1} {
		t.Run(fmt.Sprintf("WaitReplicas=%d", w), func(t *testing.T) {
			start := time.Now()
			// The replica reaches its primary through a proxy, so the
			// drill can cut replication off while the primary takes writes.
			primary := testenv.StartRedisServer(t)
			link := testenv.StartFlaky(t, primary.Addr)
			_, linkPort, err := net.SplitHostPort(link.Addr())
			require.NoError(t, err)
			replica := testenv.StartRedisServer(t, "--replicaof", "127.0.0.1", linkPort)
			replica.WaitReplicaOf(t, link.Addr(), 10*time.Second)
			sentinel := testenv.StartRedisSentinel(t, primary, 1)
			client := redis.NewFailoverClient(&redis.FailoverOptions{
				MasterName: sentinel.MasterName, SentinelAddrs: []string{sentinel.Addr},
				DialTimeout: 500 * time.Millisecond, ReadTimeout: time.Second, WriteTimeout: time.Second,
			})
			t.Cleanup(func() { _ = client.Close() })
			d := &drill{g: drillGuard(t, client, w)}
			setup := time.Since(start)
			var failedOver, rejoined time.Duration
			c := d.run(t, func() {
				// Replication is asynchronous: the replica falls behind (its
				// link cut) for a while before the primary dies, so the
				// writes of that while never reach it, as in a failover
				// under load.
				link.Cut()
				waitFinished(d, drillJobs/3+drillJobs/10, time.Second) // a Sentinel promotes no replica whose link was down for long
				kill := time.Now()
				primary.Kill()
				promoted := sentinel.WaitFailover(t, primary.Addr, 20*time.Second)
				failedOver = time.Since(kill)
				primary.Restart()
				// The Sentinel turns the restarted process into a replica of
				// the new primary once it has reported role master for 8s.
				primary.WaitReplicaOf(t, promoted, 30*time.Second)
				rejoined = time.Since(kill)
			})
			testenv.Report(t, "sentinel drill, WaitReplicas=%d: %s", w, c)
			t.Logf("sentinel drill, WaitReplicas=%d: promoted %s after the kill, old primary a linked replica after %s; %s in all, %s of it to start the servers",
				w, failedOver.Round(time.Millisecond), rejoined.Round(time.Millisecond), time.Since(start).Round(time.Millisecond), setup.Round(time.Millisecond))
			require.Zero(t, c.missing, "jobs never run")
			require.Zero(t, c.unhandled, "jobs with a delivery not acknowledged by the deadline")
			if w > 0 {
				// Every claim and marker a caller relied on was acknowledged by
				// a replica, so the promoted replica has it; a marker that met
				// the failover was retried until the new primary took it.
				require.Zero(t, c.dups, "duplicate effects")
			}
		})
	}
}

// TestClusterFailoverDrill: a Cluster of three primaries with a replica
// each; job 0's function blocks, holding its claim, until the primary
// owning that claim has been SIGKILLed (a third of the way in) and its
// replica forced to take over; the killed node is then started again and
// rejoins as a replica of its successor.
func TestClusterFailoverDrill(t *testing.T) {
	testenv.Short(t)
	for _, w := range []int{0, 1} {
		t.Run(fmt.Sprintf("WaitReplicas=%d", w), func(t *testing.T) {
			start := time.Now()
			cluster := testenv.StartRedisCluster(t, 3, 1)
			client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(),
				DialTimeout: 500 * time.Millisecond, ReadTimeout: time.Second, WriteTimeout: time.Second})
			t.Cleanup(func() { _ = client.Close() })
			require.Eventually(t, func() bool { return client.Ping(context.Background()).Err() == nil },
				10*time.Second, 50*time.Millisecond)
			g := drillGuard(t, client, w)
			setup := time.Since(start)
			blockedKey, err := g.StoredKey("job-0")
			require.NoError(t, err)
			running, release := make(chan struct{}), make(chan struct{})
			var blockOnce sync.Once
			d := &drill{g: g, block: func(k int) {
				if k != 0 {
					return
				}
				first := false
				blockOnce.Do(func() { first = true; close(running) })
				if first {
					select {
					case <-release:
					case <-t.Context().Done(): // the test failed before the release
					}
				}
			}}
			var failedOver, rejoined time.Duration
			c := d.run(t, func() {
				select {
				case <-running:
				case <-time.After(10 * time.Second):
					t.Fatal("job 0 is not running")
				}
				kill := time.Now()
				old, promoted := cluster.Failover(t, blockedKey, true)
				failedOver = time.Since(kill)
				// go-redis reloads the slot map on MOVED or every 10s; a
				// dead node gives neither, so reload now.
				client.ReloadState(context.Background())
				close(release)
				old.Restart()
				old.WaitReplicaOf(t, promoted.Addr, 30*time.Second)
				cluster.WaitHealthy(t, 30*time.Second)
				rejoined = time.Since(kill)
			})
			testenv.Report(t, "cluster drill, WaitReplicas=%d: %s", w, c)
			t.Logf("cluster drill, WaitReplicas=%d: replica promoted %s after the kill, old primary a linked replica after %s; %s in all, %s of it to start the cluster",
				w, failedOver.Round(time.Millisecond), rejoined.Round(time.Millisecond), time.Since(start).Round(time.Millisecond), setup.Round(time.Millisecond))
			t.Logf("cluster drill, WaitReplicas=%d: the job whose claim was on the killed primary ran %d times", w, d.effects[0].Load())
			require.Zero(t, c.missing, "jobs never run")
			require.Zero(t, c.unhandled, "jobs with a delivery not acknowledged by the deadline")
			if w > 0 {
				require.EqualValues(t, 1, d.effects[0].Load(), "the job whose claim was on the killed primary ran once")
				require.Zero(t, c.dups, "duplicate effects")
			}
		})
	}
}

// waitFinished waits until n jobs of d finished, or within passed.
func waitFinished(d *drill, n int32, within time.Duration) {
	deadline := time.Now().Add(within)
	for d.finished.Load() < n && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
}
