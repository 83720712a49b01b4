package groupcommit

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/internal/storecall"

	"github.com/jobonce/jobonce/core/driver"
)

// shapeStore is a BatchStore whose lone claims wait for a gate (so that
// later calls queue and share a round trip) and whose Batch answers with the
// shape shape gives it.
type shapeStore struct {
	gate    chan struct{}
	entered chan struct{}
	shape   func(nc, nr int) ([]driver.ClaimReply, []error, []error)
}

func (s *shapeStore) Claim(ctx context.Context, req driver.ClaimRequest) (driver.ClaimReply, error) {
	if req.Key == "first" {
		s.entered <- struct{}{}
		<-s.gate
	}
	return driver.ClaimReply{State: driver.StateClaimed, Fence: 1}, nil
}
func (s *shapeStore) Extend(context.Context, string, driver.Token, time.Duration) error { return nil }
func (s *shapeStore) Complete(context.Context, driver.CompleteRequest) error            { return nil }
func (s *shapeStore) Release(context.Context, string, driver.Token) error               { return nil }
func (s *shapeStore) Batch(_ context.Context, completes []driver.CompleteRequest, claims []driver.ClaimRequest) ([]driver.ClaimReply, []error, []error) {
	return s.shape(len(completes), len(claims))
}

// A mixed round trip whose store answers with the wrong shape (as many
// answers in all, but split wrongly between claims and markers, or some
// missing) fails every call in it: no claim reads a marker's zero reply,
// and no marker reads a missing error as success.
func TestGroupCommitFailsEveryCallOfAMisshapedBatch(t *testing.T) {
	granted := func(n int) []driver.ClaimReply {
		r := make([]driver.ClaimReply, n)
		for i := range r {
			r[i] = driver.ClaimReply{State: driver.StateClaimed, Fence: 1}
		}
		return r
	}
	shapes := map[string]func(nc, nr int) ([]driver.ClaimReply, []error, []error){
		"one claim reply too many, one marker error too few": func(nc, nr int) ([]driver.ClaimReply, []error, []error) {
			return granted(nr + 1), make([]error, nr+1), make([]error, nc-1)
		},
		"no claim errors": func(nc, nr int) ([]driver.ClaimReply, []error, []error) {
			return granted(nr), nil, make([]error, nc)
		},
		"no marker errors": func(nc, nr int) ([]driver.ClaimReply, []error, []error) {
			return granted(nr), make([]error, nr), nil
		},
		"everything in the claims": func(nc, nr int) ([]driver.ClaimReply, []error, []error) {
			return granted(nr + nc), make([]error, nr+nc), nil
		},
	}
	for name, shape := range shapes {
		t.Run(name, func(t *testing.T) {
			s := &shapeStore{gate: make(chan struct{}), entered: make(chan struct{}, RoundTrips), shape: shape}
			c := ForStore(s, 5*time.Second)
			var wg sync.WaitGroup
			for range RoundTrips { // fill every round trip in flight
				wg.Go(func() {
					_, _ = c.Do(context.Background(), Op{claim: driver.ClaimRequest{Key: "first"}, isClaim: true})
				})
				<-s.entered
			}
			type answer struct {
				claim bool
				reply driver.ClaimReply
				err   error
			}
			answers := make(chan answer, 4)
			for i := range 4 {
				isClaim := i%2 == 0
				op := Op{isClaim: isClaim, claim: driver.ClaimRequest{Key: fmt.Sprint("k", i)},
					complete: driver.CompleteRequest{Key: fmt.Sprint("k", i)}}
				wg.Go(func() {
					r, err := c.Do(context.Background(), op)
					answers <- answer{isClaim, r, err}
				})
			}
			waitQueued(t, c, 4)
			close(s.gate)
			wg.Wait()
			close(answers)
			for a := range answers {
				require.ErrorIs(t, a.err, storecall.ErrBatchReplies, "claim=%v reply=%+v", a.claim, a.reply)
			}
		})
	}
}
