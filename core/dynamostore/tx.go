package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/jobonce/jobonce/core/driver"
)

// maxTxItems is the most writes one TransactWriteItems takes.
const maxTxItems = 100

// Tx is a transaction of the transactional mode
// (core.NewTxGuard[*dynamostore.Tx]). The job's function adds its writes
// with Add. The TxGuard commits them with the key's done marker in one
// TransactWriteItems, so they happen together, once, or not at all.
type Tx struct {
	mu        sync.Mutex
	items     []types.TransactWriteItem
	marker    int // index of the done marker in items, -1 before RecordTx
	key       string
	token     driver.Token // the done marker's writer
	request   string       // ClientRequestToken: a commit sent again is applied once
	committed bool
}

// Add adds writes (Put, Update, Delete or ConditionCheck) to the
// transaction, on any table of the Store's account and region. A
// transaction holds at most 100 writes, the done marker's included; Add
// returns an error past that, and after the commit. DynamoDB refuses a
// transaction with two writes of one item.
func (tx *Tx) Add(items ...types.TransactWriteItem) error {
	tx.mu.Lock()
	defer tx.mu.Unlock()
	if tx.committed {
		return errors.New("jobonce: dynamostore: Tx.Add after the commit")
	}
	if n := len(tx.items) + len(items); n > maxTxItems-1 {
		return fmt.Errorf("jobonce: dynamostore: Tx.Add: %d writes and the done marker exceed DynamoDB's %d writes per transaction", n, maxTxItems)
	}
	tx.items = append(tx.items, items...)
	return nil
}

var _ driver.TxStore[*Tx] = (*Store)(nil)

// BeginTx implements driver.TxStore. It returns an empty transaction and
// sends nothing.
func (s *Store) BeginTx(ctx context.Context) (*Tx, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("jobonce: dynamostore: transaction not begun: %w", err)
	}
	return &Tx{marker: -1, token: driver.NewToken(), request: driver.NewToken().String()}, nil
}

// RecordTx implements driver.TxStore. It reads the key's item with a
// strongly consistent read. When the key is free, it adds to tx a done
// marker conditioned on the item as read, so the commit fails whole if
// another copy took the key meanwhile. A key done or held by a live claim
// is reported as such, and tx is left as it was.
func (s *Store) RecordTx(ctx context.Context, tx *Tx, req driver.RecordRequest) (driver.ClaimReply, error) {
	if err := checkDuration("RecordRequest.Retention", req.Retention); err != nil {
		return driver.ClaimReply{}, err
	}
	if err := checkKey(req.Key); err != nil {
		return driver.ClaimReply{}, err
	}
	if err := ctx.Err(); err != nil {
		return driver.ClaimReply{}, fmt.Errorf("jobonce: dynamostore: record not read: %w", err)
	}
	tx.mu.Lock()
	defer tx.mu.Unlock()
	if tx.marker >= 0 {
		return driver.ClaimReply{}, fmt.Errorf("jobonce: dynamostore: RecordTx: the transaction already records key %q", tx.key)
	}
	old, err := s.read(ctx, req.Key)
	if err != nil {
		return driver.ClaimReply{}, err
	}
	now := micros(s.now())
	if reply, held := s.judge(&old, tx.token, now); held {
		return reply, nil
	}
	fence := now
	values := map[string]types.AttributeValue{
		":d": str(stateDone), ":tok": bin(tx.token[:]), ":lapse": num(now - s.cfg.ClockSkew.Microseconds()),
	}
	cond := "attribute_not_exists(#k)"
	if old.exists {
		fence = max(now, old.fence+1)
		values[":prev"] = num(old.fence)
		cond = "#exp < :lapse AND #fence = :prev"
	}
	exp := plus(now, req.Retention)
	values[":exp"], values[":fence"], values[":ttl"] = num(exp), num(fence), num(s.ttlOf(exp))
	upd := "SET #st = :d, #tok = :tok, #exp = :exp, #fence = :fence, #ttl = :ttl"
	if req.Fingerprint != "" {
		upd += ", #fp = :fp"
		values[":fp"] = bin([]byte(req.Fingerprint))
		upd += " REMOVE #res"
	} else {
		upd += " REMOVE #res, #fp"
	}
	tx.marker, tx.key = len(tx.items), req.Key
	tx.items = append(tx.items, types.TransactWriteItem{Update: &types.Update{
		TableName:                           s.table,
		Key:                                 keyOf(req.Key),
		ConditionExpression:                 aws.String(cond),
		UpdateExpression:                    aws.String(upd),
		ExpressionAttributeNames:            namesOf(cond, upd),
		ExpressionAttributeValues:           values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}})
	return driver.ClaimReply{State: driver.StateClaimed, Fence: fence}, nil
}

// CommitTx implements driver.TxStore: one TransactWriteItems with the done
// marker and the job's writes. It carries a ClientRequestToken, so a commit
// sent again after a lost answer is applied once. A commit cancelled for a
// conflict or throttling is sent again within ctx. When the answer is still
// lost, the key's item tells whether the transaction committed.
func (s *Store) CommitTx(ctx context.Context, tx *Tx) error {
	tx.mu.Lock()
	defer tx.mu.Unlock()
	if tx.committed {
		return nil
	}
	if len(tx.items) == 0 {
		tx.committed = true
		return nil
	}
	in := &dynamodb.TransactWriteItemsInput{TransactItems: tx.items, ClientRequestToken: aws.String(tx.request)}
	err := retryThrottled(ctx, func() error {
		_, err := s.client.TransactWriteItems(ctx, in, noSDKRetry)
		if err != nil && txRetryable(err) {
			return &retryableAnswer{err}
		}
		return err
	})
	var ra *retryableAnswer
	if errors.As(err, &ra) {
		err = ra.err
	}
	if err == nil {
		tx.committed = true
		return nil
	}
	if tx.marker >= 0 {
		var canceled *types.TransactionCanceledException
		if errors.As(err, &canceled) && len(canceled.CancellationReasons) > tx.marker {
			r := canceled.CancellationReasons[tx.marker]
			if aws.ToString(r.Code) == "ConditionalCheckFailed" {
				if it, perr := parseItem(r.Item); perr == nil && it.state == stateDone && it.token == tx.token {
					tx.committed = true // sent before, its answer lost
					return nil
				}
				return fmt.Errorf("jobonce: dynamostore: commit cancelled: key %q was taken by another copy after it was read; nothing was written: %w", tx.key, err)
			}
		}
		if i, code := jobWriteFailed(err, tx.marker); i >= 0 {
			n := i // counted among the job's writes, from 0
			if i > tx.marker {
				n--
			}
			return fmt.Errorf("jobonce: dynamostore: commit cancelled: the job's write %d (on table %q) failed: %s; nothing was written: %w",
				n, tableOf(tx.items[i]), code, err)
		}
		if ctx.Err() == nil && apiCode(err) != "TransactionCanceledException" && apiCode(err) != "ValidationException" {
			// The answer may be lost: the key's item tells.
			if it, rerr := s.read(ctx, tx.key); rerr == nil && it.state == stateDone && it.token == tx.token {
				tx.committed = true
				return nil
			}
		}
	}
	return s.fail(ctx, "TransactWriteItems", err)
}

// jobWriteFailed returns the index and code of the first of the job's
// writes (all but the done marker at index marker) that cancelled a
// transaction, or -1.
func jobWriteFailed(err error, marker int) (int, string) {
	var canceled *types.TransactionCanceledException
	if !errors.As(err, &canceled) {
		return -1, ""
	}
	for i, r := range canceled.CancellationReasons {
		if code := aws.ToString(r.Code); i != marker && code != "" && code != "None" {
			return i, code
		}
	}
	return -1, ""
}

// tableOf returns the table a transaction's write names.
func tableOf(it types.TransactWriteItem) string {
	switch {
	case it.Put != nil:
		return aws.ToString(it.Put.TableName)
	case it.Update != nil:
		return aws.ToString(it.Update.TableName)
	case it.Delete != nil:
		return aws.ToString(it.Delete.TableName)
	case it.ConditionCheck != nil:
		return aws.ToString(it.ConditionCheck.TableName)
	}
	return ""
}

// txRetryable reports whether a commit was cancelled only for conflicts
// with other transactions or throttling, so that sending it again may
// succeed.
func txRetryable(err error) bool {
	var canceled *types.TransactionCanceledException
	if !errors.As(err, &canceled) {
		return false
	}
	again := false
	for _, r := range canceled.CancellationReasons {
		switch aws.ToString(r.Code) {
		case "", "None":
		case "TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded", "RequestLimitExceeded":
			again = true
		default:
			return false
		}
	}
	return again || strings.Contains(err.Error(), "TransactionConflict")
}

// retryableAnswer marks an error retryThrottled sends again.
type retryableAnswer struct{ err error }

func (r *retryableAnswer) Error() string { return r.err.Error() }
func (r *retryableAnswer) Unwrap() error { return r.err }

// RollbackTx implements driver.TxStore. A transaction not committed sent
// nothing, so there is nothing to undo.
func (s *Store) RollbackTx(ctx context.Context, tx *Tx) error {
	return nil
}
