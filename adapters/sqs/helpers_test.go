package sqsonce_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	sqsonce "github.com/jobonce/jobonce/adapters/sqs"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/internal/testenv"
)

// newSQS returns a client for the test SQS server: the endpoint from the
// environment, static dummy credentials, us-east-1.
func newSQS(t testing.TB) *sqs.Client {
	t.Helper()
	testenv.Short(t)
	return sqsClient(testenv.SQSEndpoint(t))
}

// server is an SQS implementation the behaviour tests run against.
type server struct {
	name   string
	client *sqs.Client
	// slack multiplies the tests' deadlines: moto answers in 0.4–2 s under
	// load, fauxqs in milliseconds.
	slack time.Duration
}

// within returns d stretched for the server's speed.
func (s server) within(d time.Duration) time.Duration { return d * s.slack }

// motoEndpoint is the environment variable naming a running moto_server.
const motoEndpoint = "TEST_MOTO_ENDPOINT"

// eachServer runs f as a parallel subtest against fauxqs and against moto,
// which returns several messages of one FIFO group per receive, reports bad
// receipt handles per batch entry and makes lapsed in-flight messages visible
// again. The moto subtest is skipped when TEST_MOTO_ENDPOINT is unset
// (scripts/test.sh sets it when moto_server is installed).
func eachServer(t *testing.T, f func(t *testing.T, s server)) {
	t.Helper()
	testenv.Short(t)
	t.Run("fauxqs", func(t *testing.T) {
		t.Parallel()
		f(t, server{name: "fauxqs", client: sqsClient(testenv.SQSEndpoint(t)), slack: 1})
	})
	t.Run("moto", func(t *testing.T) {
		t.Parallel()
		f(t, motoServer(t))
	})
}

// motoServer returns moto, or skips the test when TEST_MOTO_ENDPOINT is unset.
func motoServer(t *testing.T) server {
	t.Helper()
	ep := os.Getenv(motoEndpoint)
	if ep == "" {
		t.Skip(motoEndpoint + " is not set (scripts/test.sh sets it when moto_server is installed): no moto run")
	}
	return server{name: "moto", client: sqsClient(ep), slack: 3}
}

func sqsClient(endpoint string) *sqs.Client {
	return sqs.New(sqs.Options{
		BaseEndpoint: aws.String(endpoint),
		Region:       "us-east-1",
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "test", SecretAccessKey: "test", Source: "jobonce tests"}, nil
		}),
	})
}

// queueSpec describes a test queue.
type queueSpec struct {
	visibility           int // seconds; 0 for SQS's default (30)
	maxReceive           int // with a dead-letter queue when positive
	fifo                 bool
	contentDeduplication bool // FIFO: ContentBasedDeduplication
}

// attributes returns the queue's attributes, but for its redrive policy.
func (spec queueSpec) attributes() map[string]string {
	attrs := map[string]string{}
	if spec.visibility > 0 {
		attrs["VisibilityTimeout"] = strconv.Itoa(spec.visibility)
	}
	if spec.fifo {
		attrs["FifoQueue"] = "true"
	}
	if spec.contentDeduplication {
		attrs["ContentBasedDeduplication"] = "true"
	}
	return attrs
}

// testQueue is a queue of the test's own, deleted at cleanup.
type testQueue struct {
	url, dlq string
}

func createQueue(t testing.TB, c *sqs.Client, spec queueSpec) testQueue {
	t.Helper()
	ctx := context.Background()
	name := "jobonce-" + testenv.RandomID(8)
	var q testQueue
	attrs := spec.attributes()
	if spec.fifo {
		name += ".fifo"
	}
	if spec.maxReceive > 0 {
		dlq, dlqAttrs := name+"-dlq", map[string]string{}
		if spec.fifo {
			dlq = strings.TrimSuffix(name, ".fifo") + "-dlq.fifo"
			dlqAttrs["FifoQueue"] = "true"
		}
		out, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(dlq), Attributes: dlqAttrs})
		require.NoError(t, err)
		q.dlq = aws.ToString(out.QueueUrl)
		t.Cleanup(func() { _, _ = c.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: aws.String(q.dlq)}) })
		a, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
			QueueUrl: aws.String(q.dlq), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
		})
		require.NoError(t, err)
		arn := a.Attributes[string(types.QueueAttributeNameQueueArn)]
		require.NotEmpty(t, arn)
		attrs["RedrivePolicy"] = fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":"%d"}`, arn, spec.maxReceive)
	}
	out, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	require.NoError(t, err)
	q.url = aws.ToString(out.QueueUrl)
	t.Cleanup(func() { _, _ = c.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: aws.String(q.url)}) })
	return q
}

// depth returns a queue's visible and in-flight (not visible) message counts.
func depth(t testing.TB, c *sqs.Client, url string) (visible, inflight int) {
	t.Helper()
	visible, inflight, err := depthErr(c, url)
	require.NoError(t, err)
	return visible, inflight
}

func depthErr(c *sqs.Client, url string) (visible, inflight int, err error) {
	out, err := c.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameApproximateNumberOfMessages,
			types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
		},
	})
	if err != nil {
		return 0, 0, err
	}
	visible, err = strconv.Atoi(out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessages)])
	if err != nil {
		return 0, 0, err
	}
	inflight, err = strconv.Atoi(out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessagesNotVisible)])
	return visible, inflight, err
}

// sendAll sends bodies in batches of ten, in order.
// sendEachTwice sends jobs "job-000"… side by side, each twice, and returns
// their ids.
func sendEachTwice(t testing.TB, c *sqs.Client, url string, jobs int) []string {
	t.Helper()
	ids := make([]string, jobs)
	bodies := make([]string, 0, 2*jobs)
	for i := range ids {
		ids[i] = fmt.Sprintf("job-%03d", i)
		bodies = append(bodies, ids[i], ids[i])
	}
	sendAll(t, c, url, bodies)
	return ids
}

func sendAll(t testing.TB, c *sqs.Client, url string, bodies []string) {
	t.Helper()
	for len(bodies) > 0 {
		n := min(len(bodies), 10)
		entries := make([]types.SendMessageBatchRequestEntry, n)
		for i, b := range bodies[:n] {
			entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(b)}
		}
		out, err := c.SendMessageBatch(context.Background(), &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries})
		require.NoError(t, err)
		require.Empty(t, out.Failed)
		bodies = bodies[n:]
	}
}

// effects counts effects per job id in a Redis hash.
type effects struct {
	rdb *redis.Client
	key string
}

func newEffects(rdb *redis.Client, prefix string) effects {
	return effects{rdb: rdb, key: prefix + "effects"}
}

func (e effects) record(ctx context.Context, id string) error {
	return e.rdb.HIncrBy(context.WithoutCancel(ctx), e.key, id, 1).Err()
}

func (e effects) all(t testing.TB) map[string]int {
	t.Helper()
	m, err := e.rdb.HGetAll(context.Background(), e.key).Result()
	require.NoError(t, err)
	out := make(map[string]int, len(m))
	for k, v := range m {
		n, err := strconv.Atoi(v)
		require.NoError(t, err)
		out[k] = n
	}
	return out
}

// count returns how many ids have effects, or -1 when Redis fails.
func (e effects) count() int {
	n, err := e.rdb.HLen(context.Background(), e.key).Result()
	if err != nil {
		return -1
	}
	return int(n)
}

// requireOnce requires exactly one effect for every id in ids, and no others.
func (e effects) requireOnce(t testing.TB, ids []string) {
	t.Helper()
	got := e.all(t)
	var dup, missing []string
	for _, id := range ids {
		switch n := got[id]; {
		case n == 0:
			missing = append(missing, id)
		case n > 1:
			dup = append(dup, fmt.Sprintf("%s×%d", id, n))
		}
	}
	require.Empty(t, dup, "duplicate effects")
	require.Empty(t, missing, "missing effects")
	require.Len(t, got, len(ids), "effects for unknown ids")
}

// startPoller runs p until the returned stop is called (or the test ends);
// stop cancels Run's context and returns Run's error.
func startPoller(t testing.TB, p *sqsonce.Poller) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(2 * time.Minute):
				err = fmt.Errorf("Poller.Run did not return within 2 minutes of cancellation")
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// recorder passes every call through to the real client and records which
// messages were received and deleted.
type recorder struct {
	sqsonce.Client
	mu       sync.Mutex
	receives map[string]int    // message id → receives
	bodies   map[string]string // message id → body
	deleted  map[string]bool   // receipt handles deleted
}

func newRecorder(c sqsonce.Client) *recorder {
	return &recorder{Client: c, receives: map[string]int{}, bodies: map[string]string{}, deleted: map[string]bool{}}
}

func (r *recorder) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	out, err := r.Client.ReceiveMessage(ctx, in, opts...)
	if err == nil {
		r.mu.Lock()
		for _, m := range out.Messages {
			r.receives[aws.ToString(m.MessageId)]++
			r.bodies[aws.ToString(m.MessageId)] = aws.ToString(m.Body)
		}
		r.mu.Unlock()
	}
	return out, err
}

func (r *recorder) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	r.mu.Lock()
	for _, e := range in.Entries {
		r.deleted[aws.ToString(e.ReceiptHandle)] = true
	}
	r.mu.Unlock()
	return r.Client.DeleteMessageBatch(ctx, in, opts...)
}

func (r *recorder) receivesOf(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.receives[id]
}

func (r *recorder) receivedIDs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := make([]string, 0, len(r.receives))
	for id := range r.receives {
		ids = append(ids, id)
	}
	return ids
}

func (r *recorder) bodyOf(id string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.bodies[id]
}

// receivesOfBody returns the receives of all messages with the body.
func (r *recorder) receivesOfBody(body string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for id, b := range r.bodies {
		if b == body {
			n += r.receives[id]
		}
	}
	return n
}

// receiveSizes reports the size of every receive to f.
func receiveSizes(c sqsonce.Client, f func(n int)) sqsonce.Client {
	return &sizeReporter{Client: c, f: f}
}

type sizeReporter struct {
	sqsonce.Client
	f func(n int)
}

func (s *sizeReporter) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	out, err := s.Client.ReceiveMessage(ctx, in, opts...)
	if err == nil {
		s.f(len(out.Messages))
	}
	return out, err
}

func (r *recorder) deletedHandles() map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]bool, len(r.deleted))
	for h := range r.deleted {
		out[h] = true
	}
	return out
}

// requireDrained waits until the queue has no message left, visible or not.
func requireDrained(t testing.TB, c *sqs.Client, url string, within time.Duration) {
	t.Helper()
	drained := drainedReads(c, url)
	require.Eventually(t, drained, within, 100*time.Millisecond, "queue did not drain")
}

// drainedReads returns a condition that holds once three reads of the
// queue's depth in a row found no message, visible or not: moto counts a
// queue's messages by walking its list while another request (a delete,
// a move to the dead-letter queue) may change it, and can miss one that
// is there.
func drainedReads(c *sqs.Client, url string) func() bool {
	streak := 0
	return func() bool {
		v, f, err := depthErr(c, url)
		if err != nil || v+f != 0 {
			streak = 0
			return false
		}
		streak++
		return streak >= 3
	}
}

// handles passes every call through and remembers the body of each message
// received through it, by receipt handle, for test clients that act on batch
// calls by body.
type handles struct {
	sqsonce.Client
	mu     sync.Mutex
	bodies map[string]string // receipt handle → body
}

func newHandles(c sqsonce.Client) *handles { return &handles{Client: c, bodies: map[string]string{}} }

func (h *handles) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	out, err := h.Client.ReceiveMessage(ctx, in, opts...)
	if err == nil {
		h.mu.Lock()
		for _, m := range out.Messages {
			h.bodies[aws.ToString(m.ReceiptHandle)] = aws.ToString(m.Body)
		}
		h.mu.Unlock()
	}
	return out, err
}

// body returns the body of the message received with handle.
func (h *handles) body(handle *string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.bodies[aws.ToString(handle)]
}

// mustDecorate is sqsonce.Decorate for a configuration known to be valid.
func mustDecorate(t testing.TB, g *core.Guard, client sqsonce.Client, queueURL string, h sqsonce.HandlerFunc, cfg *sqsonce.Config) sqsonce.HandlerFunc {
	t.Helper()
	handler, err := sqsonce.Decorate(g, client, queueURL, h, cfg)
	require.NoError(t, err)
	return handler
}

// hangingSQS returns a real SQS client whose calls go to the test server,
// except the operations named (the X-Amz-Target's action, "DeleteMessage"),
// which a listener accepts and never answers, as a server that stopped
// responding does. Each unanswered call is signalled on hung.
func hangingSQS(t testing.TB, actions ...string) (client *sqs.Client, hung <-chan string) {
	t.Helper()
	target, err := url.Parse(testenv.SQSEndpoint(t))
	require.NoError(t, err)
	forward := httputil.NewSingleHostReverseProxy(target)
	hangs := map[string]bool{}
	for _, a := range actions {
		hangs["AmazonSQS."+a] = true
	}
	signal, quit := make(chan string, 16), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		action := r.Header.Get("X-Amz-Target")
		if !hangs[action] {
			forward.ServeHTTP(w, r)
			return
		}
		select {
		case signal <- strings.TrimPrefix(action, "AmazonSQS."):
		default:
		}
		select { // never answer
		case <-r.Context().Done():
		case <-quit:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(quit) })
	return sqsClient(srv.URL), signal
}

// groupScoped reports the deduplication ids a queue with
// DeduplicationScope=messageGroup holds. fauxqs 1.9.2 and moto 5.2.1
// deduplicate across the whole queue whatever the scope, so a test sends
// each group's copy of an id as id + "~" + group, and groupScoped removes
// the suffix from what the receive returns.
type groupScoped struct{ sqsonce.Client }

func (g groupScoped) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	out, err := g.Client.ReceiveMessage(ctx, in, opts...)
	if err == nil {
		for _, m := range out.Messages {
			if id, ok := m.Attributes["MessageDeduplicationId"]; ok {
				m.Attributes["MessageDeduplicationId"], _, _ = strings.Cut(id, "~")
			}
		}
	}
	return out, err
}

// sendToGroups sends body to a FIFO queue once per group, each copy with the
// deduplication id id in its group (see groupScoped).
func sendToGroups(t testing.TB, c *sqs.Client, queueURL, id string, bodies map[string]string) {
	t.Helper()
	for group, body := range bodies {
		_, err := c.SendMessage(context.Background(), &sqs.SendMessageInput{
			QueueUrl: aws.String(queueURL), MessageBody: aws.String(body),
			MessageGroupId: aws.String(group), MessageDeduplicationId: aws.String(id + "~" + group),
		})
		require.NoError(t, err)
	}
}

// logText keeps the text of every record at Warn and above, attributes
// included, for tests that assert what a warning tells its reader.
type logText struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logText) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// Logger returns a logger that writes to l.
func (l *logText) Logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// lines returns the records kept that contain s.
func (l *logText) lines(s string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range strings.Split(l.b.String(), "\n") {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}

// attributesAsAsked returns message attributes only when the receive asks for
// them, as SQS does: fauxqs 1.9.2 returns every message attribute to a
// receive without MessageAttributeNames.
type attributesAsAsked struct{ *sqs.Client }

func (a attributesAsAsked) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	out, err := a.Client.ReceiveMessage(ctx, in, opts...)
	if err == nil && len(in.MessageAttributeNames) == 0 {
		for i := range out.Messages {
			out.Messages[i].MessageAttributes, out.Messages[i].MD5OfMessageAttributes = nil, nil
		}
	}
	return out, err
}

// newPoller returns sqsonce.NewPoller's Poller, failing t on its error.
func newPoller(t testing.TB, g *core.Guard, c sqsonce.Client, queueURL string, h sqsonce.HandlerFunc, cfg *sqsonce.PollerConfig) *sqsonce.Poller {
	t.Helper()
	p, err := sqsonce.NewPoller(g, c, queueURL, h, cfg)
	require.NoError(t, err)
	return p
}
