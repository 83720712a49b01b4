package dynamostore_test

import (
	"context"
	"errors"
	"fmt"
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

// effectsTable creates a table of effects (partition key "id", a string)
// on srv and returns its name.
func effectsTable(t *testing.T, cl *dynamodb.Client) string {
	name := "jobonce_effects_" + testenv.RandomID(6)
	_, err := cl.CreateTable(ctxT(t), &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = cl.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(name)})
	})
	return name
}

// addEffect returns a job function that adds one to the counter of id in
// table, in the job's transaction.
func addEffect(table, id string) func(context.Context, *dynamostore.Tx) error {
	return func(_ context.Context, tx *dynamostore.Tx) error {
		return tx.Add(types.TransactWriteItem{Update: &types.Update{
			TableName:                 aws.String(table),
			Key:                       map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: id}},
			UpdateExpression:          aws.String("ADD n :one"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":one": &types.AttributeValueMemberN{Value: "1"}},
		}})
	}
}

func effectCount(t *testing.T, cl *dynamodb.Client, table, id string) int {
	out, err := cl.GetItem(ctxT(t), &dynamodb.GetItemInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: id}}})
	require.NoError(t, err)
	n, ok := out.Item["n"].(*types.AttributeValueMemberN)
	if !ok {
		return 0
	}
	switch n.Value {
	case "1":
		return 1
	case "2":
		return 2
	}
	return 99
}

// TestTxGuard runs the transactional mode on moto (dynalite has no
// transactions): a job's DynamoDB write commits with its done marker in one
// TransactWriteItems, so it happens once; a failed job writes nothing; a
// copy whose key another copy recorded after it read it commits nothing; a
// key run by the Guard is a duplicate for the TxGuard. (Copies are raced in
// TestTxGuardRacingCopies, on moto serving one request at a time: threaded,
// moto's conditional writes are not atomic.)
func TestTxGuard(t *testing.T) {
	srv := moto(t)
	ctx := ctxT(t)
	s := newStore(t, srv, &dynamostore.Config{ClockSkew: 20 * time.Millisecond})
	cl := client(srv.endpoint)
	effects := effectsTable(t, cl)
	g, err := core.New(s, &core.Config{KeyPrefix: testenv.RandomID(4) + ":"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Close() })
	tg, err := core.NewTxGuard[*dynamostore.Tx](g)
	require.NoError(t, err)

	for _, want := range []core.Outcome{core.Ran, core.Duplicate} {
		out, err := tg.Do(ctx, "once", addEffect(effects, "once"))
		require.NoError(t, err)
		require.Equal(t, want, out)
	}
	require.Equal(t, 1, effectCount(t, cl, effects, "once"))

	boom := errors.New("boom")
	out, err := tg.Do(ctx, "fails", func(ctx context.Context, tx *dynamostore.Tx) error {
		require.NoError(t, addEffect(effects, "fails")(ctx, tx))
		return boom
	})
	require.ErrorIs(t, err, boom)
	require.Equal(t, core.Failed, out)
	require.Equal(t, 0, effectCount(t, cl, effects, "fails"), "a failed job writes nothing")
	out, err = tg.Do(ctx, "fails", addEffect(effects, "fails"))
	require.NoError(t, err)
	require.Equal(t, core.Ran, out, "and its key is free")

	// A copy that read the key free and commits after another copy did is
	// cancelled whole: its effect is not written either.
	key, err := g.StoredKey("stale")
	require.NoError(t, err)
	stale, err := s.BeginTx(ctx)
	require.NoError(t, err)
	r, err := s.RecordTx(ctx, stale, driver.RecordRequest{Key: key, Retention: time.Hour})
	require.NoError(t, err)
	require.Equal(t, driver.StateClaimed, r.State)
	require.NoError(t, addEffect(effects, "stale")(ctx, stale))
	out, err = tg.Do(ctx, "stale", addEffect(effects, "stale"))
	require.NoError(t, err)
	require.Equal(t, core.Ran, out)
	err = s.CommitTx(ctx, stale)
	require.ErrorContains(t, err, "taken by another copy")
	require.Equal(t, 1, effectCount(t, cl, effects, "stale"), "the stale copy's effect is not written")

	_, err = g.Do(ctx, "guarded", func(context.Context) error { return nil })
	require.NoError(t, err)
	out, err = tg.Do(ctx, "guarded", addEffect(effects, "guarded"))
	require.NoError(t, err)
	require.Equal(t, core.Duplicate, out, "a key the Guard ran")
	require.Equal(t, 0, effectCount(t, cl, effects, "guarded"))

	// A job's own write whose condition fails cancels the commit, and the
	// error names that write, not the keys table.
	out, err = tg.Do(ctx, "checked", func(ctx context.Context, tx *dynamostore.Tx) error {
		require.NoError(t, addEffect(effects, "checked")(ctx, tx))
		return tx.Add(types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{
			TableName:           aws.String(effects),
			Key:                 map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "absent"}},
			ConditionExpression: aws.String("attribute_exists(id)"),
		}})
	})
	require.Equal(t, core.Failed, out)
	require.ErrorContains(t, err, fmt.Sprintf("the job's write 1 (on table %q) failed: ConditionalCheckFailed", effects))
	require.Equal(t, 0, effectCount(t, cl, effects, "checked"), "a cancelled commit writes nothing")

	tooMany := make([]types.TransactWriteItem, 100)
	out, err = tg.Do(ctx, "too-many", func(_ context.Context, tx *dynamostore.Tx) error { return tx.Add(tooMany...) })
	require.Equal(t, core.Failed, out)
	require.ErrorContains(t, err, "100 writes per transaction")
}
