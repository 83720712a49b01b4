package dynamostore_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/dynamostore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// BenchmarkClaimComplete measures a claim and its done marker on dynalite:
// one key per round trip each ("single"), and ten keys per Batch of claims
// and one of markers ("batch10", ns/op per key).
func BenchmarkClaimComplete(b *testing.B) {
	s := newStore(b, dynalite(b), nil)
	ctx := context.Background()
	prefix := testenv.RandomID(4) + ":"
	var seq atomic.Int64 // across the runs of one sub-benchmark: every key is fresh
	b.Run("single", func(b *testing.B) {
		for range b.N {
			key, tok := prefix+"s"+strconv.FormatInt(seq.Add(1), 36), driver.NewToken()
			if _, err := s.Claim(ctx, driver.ClaimRequest{Key: key, Token: tok, Lease: time.Minute}); err != nil {
				b.Fatal(err)
			}
			if err := s.Complete(ctx, driver.CompleteRequest{Key: key, Token: tok, Retention: time.Hour}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("batch10", func(b *testing.B) {
		for i := 0; i < b.N; i += 10 {
			claims := make([]driver.ClaimRequest, min(10, b.N-i))
			completes := make([]driver.CompleteRequest, len(claims))
			for j := range claims {
				key, tok := prefix+"b"+strconv.FormatInt(seq.Add(1), 36), driver.NewToken()
				claims[j] = driver.ClaimRequest{Key: key, Token: tok, Lease: time.Minute}
				completes[j] = driver.CompleteRequest{Key: key, Token: tok, Retention: time.Hour}
			}
			_, errs, _ := s.Batch(ctx, nil, claims)
			_, _, cerrs := s.Batch(ctx, completes, nil)
			for j := range errs {
				if errs[j] != nil || cerrs[j] != nil {
					b.Fatal(errs[j], cerrs[j])
				}
			}
		}
	})
}

// BenchmarkWaitSettle measures how soon a copy that waits for its running
// copy (Job.WaitUntil) settles as a Duplicate once that copy's job (of
// 200ms, of 700ms) ran, on a store without a completion signal: the copy polls. Pairs run
// five at a time; settle-p50-ms and settle-p99-ms run from the first
// copy's Ran to the second's Duplicate (testenv.Settles). Run it with a
// small -benchtime, such as 20x.
func BenchmarkWaitSettle(b *testing.B) {
	s := newStore(b, dynalite(b), &dynamostore.Config{ClockSkew: 20 * time.Millisecond})
	for _, job := range []time.Duration{200 * time.Millisecond, 700 * time.Millisecond} {
		b.Run(job.String(), func(b *testing.B) { benchWaitSettle(b, s, job) })
	}
}

func benchWaitSettle(b *testing.B, s *dynamostore.Store, job time.Duration) {
	var settles testenv.Settles
	g, err := core.New(s, &core.Config{KeyPrefix: testenv.RandomID(4) + ":", Observer: settles.Observe})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i += 5 {
		var wg sync.WaitGroup
		for j := i; j < min(i+5, b.N); j++ {
			key := "settle-" + strconv.Itoa(j)
			started := make(chan struct{})
			wg.Go(func() {
				_, _ = g.Run(ctx, core.Job{Key: key}, func(context.Context) ([]byte, error) {
					close(started)
					time.Sleep(job) // the job
					return nil, nil
				})
			})
			wg.Go(func() {
				<-started
				_, _ = g.Run(ctx, core.Job{Key: key, WaitUntil: time.Now().Add(5 * time.Second), HoldsWorker: true}, func(context.Context) ([]byte, error) {
					return nil, nil
				})
			})
		}
		wg.Wait()
	}
	settles.Wait(b, b.N, time.Minute)
	b.StopTimer()
	settles.Report(b)
}
