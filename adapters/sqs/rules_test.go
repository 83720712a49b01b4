package sqsonce_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	sqsonce "github.com/jobonce/jobonce/adapters/sqs"
	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/internal/testenv"
)

// Rules gives a message the key DefaultKey gives it, and the Poller's
// delays: a running copy is hidden for the RetryAfter hint, doubled per
// earlier receive; a failure is left to the queue.
func TestRulesShareTheKeysAndDelays(t *testing.T) {
	g := testenv.MemGuard(t, nil)
	for _, url := range []string{"https://sqs.us-east-1.amazonaws.com/1/q", "https://sqs.us-east-1.amazonaws.com/1/q.fifo"} {
		r, err := (*sqsonce.Config)(nil).Rules(g, url)
		require.NoError(t, err)
		m := types.Message{MessageId: aws.String("m-1"), Body: aws.String("hello")}
		job, err := r.Job(context.Background(), m)
		require.NoError(t, err)
		want, err := sqsonce.DefaultKey(url, m)
		require.NoError(t, err)
		require.Equal(t, want, job.Key, url)
	}
	r, err := (&sqsonce.Config{RunningDelay: time.Second}).Rules(g, "https://sqs.us-east-1.amazonaws.com/1/q")
	require.NoError(t, err)
	running := &core.RunningError{RetryAfter: 3 * time.Second}
	deleted, hidden, d := r.Settle(core.Running, running, 2)
	require.False(t, deleted)
	require.True(t, hidden)
	require.Equal(t, 6*time.Second, d)
	deleted, hidden, _ = r.Settle(core.Failed, errors.New("boom"), 1)
	require.False(t, deleted || hidden)
	deleted, _, _ = r.Settle(core.Duplicate, nil, 1)
	require.True(t, deleted)
	_, err = (*sqsonce.Config)(nil).Rules(nil, "https://sqs.us-east-1.amazonaws.com/1/q")
	require.ErrorContains(t, err, "Rules: Guard is nil")
}
