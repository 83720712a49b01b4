package sqsonce_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	sqsonce "github.com/jobonce/jobonce/adapters/sqs"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/internal/testenv"
)

// A Poller of 10 handlers whose copies wait up to 10 minutes for a running
// copy (within a 20-minute visibility, so that a pool of waiting copies
// would stay taken): one job running until the test releases it, 50 copies
// of it sent, then 20 unrelated messages. The unrelated messages all run
// while the long job still runs, since one copy of a key waits and the
// others are hidden; once it ends, every copy is deleted as a duplicate and
// the effect happened once.
func TestCopiesOfARunningJobLeaveThePoolToOtherMessages(t *testing.T) {
	t.Parallel()
	c := newSQS(t)
	prefix := testenv.Prefix(t)
	rdb := testenv.Redis(t, prefix)
	q := createQueue(t, c, queueSpec{})
	eff := newEffects(rdb, prefix)
	var outs testenv.Outcomes
	g := testenv.RedisGuardOn(t, rdb, prefix, &core.Config{Observer: outs.Observe})

	var runs atomic.Int64
	started, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	releaseLong := func() { releaseOnce.Do(func() { close(release) }) }
	handler := func(ctx context.Context, m types.Message) error {
		if aws.ToString(m.Body) == "long" && runs.Add(1) == 1 {
			close(started)
			<-release
		}
		return eff.record(ctx, aws.ToString(m.Body))
	}
	p := newPoller(t, g, c, q.url, handler, &sqsonce.PollerConfig{
		Concurrency: 10, WaitTime: time.Second, VisibilityTimeout: 20 * time.Minute,
		// MaxDelay brings hidden copies back soon once the long job ends.
		Config: sqsonce.Config{WaitRunning: 10 * time.Minute, MaxDelay: 5 * time.Second}})
	stop := startPoller(t, p)
	t.Cleanup(releaseLong) // before the Poller stops

	sendAll(t, c, q.url, []string{"long"})
	select {
	case <-started:
	case <-time.After(time.Minute):
		t.Fatal("the long job did not start")
	}
	const copies, unrelated = 50, 20
	bodies := make([]string, copies)
	for i := range bodies {
		bodies[i] = "long"
	}
	sendAll(t, c, q.url, bodies)
	ids := make([]string, unrelated)
	for i := range ids {
		ids[i] = fmt.Sprintf("short-%02d", i)
	}
	sendAll(t, c, q.url, ids)

	require.Eventually(t, func() bool { return eff.count() == unrelated }, time.Minute, 20*time.Millisecond,
		"unrelated messages run while the long job runs: %d of %d", eff.count(), unrelated)
	eff.requireOnce(t, ids)
	releaseLong()

	require.Eventually(t, func() bool { return p.Stats().Duplicates >= copies }, time.Minute, 20*time.Millisecond,
		"copies deleted as duplicates: %+v", p.Stats())
	requireDrained(t, c, q.url, time.Minute)
	require.NoError(t, stop())
	eff.requireOnce(t, append(ids, "long"))
	st := p.Stats()
	require.EqualValues(t, 1+unrelated, st.Ran)
	require.Zero(t, st.Failed+st.Conflicts+st.Unavailable)
	t.Logf("stats: %+v", st)
}
