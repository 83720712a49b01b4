package redisstore_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/memstore"
	"github.com/jobonce/jobonce/internal/batchcall"
	"github.com/jobonce/jobonce/internal/testenv"
)

// BenchmarkDoneMarkerMemory writes one million done markers (each as a claim
// then a complete) and reports Redis memory per marker from the INFO memory
// delta: without a fingerprint, as the adapters' default keys (which hold the
// payload's hash) store them, and with a 128-bit one, as a custom key with
// a fingerprint does. Run it alone, once:
//
//	go test -run '^$' -bench DoneMarkerMemory -benchtime 1x ./core/redisstore
func BenchmarkDoneMarkerMemory(b *testing.B) {
	b.Run("default-key", func(b *testing.B) { doneMarkerMemory(b, "") })
	b.Run("fingerprint", func(b *testing.B) { doneMarkerMemory(b, core.Fingerprint([]byte(`{"user":42}`))) })
}

func doneMarkerMemory(b *testing.B, fp string) {
	const markers = 1_000_000
	client := testenv.Redis(b, "")
	run := testenv.RandomID(4)
	store := newStore(b, client)
	ctx := context.Background()
	keyer, err := core.New(memstore.New(), nil) // derives the stored keys a Guard uses by default
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		var keys []string
		before := usedMemory(b, client)
		const batch = 1000
		claims := make([]driver.ClaimRequest, batch)
		completes := make([]driver.CompleteRequest, batch)
		for n := 0; n < markers; n += batch {
			for i := range batch {
				key, err := keyer.StoredKey("email:welcome:user-" + run + "-" + strconv.Itoa(n+i))
				if err != nil {
					b.Fatal(err)
				}
				keys = append(keys, key)
				tok := driver.NewToken()
				claims[i] = driver.ClaimRequest{Key: key, Token: tok, Fingerprint: fp, Lease: time.Minute}
				completes[i] = driver.CompleteRequest{Key: key, Token: tok, Fingerprint: fp, Retention: time.Hour}
			}
			if _, errs := batchcall.Claims(ctx, store, claims); errs[0] != nil {
				b.Fatal(errs[0])
			}
			if errs := batchcall.Completes(ctx, store, completes); errs[0] != nil {
				b.Fatal(errs[0])
			}
		}
		after := usedMemory(b, client)
		b.ReportMetric(float64(after-before)/markers, "B/marker")
		b.ReportMetric(float64(len(completes[0].Key)), "key-bytes")
		for len(keys) > 0 {
			n := min(len(keys), 1000)
			client.Del(ctx, keys[:n]...)
			keys = keys[n:]
		}
	}
}

func usedMemory(b *testing.B, client *redis.Client) int64 {
	info, err := client.Info(context.Background(), "memory").Result()
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatal(fmt.Sprintf("no used_memory in INFO: %q", info))
	return 0
}
