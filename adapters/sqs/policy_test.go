package sqsonce

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/internal/testenv"
)

const testQueueURL = "http://127.0.0.1:4566/000000000000/orders"

func testOptions(t *testing.T, cfg *Config) *options {
	t.Helper()
	return testOptionsFor(t, testQueueURL, cfg)
}

func testOptionsFor(t *testing.T, queueURL string, cfg *Config) *options {
	t.Helper()
	o, err := cfg.options(testenv.MemGuard(t, nil), queueURL, "Decorate")
	require.NoError(t, err)
	return o
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		base     time.Duration
		receives int
		limit    time.Duration
		want     time.Duration
	}{
		{time.Second, 1, time.Hour, time.Second},
		{time.Second, 0, time.Hour, time.Second},
		{time.Second, 2, time.Hour, 2 * time.Second},
		{time.Second, 5, time.Hour, 16 * time.Second},
		{time.Second, 20, time.Hour, time.Hour},
		{time.Second, 1 << 30, 12 * time.Hour, 12 * time.Hour},   // no overflow
		{1500 * time.Millisecond, 1, time.Hour, 2 * time.Second}, // whole seconds, rounded up
		{1500 * time.Millisecond, 1, 1700 * time.Millisecond, time.Second},
		{100 * time.Millisecond, 1, time.Hour, time.Second},
		{time.Second, 3, 0, 0},
		{time.Second, 3, -time.Minute, 0},
	} {
		t.Run(fmt.Sprintf("%s×%d≤%s", tc.base, tc.receives, tc.limit), func(t *testing.T) {
			require.Equal(t, tc.want, backoff(tc.base, tc.receives, tc.limit))
		})
	}
}

func TestDecide(t *testing.T) {
	t.Parallel()
	o := testOptions(t, nil)
	running := func(d time.Duration) error { return &core.RunningError{RetryAfter: d} }
	unavailable := fmt.Errorf("%w: boom", core.ErrStoreUnavailable)
	for _, tc := range []struct {
		name     string
		out      core.Outcome
		err      error
		receives int
		elapsed  time.Duration
		stopping bool
		want     decision
	}{
		{"ran", core.Ran, nil, 1, 0, false, decision{act: remove}},
		{"duplicate", core.Duplicate, nil, 3, 0, false, decision{act: remove}},
		{"lease lost still deletes", core.LeaseLost, nil, 1, 0, false, decision{act: remove}},
		{"unrecorded still deletes", core.Unrecorded, nil, 1, 0, false, decision{act: remove}},
		{"unguarded", core.Unguarded, nil, 1, 0, false, decision{act: remove}},
		{"running uses the hint", core.Running, running(30 * time.Second), 1, 0, false, decision{hide, 30 * time.Second}},
		{"running at least RunningDelay", core.Running, running(100 * time.Millisecond), 1, 0, false, decision{hide, time.Second}},
		{"running grows with receives", core.Running, running(2 * time.Second), 4, 0, false, decision{hide, 16 * time.Second}},
		{"running capped at 12h less the time since receive", core.Running, running(time.Hour), 30, time.Hour, false,
			decision{hide, 11*time.Hour - visibilityMargin}},
		{"failure left as is", core.Failed, errors.New("x"), 2, 0, false, decision{act: leave}},
		{"failure when stopping handed back", core.Failed, context.Canceled, 2, 0, true, decision{act: hide}},
		{"conflict left for the DLQ", core.Conflict, core.ErrConflict, 1, 0, false, decision{act: leave}},
		{"rejected left for the DLQ", core.Rejected, core.ErrInvalidKey, 1, 0, false, decision{act: leave}},
		{"unavailable backs off", core.Unavailable, unavailable, 1, 0, false, decision{hide, 10 * time.Second}},
		{"unavailable grows", core.Unavailable, unavailable, 3, 0, false, decision{hide, 40 * time.Second}},
		{"unavailable when stopping handed back", core.Unavailable, unavailable, 3, 0, true, decision{act: hide}},
		{"canceled left as is", core.Canceled, context.DeadlineExceeded, 3, 0, false, decision{act: leave}},
		{"canceled when stopping handed back", core.Canceled, context.Canceled, 3, 0, true, decision{act: hide}},
		// A failure the Poller settles itself (a retry in place abandoned at
		// stop) comes without an error: a nil error alone never deletes.
		{"failure without an error kept", core.Failed, nil, 1, 0, false, decision{act: leave}},
		{"rejected without an error kept", core.Rejected, nil, 1, 0, false, decision{act: leave}},
		{"zero outcome kept", 0, nil, 1, 0, false, decision{act: leave}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, o.decide(tc.out, tc.err, tc.receives, tc.elapsed, tc.stopping))
		})
	}

	t.Run("FailureDelay backs off", func(t *testing.T) {
		o := testOptions(t, &Config{FailureDelay: 5 * time.Second, MaxDelay: time.Minute})
		require.Equal(t, decision{hide, 5 * time.Second}, o.decide(core.Failed, errors.New("x"), 1, 0, false))
		require.Equal(t, decision{hide, 20 * time.Second}, o.decide(core.Failed, errors.New("x"), 3, 0, false))
		require.Equal(t, decision{hide, time.Minute}, o.decide(core.Failed, errors.New("x"), 9, 0, false))
	})
}

// A copy waiting on a long job: the receives it takes to outlast the job
// grow with the logarithm of the job's length, not linearly.
func TestRunningReceivesThinOut(t *testing.T) {
	t.Parallel()
	o := testOptions(t, nil)
	for _, tc := range []struct {
		job, lease time.Duration
		most       int
	}{
		{15 * time.Second, 2 * time.Second, 4},
		{time.Hour, 30 * time.Second, 7},
		{11 * time.Hour, 30 * time.Second, 11},
	} {
		waited, receives := time.Duration(0), 0
		for waited < tc.job {
			receives++
			d := o.decide(core.Running, &core.RunningError{RetryAfter: tc.lease}, receives, 0, false)
			require.Equal(t, hide, d.act)
			require.LessOrEqual(t, d.delay, maxVisibility)
			waited += d.delay
		}
		require.LessOrEqual(t, receives, tc.most, "job %s, lease %s", tc.job, tc.lease)
	}
}

func TestKey(t *testing.T) {
	t.Parallel()
	body := "ship order 1"
	m := types.Message{Body: aws.String(body)}
	o := testOptions(t, nil)
	require.Equal(t, core.Job{Key: "orders:" + core.Fingerprint([]byte(body)), Kind: "orders", Source: "sqs", DefaultKey: true, KeyHint: keyHint}, mustJob(t, o, m),
		"the default key holds the body's fingerprint; none is stored")

	fifo := m
	fifo.MessageId = aws.String("id-1")
	fifo.Attributes = map[string]string{"MessageDeduplicationId": "dedup-1", attrGroup: "g"}
	require.Equal(t, core.Job{Key: "orders:" + core.Fingerprint([]byte(body)), Kind: "orders", Source: "sqs", DefaultKey: true, KeyHint: keyHint}, mustJob(t, o, fifo),
		"a standard queue's message is keyed by its body")
	fo := testOptionsFor(t, testFIFOQueueURL, nil)
	require.Equal(t, core.Job{Key: "orders.fifo:id:id-1", Fingerprint: core.Fingerprint([]byte(body)), Kind: "orders.fifo", Source: "sqs"}, mustJob(t, fo, fifo))

	attr := fifo
	attr.MessageAttributes = map[string]types.MessageAttributeValue{
		"job": {DataType: aws.String("String"), StringValue: aws.String("order-1")},
		"bin": {DataType: aws.String("Binary"), BinaryValue: []byte("order-2")},
		"nil": {DataType: aws.String("String"), StringValue: aws.String("")},
	}
	require.Equal(t, "order-1", mustJob(t, testOptions(t, &Config{KeyAttribute: "job"}), attr).Key)
	require.Equal(t, "order-2", mustJob(t, testOptions(t, &Config{KeyAttribute: "bin"}), attr).Key)
	require.Equal(t, "orders.fifo:id:id-1", mustJob(t, testOptionsFor(t, testFIFOQueueURL, &Config{KeyAttribute: "nil"}), attr).Key, "an empty attribute falls back")
	require.Equal(t, "orders.fifo:id:id-1", mustJob(t, testOptionsFor(t, testFIFOQueueURL, &Config{KeyAttribute: "missing"}), attr).Key)
	require.Equal(t, "orders:"+core.Fingerprint([]byte(body)), mustJob(t, testOptions(t, &Config{KeyAttribute: "missing"}), attr).Key)

	custom := testOptions(t, &Config{
		KeyAttribute: "job",
		Key:          func(m types.Message) string { return "custom:" + aws.ToString(m.Body) },
		Fingerprint:  func(types.Message) string { return "" },
	})
	require.Equal(t, core.Job{Key: "custom:" + body, Kind: "orders", Source: "sqs"}, mustJob(t, custom, attr))

	require.Equal(t, "orders:"+core.Fingerprint(nil), mustJob(t, o, types.Message{}).Key, "a message without a body")
}

// mustJob returns o's job for m, which must have one.
func mustJob(t *testing.T, o *options, m types.Message) core.Job {
	t.Helper()
	j, err := o.job(m)
	require.NoError(t, err)
	return j
}

func TestReceiveCount(t *testing.T) {
	t.Parallel()
	require.Equal(t, 1, receiveCount(types.Message{}))
	require.Equal(t, 1, receiveCount(types.Message{Attributes: map[string]string{attrReceiveCount: "x"}}))
	require.Equal(t, 7, receiveCount(types.Message{Attributes: map[string]string{attrReceiveCount: "7"}}))
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	g := testenv.MemGuard(t, nil)
	for _, tc := range []struct {
		cfg  *Config
		url  string
		g    *core.Guard
		want string
	}{
		{nil, testQueueURL, nil, "jobonce: sqsonce: Decorate: Guard is nil"},
		{nil, "", g, "jobonce: sqsonce: Decorate: queue URL is empty"},
		{nil, "http://127.0.0.1:4566/", g, `jobonce: sqsonce: Decorate: queue URL "http://127.0.0.1:4566/" has no queue name`},
		{&Config{RunningDelay: -1}, testQueueURL, g, "jobonce: sqsonce: Config.RunningDelay must not be negative, got -1ns"},
		{&Config{FailureDelay: -1}, testQueueURL, g, "jobonce: sqsonce: Config.FailureDelay must not be negative, got -1ns"},
		{&Config{UnavailableDelay: -1}, testQueueURL, g, "jobonce: sqsonce: Config.UnavailableDelay must not be negative, got -1ns"},
		{&Config{MaxDelay: -1}, testQueueURL, g, "jobonce: sqsonce: Config.MaxDelay must not be negative, got -1ns"},
		{&Config{MaxDelay: 13 * time.Hour}, testQueueURL, g, "jobonce: sqsonce: Config.MaxDelay must not exceed SQS's 12h limit, got 13h0m0s"},
	} {
		_, err := tc.cfg.options(tc.g, tc.url, "Decorate")
		require.EqualError(t, err, tc.want)
	}

	cfg := &Config{}
	o, err := cfg.options(g, testQueueURL, "Decorate")
	require.NoError(t, err)
	require.Equal(t, time.Second, o.RunningDelay)
	require.Equal(t, 10*time.Second, o.UnavailableDelay)
	require.Equal(t, maxVisibility, o.MaxDelay)
	require.Equal(t, "orders", o.queueName)
	require.Equal(t, &Config{}, cfg, "defaults must not be written to the caller's Config")
}

// TestDecorateMisconfigured: Decorate returns an error naming the problem
// and no handler.
func TestDecorateMisconfigured(t *testing.T) {
	t.Parallel()
	g := testenv.MemGuard(t, nil)
	noop := func(context.Context, types.Message) error { return nil }
	for _, c := range []struct {
		name string
		h    func() (HandlerFunc, error)
		want string
	}{
		{"guard", func() (HandlerFunc, error) { return Decorate(nil, nopClient{}, testQueueURL, noop, nil) }, "jobonce: sqsonce: Decorate: Guard is nil"},
		{"client", func() (HandlerFunc, error) { return Decorate(g, nil, testQueueURL, noop, nil) }, "jobonce: sqsonce: Decorate: client is nil"},
		{"typed-nil client", func() (HandlerFunc, error) { return Decorate(g, (*sqs.Client)(nil), testQueueURL, noop, nil) }, "jobonce: sqsonce: Decorate: client is nil"},
		{"handler", func() (HandlerFunc, error) { return Decorate(g, nopClient{}, testQueueURL, nil, nil) }, "jobonce: sqsonce: Decorate: handler is nil"},
		{"queue", func() (HandlerFunc, error) { return Decorate(g, nopClient{}, "", noop, nil) }, "jobonce: sqsonce: Decorate: queue URL is empty"},
		{"config", func() (HandlerFunc, error) {
			return Decorate(g, nopClient{}, testQueueURL, noop, &Config{MaxDelay: 13 * time.Hour})
		}, "jobonce: sqsonce: Config.MaxDelay must not exceed SQS's 12h limit, got 13h0m0s"},
	} {
		h, err := c.h()
		require.EqualError(t, err, c.want, c.name)
		require.Nil(t, h, c.name)
	}
}

// TestSendMisconfigured: Send returns an error naming the bad argument and
// sends nothing.
func TestSendMisconfigured(t *testing.T) {
	t.Parallel()
	g := testenv.MemGuard(t, nil)
	ctx := context.Background()
	in := &sqs.SendMessageInput{QueueUrl: aws.String(testQueueURL), MessageBody: aws.String("b")}
	for _, c := range []struct {
		name   string
		g      *core.Guard
		client Sender
		in     *sqs.SendMessageInput
		want   string
	}{
		{"guard", nil, nopClient{}, in, "jobonce: sqsonce: Send: Guard is nil"},
		{"client", g, nil, in, "jobonce: sqsonce: Send: client is nil"},
		{"typed-nil client", g, (*sqs.Client)(nil), in, "jobonce: sqsonce: Send: client is nil"},
		{"input", g, nopClient{}, &sqs.SendMessageInput{}, "jobonce: sqsonce: Send: input has no QueueUrl"},
	} {
		sent, out, err := Send(ctx, c.g, c.client, "k", time.Minute, c.in)
		require.EqualError(t, err, c.want, c.name)
		require.False(t, sent, c.name)
		require.Nil(t, out, c.name)
	}
}

func TestNewPollerErrors(t *testing.T) {
	t.Parallel()
	g := testenv.MemGuard(t, nil)
	noop := func(context.Context, types.Message) error { return nil }
	// args are NewPoller's arguments, valid until a case changes one.
	type args struct {
		g   *core.Guard
		c   Client
		url string
		h   HandlerFunc
		cfg PollerConfig
	}
	valid := func() *args { return &args{g, nopClient{}, testQueueURL, noop, PollerConfig{}} }
	for _, tc := range []struct {
		change func(*args)
		want   string
	}{
		{func(a *args) { a.c = nil }, "NewPoller: client"},
		{func(a *args) { a.c = (*sqs.Client)(nil) }, "NewPoller: client"},
		{func(a *args) { a.url = "" }, "NewPoller: queue URL"},
		{func(a *args) { a.url = "http://127.0.0.1:4566/" }, "NewPoller: queue URL"},
		{func(a *args) { a.g = nil }, "NewPoller: Guard"},
		{func(a *args) { a.h = nil }, "NewPoller: handler"},
		{func(a *args) { a.cfg.Concurrency = -1 }, "PollerConfig.Concurrency"},
		{func(a *args) { a.cfg.Receivers = -1 }, "PollerConfig.Receivers"},
		{func(a *args) { a.cfg.BatchSize = 11 }, "PollerConfig.BatchSize"},
		{func(a *args) { a.cfg.WaitTime = 21 * time.Second }, "PollerConfig.WaitTime"},
		{func(a *args) { a.cfg.WaitTime = 1500 * time.Millisecond }, "PollerConfig.WaitTime"},
		{func(a *args) { a.cfg.VisibilityTimeout = time.Second }, "PollerConfig.VisibilityTimeout"},
		{func(a *args) { a.cfg.VisibilityTimeout = 13 * time.Hour }, "PollerConfig.VisibilityTimeout"},
		{func(a *args) { a.cfg.ShutdownTimeout = -1 }, "PollerConfig.ShutdownTimeout"},
		{func(a *args) { a.cfg.FlushDelay = -1 }, "PollerConfig.FlushDelay"},
		{func(a *args) { a.cfg.UnavailableDelay = -1 }, "Config.UnavailableDelay"},
	} {
		a := valid()
		tc.change(a)
		p, err := NewPoller(a.g, a.c, a.url, a.h, &a.cfg)
		require.Nil(t, p)
		require.Error(t, err)
		require.True(t, strings.HasPrefix(err.Error(), "jobonce: sqsonce: "+tc.want+" "), "%q does not name %s", err, tc.want)
	}
	// A field whose zero value means its default says so, not "positive".
	for _, tc := range []struct {
		change func(*args)
		want   string
	}{
		{func(a *args) { a.cfg.Concurrency = -1 }, "jobonce: sqsonce: PollerConfig.Concurrency must not be negative (0 means 20), got -1"},
		{func(a *args) { a.cfg.Receivers = -2 }, "jobonce: sqsonce: PollerConfig.Receivers must not be negative (0 means 1), got -2"},
		{func(a *args) { a.cfg.BatchSize = 11 }, "jobonce: sqsonce: PollerConfig.BatchSize must be 0 (default 10) to 10, got 11"},
		{func(a *args) { a.cfg.WaitTime = 21 * time.Second }, "jobonce: sqsonce: PollerConfig.WaitTime must be whole seconds from 0 (default 20s) to 20s, got 21s"},
		{func(a *args) { a.cfg.VisibilityTimeout = time.Second }, "jobonce: sqsonce: PollerConfig.VisibilityTimeout must be 0 (default 30s) or whole seconds from 2s to 12h, got 1s"},
		{func(a *args) { a.url = "http://127.0.0.1:4566/" }, `jobonce: sqsonce: NewPoller: queue URL "http://127.0.0.1:4566/" has no queue name`},
	} {
		a := valid()
		tc.change(a)
		_, err := NewPoller(a.g, a.c, a.url, a.h, &a.cfg)
		require.EqualError(t, err, tc.want)
	}
	// A Poller that does not come from NewPoller runs nothing.
	require.EqualError(t, (&Poller{}).Run(context.Background()), "jobonce: sqsonce: Poller.Run: the Poller does not come from NewPoller")
	require.EqualError(t, (*Poller)(nil).Run(context.Background()), "jobonce: sqsonce: Poller.Run: the Poller does not come from NewPoller")

	// A nil *PollerConfig gives the defaults, and the Config is copied.
	cfg := &PollerConfig{Concurrency: 3}
	p, err := NewPoller(g, nopClient{}, testQueueURL, noop, cfg)
	require.NoError(t, err)
	cfg.Concurrency = -1
	require.Equal(t, 3, p.cfg.Concurrency)
	require.Equal(t, 3, p.cfg.BatchSize, "a batch asks for no more than Concurrency")
	p, err = NewPoller(g, nopClient{}, testQueueURL, noop, nil)
	require.NoError(t, err)
	require.Equal(t, PollerConfig{Config: p.cfg.Config, Concurrency: 20, Receivers: 1, BatchSize: 10, WaitTime: 20 * time.Second,
		VisibilityTimeout: 30 * time.Second, ShutdownTimeout: 30 * time.Second, FlushDelay: 20 * time.Millisecond}, p.cfg)
}

func TestSplitRound(t *testing.T) {
	t.Parallel()
	jobs := []core.Job{{Key: "a"}, {Key: "b"}, {Key: "a"}, {Key: ""}, {Key: ""}, {Key: "a"}, {Key: "c"}}
	noGroups := make([]string, len(jobs))
	round, spares, rest := splitRound(jobs, noGroups, []int{0, 1, 2, 3, 4, 5, 6}, nil)
	require.Equal(t, []int{0, 1, 3, 4, 6}, round, "empty keys are rejected by the Guard, not held back")
	require.Equal(t, []int{2}, rest, "one later copy of a key is kept for the next round")
	require.Equal(t, []int{5}, spares, "the copies after it settle with this round")
	round, spares, rest = splitRound(jobs, noGroups, rest, nil)
	require.Equal(t, []int{2}, round)
	require.Empty(t, spares)
	require.Empty(t, rest)

	// One message per FIFO message group and round, in order; a group's
	// later messages are never spares.
	jobs = []core.Job{{Key: "a"}, {Key: "b"}, {Key: "c"}, {Key: "d"}, {Key: "a"}, {Key: "a"}}
	groups := []string{"g1", "g1", "g2", "", "g1", "g3"}
	round, spares, rest = splitRound(jobs, groups, []int{0, 1, 2, 3, 4, 5}, nil)
	require.Equal(t, []int{0, 2, 3}, round)
	require.Equal(t, []int{1, 4, 5}, rest)
	require.Empty(t, spares)
}

func TestSplitRoundWaiting(t *testing.T) {
	t.Parallel()
	// Message 0 waits for a retry in place: it holds its group (g1) and its
	// key (a), so neither message 1 (g1) nor message 3 (key a) runs before it.
	jobs := []core.Job{{Key: "a"}, {Key: "b"}, {Key: "c"}, {Key: "a"}}
	groups := []string{"g1", "g1", "g2", ""}
	round, spares, rest := splitRound(jobs, groups, []int{0, 1, 2, 3}, func(i int) bool { return i != 0 })
	require.Equal(t, []int{2}, round)
	require.Equal(t, []int{0, 1, 3}, rest)
	require.Empty(t, spares)
	require.Equal(t, []int{0, 1, 2, 3, 5, 7}, merge([]int{1, 3, 7}, []int{0, 2, 5}))
	require.Equal(t, []int{4}, merge(nil, []int{4}))
}

func TestParseRedrivePolicy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		policy string
		want   int
		err    bool
	}{
		{``, 0, false},
		{`{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":"3"}`, 3, false},
		{`{"deadLetterTargetArn":"arn","maxReceiveCount":5}`, 5, false},
		{`{"deadLetterTargetArn":"arn"}`, 0, true},
		{`{"maxReceiveCount":"0"}`, 0, true},
		{`not json`, 0, true},
	} {
		n, err := parseRedrivePolicy(tc.policy)
		require.Equal(t, tc.want, n, tc.policy)
		require.Equal(t, tc.err, err != nil, "%s: %v", tc.policy, err)
	}
}

// With the defaults (a 30s lease, so a RetryAfter hint of 10s), a copy that
// finds its job running is hidden 10s, 20s, 40s, …: it reaches the
// dead-letter queue only once it has been received maxReceiveCount times and
// hidden after each, about 70s after its first receive with a
// maxReceiveCount of 3, 5 min with 5 and 2.8h with 10, as the README says.
func TestWaitingCopyReachesTheDeadLetterQueueAfterTheDocumentedWait(t *testing.T) {
	t.Parallel()
	g := testenv.MemGuard(t, nil)
	o := testOptionsFor(t, testFIFOQueueURL, nil)
	started, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		_, err := g.Do(context.Background(), "report", func(context.Context) error {
			close(started)
			<-release
			return nil
		})
		done <- err
	}()
	<-started
	out, err := g.Do(context.Background(), "report", func(context.Context) error { return errors.New("ran beside the first copy") })
	close(release)
	require.NoError(t, <-done)
	require.Equal(t, core.Running, out)
	hint, ok := core.RetryAfter(err)
	require.True(t, ok, "no RetryAfter hint: %v", err)
	require.Equal(t, 10*time.Second, hint)

	for _, tc := range []struct {
		maxReceiveCount int
		want            time.Duration
	}{
		{3, 70 * time.Second},
		{5, 310 * time.Second},    // about 5 min
		{10, 10230 * time.Second}, // about 2.8h
	} {
		var hidden time.Duration
		for receive := 1; receive <= tc.maxReceiveCount; receive++ {
			d := o.decide(core.Running, &core.RunningError{RetryAfter: hint}, receive, 0, false)
			require.Equal(t, hide, d.act)
			hidden += d.delay
		}
		require.Equal(t, tc.want, hidden, "maxReceiveCount %d", tc.maxReceiveCount)
	}
}
