package lambdaonce_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	lambdaonce "github.com/jobonce/jobonce/adapters/lambda"
	sqsonce "github.com/jobonce/jobonce/adapters/sqs"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/memstore"
	"github.com/jobonce/jobonce/internal/stall"
	"github.com/jobonce/jobonce/internal/testenv"
)

// lateMarkers is a store whose done markers are answered only after
// release is closed.
type lateMarkers struct {
	*memstore.Store
	release chan struct{}
}

func (s *lateMarkers) Complete(ctx context.Context, req driver.CompleteRequest) error {
	<-s.release
	return s.Store.Complete(ctx, req)
}

// A store that writes no done marker before the invocation's deadline does
// not hold the response past it: the handler answers half of Config.Margin
// before the deadline, and the record whose job ran is Unrecorded, deleted
// rather than listed, so the job does not run again.
func TestMarkersEndBeforeTheInvocationsDeadline(t *testing.T) {
	t.Parallel()
	c := newSQS(t)
	q := createQueue(t, c, 30, false)
	sendAll(t, c, q, []string{"quick"}, nil)
	ev := receiveN(t, c, q, 1)

	store := &lateMarkers{Store: memstore.New(), release: make(chan struct{})}
	g := testenv.NewGuard(t, store, &core.Config{StoreTimeout: time.Minute})
	t.Cleanup(func() { close(store.release) }) // before the Guard closes
	probe := stall.Bound(t)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var ran atomic.Int32
	h := mustWrap(t, g, func(context.Context, events.SQSMessage) error { ran.Add(1); return nil },
		&lambdaonce.Config{Margin: time.Second})
	resp, err := h(ctx, ev)
	probe.RequireWithin(t, start, 3*time.Second-500*time.Millisecond+200*time.Millisecond,
		"the handler answered past half of Config.Margin before the deadline")
	require.NoError(t, err)
	require.EqualValues(t, 1, ran.Load())
	require.Empty(t, failed(resp), "the job ran: its record is deleted")
}

// An invocation with no more time left than Config.Margin runs nothing and
// says why: every record comes back.
func TestInvocationWithinTheMarginRunsNothing(t *testing.T) {
	t.Parallel()
	c := newSQS(t)
	q := createQueue(t, c, 30, false)
	sendAll(t, c, q, []string{"late"}, nil)
	ev := receiveN(t, c, q, 1)

	var ran atomic.Bool
	h := mustWrap(t, testenv.MemGuard(t, nil), func(context.Context, events.SQSMessage) error { ran.Store(true); return nil }, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err := h(ctx, ev)
	require.ErrorContains(t, err, "no more than Config.Margin (2s): no record was run")
	require.False(t, ran.Load())
}

// On a FIFO queue, a record left unrun because it has no key (its Key
// panicked) holds back the records after it in its group, as a failed one
// does: they are listed unrun. The records before it, and another group,
// run.
func TestFIFOGroupStopsAtARecordWithoutKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		keyless     string
		listed, ran []string
	}{
		{"a1", []string{"a1", "a2"}, []string{"b1"}},
		{"a2", []string{"a2"}, []string{"a1", "b1"}},
	} {
		t.Run(tc.keyless, func(t *testing.T) {
			t.Parallel()
			c := newSQS(t)
			q := createQueue(t, c, 30, true)
			bodies := []string{"a1", "a2", "b1"}
			sendAll(t, c, q, bodies, func(b string) string { return b })
			ev := receiveN(t, c, q, len(bodies))
			slices.SortFunc(ev.Records, func(x, y events.SQSMessage) int {
				return strings.Compare(x.Attributes["SequenceNumber"], y.Attributes["SequenceNumber"])
			})
			for i := range ev.Records {
				ev.Records[i].Attributes["MessageGroupId"] = ev.Records[i].Body[:1]
			}

			var mu sync.Mutex
			var ran []string
			h := mustWrap(t, testenv.MemGuard(t, nil), func(_ context.Context, m events.SQSMessage) error {
				mu.Lock()
				defer mu.Unlock()
				ran = append(ran, m.Body)
				return nil
			}, &lambdaonce.Config{SQS: sqsonce.Config{Key: func(m types.Message) string {
				if aws.ToString(m.Body) == tc.keyless {
					panic("no key for " + tc.keyless)
				}
				return aws.ToString(m.MessageId)
			}}})
			resp, err := h(context.Background(), ev)
			require.NoError(t, err)
			require.ElementsMatch(t, idsOf(ev, tc.listed...), failed(resp))
			mu.Lock()
			defer mu.Unlock()
			require.ElementsMatch(t, tc.ran, ran)
		})
	}
}
