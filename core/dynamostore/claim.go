package dynamostore

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/jobonce/jobonce/core/driver"
)

// claimAttempts bounds how often a claim writes again when the key's item
// changed between its write and the read of its state.
const claimAttempts = 4

// Claim implements driver.Store in one conditional write. It claims the key
// when its item is absent or released, or its lease or retention ended
// more than Config.ClockSkew ago by this process's clock. Otherwise it
// reports the item's state. A key's fences increase whatever the writers'
// clocks. A lease under 1ms gives an error.
func (s *Store) Claim(ctx context.Context, req driver.ClaimRequest) (driver.ClaimReply, error) {
	if err := checkClaim(&req); err != nil {
		return driver.ClaimReply{}, err
	}
	reply, _, err := s.claim(ctx, &req)
	return reply, err
}

// claim is Claim for a valid req. It also returns the token of the live
// claim that holds the key, or the zero token when none does or it is not
// known.
func (s *Store) claim(ctx context.Context, req *driver.ClaimRequest) (driver.ClaimReply, driver.Token, error) {
	if err := ctx.Err(); err != nil {
		return driver.ClaimReply{}, driver.Token{}, fmt.Errorf("jobonce: dynamostore: claim not sent: %w", err)
	}
	var prevFence *int64 // the fence a takeover must follow, once read
	for range claimAttempts {
		now := micros(s.now())
		fence := now
		if prevFence != nil {
			fence = max(now, *prevFence+1)
		}
		failed, old, err := s.update(ctx, s.claimInput(req, now, fence, prevFence), req.Key)
		if err != nil {
			return driver.ClaimReply{}, driver.Token{}, err
		}
		if !failed {
			return driver.ClaimReply{State: driver.StateClaimed, Fence: fence}, req.Token, nil
		}
		if reply, held := s.judge(&old, req.Token, now); held {
			if old.state != stateClaimed || old.exp <= now {
				return reply, driver.Token{}, nil // no live claim holds it
			}
			return reply, old.token, nil
		}
		// Free by this clock: the condition failed on the fence (a writer
		// whose clock is ahead claimed it last) or the item changed since.
		f := old.fence
		prevFence = &f
		if !old.exists {
			prevFence = nil
		}
	}
	// The key keeps changing hands: report it busy rather than loop.
	return driver.ClaimReply{State: driver.StateRunning, Remaining: 10 * time.Millisecond}, driver.Token{}, nil
}

// checkClaim returns an error naming what is wrong with req, or nil.
func checkClaim(req *driver.ClaimRequest) error {
	if err := checkDuration("ClaimRequest.Lease", req.Lease); err != nil {
		return err
	}
	return checkKey(req.Key)
}

// claimInput is the conditional write of a claim at now (microseconds)
// with fence. With prevFence nil, it claims a key that is free and whose
// fence is below now; otherwise a free key whose fence is still
// *prevFence.
func (s *Store) claimInput(req *driver.ClaimRequest, now, fence int64, prevFence *int64) *dynamodb.UpdateItemInput {
	exp := plus(now, req.Lease)
	lapse := now - s.cfg.ClockSkew.Microseconds()
	values := map[string]types.AttributeValue{
		":c":     str(stateClaimed),
		":tok":   bin(req.Token[:]),
		":exp":   num(exp),
		":fence": num(fence),
		":ttl":   num(s.ttlOf(exp)),
		":lapse": num(lapse),
	}
	cond := "(attribute_not_exists(#k) OR #exp < :lapse) AND "
	if prevFence == nil {
		values[":now"] = num(now)
		cond += "(attribute_not_exists(#fence) OR #fence < :now)"
	} else {
		values[":prev"] = num(*prevFence)
		cond += "#fence = :prev"
	}
	set := "SET #st = :c, #tok = :tok, #exp = :exp, #fence = :fence, #ttl = :ttl"
	remove := " REMOVE #res"
	if req.Fingerprint != "" {
		set += ", #fp = :fp"
		values[":fp"] = bin([]byte(req.Fingerprint))
	} else {
		remove += ", #fp"
	}
	return &dynamodb.UpdateItemInput{
		ConditionExpression:       aws.String(cond),
		UpdateExpression:          aws.String(set + remove),
		ExpressionAttributeNames:  namesOf(cond, set+remove),
		ExpressionAttributeValues: values,
	}
}

// names maps every placeholder the Store's expressions use to its attribute.
func names() map[string]string {
	return map[string]string{
		"#k": attrKey, "#st": attrState, "#tok": attrToken, "#exp": attrExp,
		"#fence": attrFence, "#fp": attrFP, "#res": attrResult, "#ttl": attrTTL,
	}
}

// namesOf returns the placeholders of names() that an expression uses
// (DynamoDB refuses names an expression does not use).
func namesOf(exprs ...string) map[string]string {
	out := make(map[string]string)
	for p, a := range names() {
		for _, e := range exprs {
			if containsPlaceholder(e, p) {
				out[p] = a
				break
			}
		}
	}
	return out
}

func containsPlaceholder(expr, p string) bool {
	for i := 0; i+len(p) <= len(expr); i++ {
		if expr[i:i+len(p)] == p {
			end := i + len(p)
			if end == len(expr) || !isNameByte(expr[end]) {
				return true
			}
		}
	}
	return false
}

func isNameByte(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '_'
}

// judge reports the state of a key whose item a claim by token found at
// now (microseconds), held true, or held false when the key is free by
// this process's clock.
func (s *Store) judge(it *item, token driver.Token, now int64) (driver.ClaimReply, bool) {
	if !it.exists || it.state == stateFree {
		return driver.ClaimReply{}, false
	}
	if it.state == "" {
		return driver.ClaimReply{State: driver.StateRunning, Remaining: 10 * time.Millisecond}, true
	}
	until := plus(it.exp, s.cfg.ClockSkew)
	if until <= now {
		return driver.ClaimReply{}, false
	}
	// The remaining lease or retention; within the skew margin after it,
	// what is left of the margin.
	remaining := fromMicros(it.exp - now)
	if it.exp <= now {
		remaining = fromMicros(until - now)
	}
	switch {
	case it.state == stateDone:
		return driver.ClaimReply{State: driver.StateDone, Fingerprint: string(it.fp), Result: it.result, Remaining: remaining}, true
	case it.token == token && it.exp > now:
		// The same claim sent again: its lease is not renewed.
		return driver.ClaimReply{State: driver.StateClaimed, Fence: it.fence}, true
	}
	return driver.ClaimReply{State: driver.StateRunning, Fingerprint: string(it.fp), Remaining: remaining, Fence: it.fence}, true
}

// Extend implements driver.Store. It returns driver.ErrLeaseLost unless
// token holds a live claim of key by this process's clock. A lease under
// 1ms gives an error.
func (s *Store) Extend(ctx context.Context, key string, token driver.Token, lease time.Duration) error {
	if err := checkDuration("Extend lease", lease); err != nil {
		return err
	}
	if err := checkKey(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("jobonce: dynamostore: extend not sent: %w", err)
	}
	now := micros(s.now())
	exp := plus(now, lease)
	in := &dynamodb.UpdateItemInput{
		ConditionExpression: aws.String("#tok = :tok AND #st = :c AND #exp > :now"),
		UpdateExpression:    aws.String("SET #exp = :exp, #ttl = :ttl"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":tok": bin(token[:]), ":c": str(stateClaimed), ":now": num(now), ":exp": num(exp), ":ttl": num(s.ttlOf(exp)),
		},
	}
	in.ExpressionAttributeNames = namesOf(*in.ConditionExpression, *in.UpdateExpression)
	failed, _, err := s.updateNoRead(ctx, in, key)
	if err != nil {
		return err
	}
	if failed {
		return driver.ErrLeaseLost
	}
	return nil
}

// updateNoRead is update for a write whose failed condition needs no read.
func (s *Store) updateNoRead(ctx context.Context, in *dynamodb.UpdateItemInput, key string) (bool, item, error) {
	in.TableName = s.table
	in.Key = keyOf(key)
	err := retryThrottled(ctx, func() error {
		_, err := s.client.UpdateItem(ctx, in, noSDKRetry)
		return err
	})
	if err == nil {
		return false, item{}, nil
	}
	if _, ok := conditionFailed(err); ok {
		return true, item{}, nil
	}
	return false, item{}, s.fail(ctx, "UpdateItem", err)
}

// markerSize is the size DynamoDB counts for a done marker of req.
func markerSize(req *driver.CompleteRequest) int {
	n := len(attrKey) + len(req.Key) + len(attrState) + 1 + len(attrToken) + len(req.Token) +
		len(attrExp) + 21 + len(attrFence) + 21 + len(attrTTL) + 21
	if req.Fingerprint != "" {
		n += len(attrFP) + len(req.Fingerprint)
	}
	if req.Result != nil {
		n += len(attrResult) + len(req.Result) + 1
	}
	return n
}

// completeInput is the conditional write of a done marker at now.
func (s *Store) completeInput(req *driver.CompleteRequest, now int64) *dynamodb.UpdateItemInput {
	exp := plus(now, req.Retention)
	values := map[string]types.AttributeValue{
		":tok": bin(req.Token[:]), ":c": str(stateClaimed), ":d": str(stateDone), ":now": num(now),
		":exp": num(exp), ":ttl": num(s.ttlOf(exp)),
	}
	set := "SET #st = :d, #exp = :exp, #ttl = :ttl"
	var remove []string
	if req.Fingerprint != "" {
		set += ", #fp = :fp"
		values[":fp"] = bin([]byte(req.Fingerprint))
	} else {
		remove = append(remove, "#fp")
	}
	if req.Result != nil {
		set += ", #res = :res"
		values[":res"] = bin(resultValue(req.Result))
	} else {
		remove = append(remove, "#res")
	}
	upd := set
	for i, r := range remove {
		if i == 0 {
			upd += " REMOVE " + r
		} else {
			upd += ", " + r
		}
	}
	cond := "#tok = :tok AND #st = :c AND #exp > :now"
	return &dynamodb.UpdateItemInput{
		ConditionExpression:       aws.String(cond),
		UpdateExpression:          aws.String(upd),
		ExpressionAttributeNames:  namesOf(cond, upd),
		ExpressionAttributeValues: values,
	}
}

// Complete implements driver.Store: the claim of req.Token becomes a done
// marker that names it as its writer. A complete sent again by that claim
// returns nil. It returns driver.ErrLeaseLost when req.Token holds no live
// claim. A marker over DynamoDB's 400 KB item limit gives an error matching
// ErrItemTooLarge and writes nothing.
func (s *Store) Complete(ctx context.Context, req driver.CompleteRequest) error {
	if err := s.checkComplete(&req); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("jobonce: dynamostore: done marker not sent: %w", err)
	}
	now := micros(s.now())
	failed, old, err := s.update(ctx, s.completeInput(&req, now), req.Key)
	if err != nil {
		return err
	}
	if failed {
		return s.judgeComplete(&old, req.Token, now)
	}
	return nil
}

func (s *Store) checkComplete(req *driver.CompleteRequest) error {
	if err := checkDuration("CompleteRequest.Retention", req.Retention); err != nil {
		return err
	}
	if err := checkKey(req.Key); err != nil {
		return err
	}
	if n := markerSize(req); n > maxItemSize {
		return fmt.Errorf("%w: the done marker of a key of %d bytes, a fingerprint of %d bytes and a result of %d bytes is %d bytes (limit %d)",
			ErrItemTooLarge, len(req.Key), len(req.Fingerprint), len(req.Result), n, maxItemSize)
	}
	return nil
}

// judgeComplete answers a done marker whose condition failed on item it.
func (s *Store) judgeComplete(it *item, token driver.Token, now int64) error {
	if it.exists && it.state == stateDone && it.token == token && plus(it.exp, s.cfg.ClockSkew) > now {
		return nil
	}
	return driver.ErrLeaseLost
}

// Release implements driver.Store: the item is freed, keeping the key's
// fence. It returns driver.ErrLeaseLost unless token holds a live claim of
// key.
func (s *Store) Release(ctx context.Context, key string, token driver.Token) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("jobonce: dynamostore: release not sent: %w", err)
	}
	now := micros(s.now())
	in := &dynamodb.UpdateItemInput{
		ConditionExpression: aws.String("#tok = :tok AND #st = :c AND #exp > :now"),
		UpdateExpression:    aws.String("SET #st = :f, #exp = :zero, #ttl = :ttl REMOVE #tok, #fp, #res"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":tok": bin(token[:]), ":c": str(stateClaimed), ":f": str(stateFree), ":now": num(now),
			":zero": num(0), ":ttl": num(s.ttlOf(now)),
		},
	}
	in.ExpressionAttributeNames = namesOf(*in.ConditionExpression, *in.UpdateExpression)
	failed, _, err := s.updateNoRead(ctx, in, key)
	if err != nil {
		return err
	}
	if failed {
		return driver.ErrLeaseLost
	}
	return nil
}
