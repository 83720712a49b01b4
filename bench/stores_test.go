package bench

import (
	"context"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/dynamostore"
	"github.com/jobonce/jobonce/core/pgstore"
	"github.com/jobonce/jobonce/core/redisstore"
	"github.com/jobonce/jobonce/internal/pgtest"
	"github.com/jobonce/jobonce/internal/testenv"
)

// BenchmarkStores measures a claim and its done marker on each store, side
// by side: one key per call ("single", Claim then Complete) and ten keys
// per call ("batch10", a Batch of ten claims then one of ten done markers;
// ns/op per key), on Redis, PostgreSQL and DynamoDB (dynalite at
// TEST_DYNAMODB_ENDPOINT, which scripts/test.sh starts).
func BenchmarkStores(b *testing.B) {
	ctx := context.Background()
	prefix := testenv.Prefix(b)
	rs, err := redisstore.New(testenv.Redis(b, prefix), &redisstore.Config{SkipEvictionCheck: true})
	if err != nil {
		b.Fatal(err)
	}
	pool, _ := pgtest.Postgres(b)
	pg, err := pgstore.New(ctx, pool, &pgstore.Config{Migrate: true})
	if err != nil {
		b.Fatal(err)
	}
	stores := []struct {
		name  string
		store driver.BatchStore
	}{{"redis", rs}, {"postgres", pg}, {"dynamodb", dynamoStore(b)}}
	var seq atomic.Int64 // every key is fresh
	next := func() string { return prefix + strconv.FormatInt(seq.Add(1), 36) }
	for _, st := range stores {
		b.Run("store="+st.name+"/single", func(b *testing.B) {
			for b.Loop() {
				key, tok := next(), driver.NewToken()
				if _, err := st.store.Claim(ctx, driver.ClaimRequest{Key: key, Token: tok, Lease: time.Minute}); err != nil {
					b.Fatal(err)
				}
				if err := st.store.Complete(ctx, driver.CompleteRequest{Key: key, Token: tok, Retention: time.Minute}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("store="+st.name+"/batch10", func(b *testing.B) {
			for i := 0; i < b.N; i += 10 {
				claims := make([]driver.ClaimRequest, min(10, b.N-i))
				completes := make([]driver.CompleteRequest, len(claims))
				for j := range claims {
					key, tok := next(), driver.NewToken()
					claims[j] = driver.ClaimRequest{Key: key, Token: tok, Lease: time.Minute}
					completes[j] = driver.CompleteRequest{Key: key, Token: tok, Retention: time.Minute}
				}
				_, errs, _ := st.store.Batch(ctx, nil, claims)
				_, _, cerrs := st.store.Batch(ctx, completes, nil)
				for j := range errs {
					if errs[j] != nil || cerrs[j] != nil {
						b.Fatal(errs[j], cerrs[j])
					}
				}
			}
		})
	}
}

// dynamoStore returns a Store on a table of its own on the test DynamoDB
// server, deleted at the end.
func dynamoStore(b *testing.B) *dynamostore.Store {
	ep := os.Getenv("TEST_DYNAMODB_ENDPOINT")
	if ep == "" {
		b.Fatal("TEST_DYNAMODB_ENDPOINT is not set: run through scripts/test.sh's servers, or start scripts/dynalite/server.mjs")
	}
	client := dynamodb.New(dynamodb.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(ep),
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		HTTPClient:   &http.Client{Timeout: 10 * time.Second},
	})
	table := "jobonce_bench_" + testenv.RandomID(6)
	s, err := dynamostore.New(context.Background(), client, &dynamostore.Config{Table: table, CreateTable: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_, _ = client.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(table)})
	})
	return s
}
