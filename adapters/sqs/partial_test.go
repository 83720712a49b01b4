package sqsonce_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	sqsonce "github.com/jobonce/jobonce/adapters/sqs"
	"github.com/jobonce/jobonce/internal/testenv"
)

// spoiler passes every call through, except the first batch delete or
// visibility change naming the message with a chosen body: it either puts a
// garbage receipt handle in that message's entry or fails the whole call.
type spoiler struct {
	sqsonce.Client
	body       string // the message to spoil
	visibility bool   // spoil a visibility change, else a delete
	wholeCall  bool   // fail the call instead of spoiling the entry

	mu      sync.Mutex
	msgs    map[string]types.Message // receipt handle → message
	spoiled string                   // the spoiled message's id
	entries int                      // entries in the spoiled call
}

func newSpoiler(c sqsonce.Client, body string) *spoiler {
	return &spoiler{Client: c, body: body, msgs: map[string]types.Message{}}
}

func (s *spoiler) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	out, err := s.Client.ReceiveMessage(ctx, in, opts...)
	if err == nil {
		s.mu.Lock()
		for _, m := range out.Messages {
			s.msgs[aws.ToString(m.ReceiptHandle)] = m
		}
		s.mu.Unlock()
	}
	return out, err
}

// spoil returns the handles to send in place of handles, and whether to fail
// the whole call.
func (s *spoiler) spoil(visibility bool, handles []*string) ([]*string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.spoiled != "" || visibility != s.visibility {
		return handles, false
	}
	out := append([]*string(nil), handles...)
	for i, h := range handles {
		m := s.msgs[aws.ToString(h)]
		if aws.ToString(m.Body) == s.body {
			s.spoiled, s.entries = aws.ToString(m.MessageId), len(handles)
			out[i] = aws.String("garbage-" + aws.ToString(h)[:8])
			return out, s.wholeCall
		}
	}
	return handles, false
}

func (s *spoiler) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	handles := make([]*string, len(in.Entries))
	for i, e := range in.Entries {
		handles[i] = e.ReceiptHandle
	}
	spoiled, fail := s.spoil(false, handles)
	if fail {
		return nil, errors.New("spoiler: the call fails")
	}
	cp := *in
	cp.Entries = append([]types.DeleteMessageBatchRequestEntry(nil), in.Entries...)
	for i := range cp.Entries {
		cp.Entries[i].ReceiptHandle = spoiled[i]
	}
	return s.Client.DeleteMessageBatch(ctx, &cp, opts...)
}

func (s *spoiler) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	handles := make([]*string, len(in.Entries))
	for i, e := range in.Entries {
		handles[i] = e.ReceiptHandle
	}
	spoiled, fail := s.spoil(true, handles)
	if fail {
		return nil, errors.New("spoiler: the call fails")
	}
	cp := *in
	cp.Entries = append([]types.ChangeMessageVisibilityBatchRequestEntry(nil), in.Entries...)
	for i := range cp.Entries {
		cp.Entries[i].ReceiptHandle = spoiled[i]
	}
	return s.Client.ChangeMessageVisibilityBatch(ctx, &cp, opts...)
}

func (s *spoiler) result() (id string, entries int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.spoiled, s.entries
}

// logBuffer collects log lines, safe for concurrent use.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// A delete or visibility change that fails for one entry of a batch call, or
// for the whole call, is counted and logged with the message's id; a
// message whose delete failed comes back and is deleted as a duplicate, and
// every job runs once. The servers differ: moto reports a garbage receipt
// handle in DeleteMessageBatch as a failed entry, fauxqs as deleted (the
// Poller counts what the server reports; the message still comes back).
func TestPollerBatchPartialFailures(t *testing.T) {
	t.Parallel()
	eachServer(t, func(t *testing.T, s server) {
		for _, tc := range []struct {
			name       string
			visibility bool
			wholeCall  bool
		}{
			{name: "delete entry"},
			{name: "delete call", wholeCall: true},
			{name: "visibility entry", visibility: true},
			{name: "visibility call", visibility: true, wholeCall: true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				testPartialFailure(t, s, tc.visibility, tc.wholeCall)
			})
		}
	})
}

func testPartialFailure(t *testing.T, s server, visibility, wholeCall bool) {
	c := s.client
	prefix := testenv.Prefix(t)
	rdb := testenv.Redis(t, prefix)
	q := createQueue(t, c, queueSpec{visibility: 2})
	eff := newEffects(rdb, prefix)
	sp := newSpoiler(c, "spoiled")
	sp.visibility, sp.wholeCall = visibility, wholeCall
	var logs logBuffer

	ids := []string{"ok-1", "spoiled", "ok-2", "ok-3"}
	var mu sync.Mutex
	attempts := map[string][]time.Time{}
	p := newPoller(t, testenv.RedisGuardOn(t, rdb, prefix, nil), sp, q.url, func(ctx context.Context, m types.Message) error {
		body := aws.ToString(m.Body)
		mu.Lock()
		attempts[body] = append(attempts[body], time.Now())
		n := len(attempts[body])
		mu.Unlock()
		if visibility && body == "spoiled" && n == 1 {
			// Its visibility change (to FailureDelay) is the one spoiled.
			return errors.New("fails once")
		}
		return eff.record(ctx, body)
	}, &sqsonce.PollerConfig{WaitTime: time.Second, VisibilityTimeout: 2 * time.Second, Config: sqsonce.Config{FailureDelay: 20 * time.Second, Logger: slog.New(slog.NewTextHandler(&logs, nil))}})
	sendAll(t, c, q.url, ids)
	stop := startPoller(t, p)
	require.Eventually(t, func() bool { return eff.count() == len(ids) }, s.within(20*time.Second), 50*time.Millisecond)
	requireDrained(t, c, q.url, s.within(20*time.Second))
	require.NoError(t, stop())
	eff.requireOnce(t, ids)

	id, entries := sp.result()
	require.NotEmpty(t, id, "nothing was spoiled")
	st := p.Stats()
	log := logs.String()
	if visibility || wholeCall || s.name == "moto" {
		require.Contains(t, log, id, "the log must name the spoiled message")
	}
	if !visibility {
		require.EqualValues(t, len(ids), st.Ran)
		switch {
		case wholeCall:
			// Every message of the failed call came back as a duplicate.
			require.EqualValues(t, entries, st.DeleteErrors)
			require.EqualValues(t, entries, st.Duplicates)
			require.EqualValues(t, len(ids), st.Deleted)
			require.Contains(t, log, "delete failed; the messages come back as duplicates")
		case s.name == "moto":
			require.EqualValues(t, 1, st.Duplicates, "the undeleted message must come back as a duplicate")
			require.EqualValues(t, 1, st.DeleteErrors)
			require.EqualValues(t, len(ids), st.Deleted)
			require.Contains(t, log, "code=ReceiptHandleIsInvalid")
		default: // fauxqs reports the garbage handle deleted: nothing to log
			require.EqualValues(t, 1, st.Duplicates, "the undeleted message must come back as a duplicate")
			require.Zero(t, st.DeleteErrors)
			require.NotContains(t, log, "delete failed")
			require.EqualValues(t, len(ids)+1, st.Deleted)
		}
		return
	}
	// The failed message was to be hidden for FailureDelay (20 s); the
	// change failed, so it came back when the receive's 2 s lapsed.
	mu.Lock()
	gap := attempts["spoiled"][1].Sub(attempts["spoiled"][0])
	mu.Unlock()
	require.Less(t, gap, s.within(10*time.Second))
	require.EqualValues(t, 1, st.Failed)
	require.EqualValues(t, len(ids), st.Ran)
	require.EqualValues(t, len(ids), st.Deleted)
	require.Zero(t, st.DeleteErrors)
	if wholeCall {
		require.EqualValues(t, entries, st.VisibilityErrors)
	} else {
		require.EqualValues(t, 1, st.VisibilityErrors)
		require.Contains(t, log, "code=ReceiptHandleIsInvalid")
	}
	require.True(t, strings.Contains(log, "visibility change failed"))
}
