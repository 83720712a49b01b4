package dynamostore_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/require"

	"github.com/jobonce/jobonce/core"
	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/dynamostore"
	"github.com/jobonce/jobonce/internal/testenv"
)

// TestBadInput: a missing table, a table with another key schema, a done
// marker over 400 KB and a Guard whose MaxResultSize does not fit an item
// each give an error that names what is wrong, on every server.
func TestBadInput(t *testing.T) {
	testenv.Short(t)
	for _, srv := range servers(t) {
		t.Run(srv.name, func(t *testing.T) {
			ctx := ctxT(t)
			cl := client(srv.endpoint)

			_, err := dynamostore.New(ctx, cl, &dynamostore.Config{Table: tableName(t)})
			require.ErrorIs(t, err, dynamostore.ErrTableMissing)
			require.Contains(t, err.Error(), "Config.CreateTable")

			for name, schema := range map[string]struct {
				attrs []types.AttributeDefinition
				keys  []types.KeySchemaElement
			}{
				"string key": {
					[]types.AttributeDefinition{{AttributeName: aws.String("k"), AttributeType: types.ScalarAttributeTypeS}},
					[]types.KeySchemaElement{{AttributeName: aws.String("k"), KeyType: types.KeyTypeHash}},
				},
				"other name": {
					[]types.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeB}},
					[]types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}},
				},
				"sort key": {
					[]types.AttributeDefinition{{AttributeName: aws.String("k"), AttributeType: types.ScalarAttributeTypeB}, {AttributeName: aws.String("sk"), AttributeType: types.ScalarAttributeTypeS}},
					[]types.KeySchemaElement{{AttributeName: aws.String("k"), KeyType: types.KeyTypeHash}, {AttributeName: aws.String("sk"), KeyType: types.KeyTypeRange}},
				},
			} {
				table := tableName(t)
				_, err := cl.CreateTable(ctx, &dynamodb.CreateTableInput{TableName: aws.String(table), AttributeDefinitions: schema.attrs,
					KeySchema: schema.keys, BillingMode: types.BillingModePayPerRequest})
				require.NoError(t, err, name)
				t.Cleanup(func() {
					_, _ = cl.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(table)})
				})
				for _, create := range []bool{false, true} {
					_, err = dynamostore.New(ctx, cl, &dynamostore.Config{Table: table, CreateTable: create})
					require.ErrorIs(t, err, dynamostore.ErrKeySchema, name)
					require.Contains(t, err.Error(), `partition key "k" of type B`, name)
				}
			}

			s := newStore(t, srv, nil)
			key, tok := "too-large", driver.NewToken()
			r, err := s.Claim(ctx, driver.ClaimRequest{Key: key, Token: tok, Lease: time.Minute})
			require.NoError(t, err)
			require.Equal(t, driver.StateClaimed, r.State)
			err = s.Complete(ctx, driver.CompleteRequest{Key: key, Token: tok, Result: make([]byte, 400*1024), Retention: time.Minute})
			require.ErrorIs(t, err, dynamostore.ErrItemTooLarge)
			require.Contains(t, err.Error(), "result of 409600 bytes")
			big := make([]byte, dynamostore.MaxResultSize)
			require.NoError(t, s.Complete(ctx, driver.CompleteRequest{Key: key, Token: tok, Fingerprint: strings.Repeat("f", 64), Result: big, Retention: time.Minute}),
				"a result of MaxResultSize fits an item")
			r, err = s.Claim(ctx, driver.ClaimRequest{Key: key, Token: driver.NewToken(), Lease: time.Minute})
			require.NoError(t, err)
			require.Equal(t, driver.StateDone, r.State)
			require.Len(t, r.Result, dynamostore.MaxResultSize)

			_, err = s.Claim(ctx, driver.ClaimRequest{Key: strings.Repeat("k", 2049), Token: tok, Lease: time.Minute})
			require.ErrorContains(t, err, "2048-byte partition key")

			_, err = cl.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(s.Table())})
			require.NoError(t, err)
			require.Eventually(t, func() bool {
				_, err := s.Claim(ctx, driver.ClaimRequest{Key: "gone", Token: tok, Lease: time.Minute})
				return err != nil
			}, 10*time.Second, 10*time.Millisecond)
			_, err = s.Claim(ctx, driver.ClaimRequest{Key: "gone", Token: tok, Lease: time.Minute})
			require.ErrorIs(t, err, dynamostore.ErrTableMissing)
			require.ErrorIs(t, s.Ready(ctx), dynamostore.ErrTableMissing)
		})
	}
}

// TestAccessDenied: credentials without a permission give an error
// matching ErrAccessDenied that names the action. Neither test server
// checks permissions, so a server that answers as DynamoDB does without
// them stands in.
func TestAccessDenied(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.WriteHeader(http.StatusBadRequest)
		action := strings.TrimPrefix(r.Header.Get("X-Amz-Target"), "DynamoDB_20120810.")
		_, _ = io.WriteString(w, `{"__type":"com.amazon.coral.service#AccessDeniedException","message":"User: arn:aws:iam::123456789012:user/app is not authorized to perform: dynamodb:`+action+` on resource: arn:aws:dynamodb:us-east-1:123456789012:table/jobonce_keys"}`)
	}))
	t.Cleanup(srv.Close)
	_, err := dynamostore.New(context.Background(), client(srv.URL), nil)
	require.ErrorIs(t, err, dynamostore.ErrAccessDenied)
	require.ErrorContains(t, err, "dynamodb:DescribeTable")
	_, err = dynamostore.New(context.Background(), client(srv.URL), &dynamostore.Config{CreateTable: true})
	require.ErrorIs(t, err, dynamostore.ErrAccessDenied)
	require.ErrorContains(t, err, "dynamodb:CreateTable")
}

// TestGuardRefusesALargerMaxResultSize: a Guard whose MaxResultSize does
// not fit a DynamoDB item is refused at New, naming both sizes.
func TestGuardRefusesALargerMaxResultSize(t *testing.T) {
	testenv.Short(t)
	s := newStore(t, dynalite(t), nil)
	_, err := core.New(s, &core.Config{MaxResultSize: dynamostore.MaxResultSize + 1})
	require.ErrorContains(t, err, "MaxResultSize")
	g, err := core.New(s, &core.Config{MaxResultSize: dynamostore.MaxResultSize})
	require.NoError(t, err)
	require.NoError(t, g.Close())
}
