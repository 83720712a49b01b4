package dynamostore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
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

// raceWrites sends n conditional writes of one new key at once and returns
// how many succeeded: UpdateItems conditioned on the item's absence or
// expiry, as a claim's, or, with tx, TransactWriteItems each holding such an
// Update and an effect (ADD n 1 on the item key+"-effect").
func raceWrites(t *testing.T, cl *dynamodb.Client, table, key string, n int, tx bool) int {
	t.Helper()
	var ok atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	now := strconv.FormatInt(time.Now().UnixMicro(), 10)
	for i := range n {
		claim := &types.Update{
			TableName:                aws.String(table),
			Key:                      map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: key}},
			ConditionExpression:      aws.String("attribute_not_exists(id) OR #exp < :now"),
			UpdateExpression:         aws.String("SET #exp = :exp, #w = :w"),
			ExpressionAttributeNames: map[string]string{"#exp": "exp", "#w": "writer"},
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":now": &types.AttributeValueMemberN{Value: now}, ":exp": &types.AttributeValueMemberN{Value: now + "0"},
				":w": &types.AttributeValueMemberN{Value: strconv.Itoa(i)},
			},
		}
		wg.Go(func() {
			<-start
			var err error
			if tx {
				_, err = cl.TransactWriteItems(context.Background(), &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
					{Update: claim},
					{Update: &types.Update{
						TableName:                 aws.String(table),
						Key:                       map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: key + "-effect"}},
						UpdateExpression:          aws.String("ADD n :one"),
						ExpressionAttributeValues: map[string]types.AttributeValue{":one": &types.AttributeValueMemberN{Value: "1"}},
					}},
				}})
			} else {
				_, err = cl.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{
					TableName: claim.TableName, Key: claim.Key, ConditionExpression: claim.ConditionExpression,
					UpdateExpression: claim.UpdateExpression, ExpressionAttributeNames: claim.ExpressionAttributeNames,
					ExpressionAttributeValues: claim.ExpressionAttributeValues,
				})
			}
			var failed *types.ConditionalCheckFailedException
			var canceled *types.TransactionCanceledException
			switch {
			case err == nil:
				ok.Add(1)
			case !errors.As(err, &failed) && !errors.As(err, &canceled):
				t.Errorf("write %d of key %s: %v", i, key, err)
			}
		})
	}
	close(start)
	wg.Wait()
	return int(ok.Load())
}

// The server the racing tests rely on: of 32 conditional writes of one key
// sent at once, exactly one succeeds, and of 32 such transactions exactly
// one commits, with its effect alone. (On moto_server, threaded, both
// fail: of 60 rounds of 32 racing transactions, 21 committed more than one,
// and cancelled ones left their effects.)
func TestMotoSerialRunsEachWriteAlone(t *testing.T) {
	srv := motoSerial(t)
	cl := client(srv.endpoint)
	table := effectsTable(t, cl)
	for round := range 10 {
		for _, tx := range []bool{false, true} {
			key := fmt.Sprintf("k%d-%v", round, tx)
			require.Equal(t, 1, raceWrites(t, cl, table, key, 32, tx), "successful writes of %s", key)
			if tx {
				require.Equal(t, 1, effectCount(t, cl, table, key+"-effect"), "effects of %s", key)
			}
		}
	}
}

// Copies of each key run through the transactional mode at once, each
// job's effect a write in its TransactWriteItems: every key's effect
// happens exactly once, and every key ends done. On half of the keys the
// copies race over the lapsed claim of a killed worker. Each key also has a
// zombie copy: it read the key free, then stalled until another copy
// committed; its commit is cancelled whole, its effect not written.
func TestTxGuardRacingCopies(t *testing.T) {
	srv := motoSerial(t)
	ctx := ctxT(t)
	s := newStore(t, srv, &dynamostore.Config{ClockSkew: 20 * time.Millisecond})
	cl := client(srv.endpoint)
	effects := effectsTable(t, cl)
	g, err := core.New(s, &core.Config{KeyPrefix: testenv.RandomID(4) + ":"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Close() })
	tg, err := core.NewTxGuard[*dynamostore.Tx](g)
	require.NoError(t, err)

	// A worker killed an hour ago left claims of a minute's lease: lapsed.
	killed := newStoreOn(t, srv, s.Table())
	dynamostore.SetClock(killed, func() time.Time { return time.Now().Add(-time.Hour) })

	const keys, copies = 16, 8
	type outcome struct {
		out core.Outcome
		err error
	}
	outs := make([][]outcome, keys)
	zombies := make([]outcome, keys)
	var wg sync.WaitGroup
	for k := range keys {
		key := fmt.Sprintf("key-%02d", k)
		if k%2 == 1 {
			stored, err := g.StoredKey(key)
			require.NoError(t, err)
			r, err := killed.Claim(ctx, driver.ClaimRequest{Key: stored, Token: driver.NewToken(), Lease: time.Minute})
			require.NoError(t, err)
			require.Equal(t, driver.StateClaimed, r.State)
		}
		outs[k] = make([]outcome, copies)
		wg.Go(func() {
			read, committed := make(chan struct{}), make(chan struct{})
			var zwg sync.WaitGroup
			zwg.Go(func() {
				out, err := tg.Do(ctx, key, func(ctx context.Context, tx *dynamostore.Tx) error {
					close(read)
					<-committed // stalled while another copy commits
					return addEffect(effects, key)(ctx, tx)
				})
				zombies[k] = outcome{out, err}
			})
			<-read
			var once sync.Once
			var cwg sync.WaitGroup
			for c := range copies {
				cwg.Go(func() {
					out, err := tg.Do(ctx, key, addEffect(effects, key))
					outs[k][c] = outcome{out, err}
					if out == core.Ran {
						once.Do(func() { close(committed) })
					}
				})
			}
			cwg.Wait()
			once.Do(func() { close(committed) }) // no copy committed: the zombie must not hang
			zwg.Wait()
		})
	}
	wg.Wait()

	tally := map[core.Outcome]int{}
	for k := range keys {
		for _, o := range outs[k] {
			tally[o.out]++
		}
	}
	t.Logf("%d copies of %d keys: %d ran, %d duplicates, %d cancelled at commit", keys*copies, keys, tally[core.Ran], tally[core.Duplicate], tally[core.Failed])
	for k := range keys {
		key := fmt.Sprintf("key-%02d", k)
		ran := 0
		for c, o := range outs[k] {
			switch {
			case o.out == core.Ran:
				require.NoError(t, o.err)
				ran++
			case o.out == core.Duplicate:
				require.NoError(t, o.err)
			case o.out == core.Failed:
				require.ErrorContains(t, o.err, "taken by another copy", "%s copy %d", key, c)
			default:
				t.Fatalf("%s copy %d: %s, %v", key, c, o.out, o.err)
			}
		}
		require.Equal(t, 1, ran, "%s: copies that committed", key)
		require.Equal(t, core.Failed, zombies[k].out, "%s: the zombie copy", key)
		require.ErrorContains(t, zombies[k].err, "taken by another copy", key)
		require.Equal(t, 1, effectCount(t, cl, effects, key), "%s: effects", key)
		out, err := tg.Do(ctx, key, addEffect(effects, key))
		require.NoError(t, err)
		require.Equal(t, core.Duplicate, out, "%s is done", key)
	}
}

// newStoreOn returns a second Store on srv's table.
func newStoreOn(t *testing.T, srv server, table string) *dynamostore.Store {
	s, err := dynamostore.New(ctxT(t), client(srv.endpoint), &dynamostore.Config{Table: table, ClockSkew: 20 * time.Millisecond})
	require.NoError(t, err)
	return s
}
