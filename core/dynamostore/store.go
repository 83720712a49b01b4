package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/jobonce/jobonce/core/driver"
)

// The item's attributes. Times are microseconds since the Unix epoch by
// the writer's clock, except ttl (seconds, for DynamoDB's time to live).
const (
	attrKey    = "k"     // B: the stored key (partition key)
	attrState  = "st"    // S: stateClaimed, stateDone or stateFree
	attrToken  = "tok"   // B: the claim's token; a done marker's writer
	attrExp    = "exp"   // N: end of the lease or retention
	attrFence  = "fence" // N: the key's latest fence
	attrFP     = "fp"    // B: the fingerprint, absent when empty
	attrResult = "res"   // B: 0x01 then the result, absent when nil
	attrTTL    = "ttl"   // N: when DynamoDB may delete the item
)

const (
	stateClaimed = "c"
	stateDone    = "d"
	stateFree    = "f"
)

// maxItemSize is DynamoDB's item limit: attribute names and values together.
const maxItemSize = 400 * 1024

// maxKeySize is DynamoDB's limit on a binary partition key.
const maxKeySize = 2048

// MaxResultSize is the largest result a core.Guard stores with a done
// marker of this Store: 256 KiB, which leaves room in DynamoDB's 400 KB
// item for the rest. core.New refuses a larger Config.MaxResultSize.
const MaxResultSize = 256 << 10

// Store keeps jobonce claims and done markers in a DynamoDB table, one item
// per key. It implements driver.Store, driver.BatchStore, driver.ReadyStore
// and driver.TxStore (for core.TxGuard). It is safe for concurrent use.
type Store struct {
	client *dynamodb.Client
	cfg    Config
	table  *string
	now    func() time.Time // the writer's clock
}

var (
	_ driver.BatchStore = (*Store)(nil)
	_ driver.ReadyStore = (*Store)(nil)
)

// New returns a Store on the table cfg.Table. cfg may be nil for the
// defaults. With Config.CreateTable, it creates a missing table first. New
// reads the table's description. A missing table gives an error matching
// ErrTableMissing, and another key schema ErrKeySchema. Credentials without
// dynamodb:DescribeTable give ErrAccessDenied. An invalid Config field, or
// a nil client, gives an error naming it.
func New(ctx context.Context, client *dynamodb.Client, cfg *Config) (*Store, error) {
	if client == nil {
		return nil, errors.New("jobonce: dynamostore: New: client is nil")
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Store{client: client, cfg: c, table: aws.String(c.Table), now: time.Now}
	if c.CreateTable {
		if err := s.createTable(ctx); err != nil {
			return nil, err
		}
	}
	if err := s.checkTable(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// MaxResultSize returns the package's MaxResultSize, the largest result a
// done marker holds.
func (s *Store) MaxResultSize() int { return MaxResultSize }

// Ready implements driver.ReadyStore, for core.Guard.Ready. Within ctx, it
// reads one item of the table (half a read unit). A table deleted since
// New gives an error matching ErrTableMissing.
func (s *Store) Ready(ctx context.Context) error {
	_, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:                s.table,
		Key:                      map[string]types.AttributeValue{attrKey: &types.AttributeValueMemberB{Value: []byte{0}}},
		ProjectionExpression:     aws.String("#k"),
		ExpressionAttributeNames: map[string]string{"#k": attrKey},
	}, noSDKRetry)
	return s.fail(ctx, "GetItem", err)
}

// checkDuration rejects a lease or retention under 1ms with an error naming
// field, as every jobonce store does.
func checkDuration(field string, d time.Duration) error {
	if d < time.Millisecond {
		return fmt.Errorf("jobonce: dynamostore: %s must be at least 1ms, got %s", field, d)
	}
	return nil
}

func checkKey(key string) error {
	if key == "" {
		return errors.New("jobonce: dynamostore: the key is empty")
	}
	if len(key) > maxKeySize {
		return fmt.Errorf("jobonce: dynamostore: key of %d bytes is longer than DynamoDB's %d-byte partition key (a core.Guard stores long keys hashed)", len(key), maxKeySize)
	}
	return nil
}

// micros returns t in microseconds since the Unix epoch.
func micros(t time.Time) int64 { return t.UnixMicro() }

// plus returns us + d in microseconds, saturating.
func plus(us int64, d time.Duration) int64 {
	add := int64(d / time.Microsecond)
	if us > 0 && add > math.MaxInt64-us {
		return math.MaxInt64
	}
	return us + add
}

// fromMicros converts a span in microseconds to a Duration, saturating at
// the longest Duration and at zero.
func fromMicros(us int64) time.Duration {
	const most = int64(time.Duration(math.MaxInt64) / time.Microsecond)
	return time.Duration(min(max(us, 0), most)) * time.Microsecond
}

// ttlOf returns the time to live, in seconds, of an item whose lease or
// retention ends at exp (microseconds): FenceKeep and ClockSkew later.
func (s *Store) ttlOf(exp int64) int64 {
	return plus(exp, s.cfg.FenceKeep+s.cfg.ClockSkew)/1e6 + 1
}

func num(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

func bin(b []byte) types.AttributeValue { return &types.AttributeValueMemberB{Value: b} }

func str(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }

// item is a key's item as read back.
type item struct {
	exists bool
	state  string
	token  driver.Token
	exp    int64
	fence  int64
	fp     []byte
	result []byte
}

func parseItem(m map[string]types.AttributeValue) (item, error) {
	var it item
	if len(m) == 0 {
		return it, nil
	}
	it.exists = true
	for name, v := range m {
		var err error
		switch name {
		case attrState:
			if sv, ok := v.(*types.AttributeValueMemberS); ok {
				it.state = sv.Value
			}
		case attrToken:
			if b, ok := v.(*types.AttributeValueMemberB); ok && len(b.Value) == len(it.token) {
				copy(it.token[:], b.Value)
			}
		case attrExp:
			it.exp, err = parseNum(name, v)
		case attrFence:
			it.fence, err = parseNum(name, v)
		case attrFP:
			if b, ok := v.(*types.AttributeValueMemberB); ok {
				it.fp = b.Value
			}
		case attrResult:
			if b, ok := v.(*types.AttributeValueMemberB); ok && len(b.Value) > 0 {
				it.result = b.Value[1:]
			}
		}
		if err != nil {
			return it, err
		}
	}
	switch it.state {
	case stateClaimed, stateDone, stateFree:
	case "":
		// Only the key: an item being written, as a server whose writes
		// are not atomic (moto) shows it; judge takes it as held.
	default:
		return it, fmt.Errorf("jobonce: dynamostore: an item has state %q, not one this Store writes", it.state)
	}
	return it, nil
}

func parseNum(name string, v types.AttributeValue) (int64, error) {
	n, ok := v.(*types.AttributeValueMemberN)
	if !ok {
		return 0, fmt.Errorf("jobonce: dynamostore: attribute %q of an item is %T, not a number", name, v)
	}
	i, err := strconv.ParseInt(n.Value, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("jobonce: dynamostore: attribute %q of an item: %w", name, err)
	}
	return i, nil
}

// resultValue encodes a result: a nil result is no attribute, any other a
// marker byte then the result, so that an empty one stays empty.
func resultValue(r []byte) []byte {
	v := make([]byte, 0, len(r)+1)
	v = append(v, 1)
	return append(v, r...)
}

// keyOf is the item key of key.
func keyOf(key string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrKey: bin([]byte(key))}
}

// read reads key's item with a strongly consistent read.
func (s *Store) read(ctx context.Context, key string) (item, error) {
	var out *dynamodb.GetItemOutput
	err := retryThrottled(ctx, func() error {
		var err error
		out, err = s.client.GetItem(ctx, &dynamodb.GetItemInput{TableName: s.table, Key: keyOf(key), ConsistentRead: aws.Bool(true)}, noSDKRetry)
		return err
	})
	if err != nil {
		return item{}, s.fail(ctx, "GetItem", err)
	}
	return parseItem(out.Item)
}

// conditionFailed returns the item a failed condition read back, and
// whether the condition failed at all.
func conditionFailed(err error) (map[string]types.AttributeValue, bool) {
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return ccf.Item, true
	}
	return nil, false
}

// update runs one conditional UpdateItem, retrying throttled attempts. On
// a failed condition it returns failed true and the item as it was (read
// back by the write itself, or by a consistent read on a server that does
// not return it).
func (s *Store) update(ctx context.Context, in *dynamodb.UpdateItemInput, key string) (failed bool, old item, err error) {
	in.TableName = s.table
	in.Key = keyOf(key)
	in.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	err = retryThrottled(ctx, func() error {
		_, err := s.client.UpdateItem(ctx, in, noSDKRetry)
		return err
	})
	if err == nil {
		return false, item{}, nil
	}
	m, ok := conditionFailed(err)
	if !ok {
		return false, item{}, s.fail(ctx, "UpdateItem", err)
	}
	if m != nil {
		old, err = parseItem(m)
		return true, old, err
	}
	old, err = s.read(ctx, key)
	return true, old, err
}
