package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// createTable creates the table when it is missing, on demand, waits until
// it is active, and turns on time to live on attrTTL.
func (s *Store) createTable(ctx context.Context) error {
	_, err := s.client.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            s.table,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(attrKey), AttributeType: types.ScalarAttributeTypeB}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(attrKey), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	var inUse *types.ResourceInUseException
	switch {
	case err == nil:
	case errors.As(err, &inUse):
		// Created already, or being created by another process.
	default:
		return s.fail(ctx, "CreateTable", err)
	}
	if err := s.awaitActive(ctx); err != nil {
		return err
	}
	ttl, err := s.client.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: s.table})
	if err != nil {
		return s.fail(ctx, "DescribeTimeToLive", err)
	}
	if d := ttl.TimeToLiveDescription; d != nil && (d.TimeToLiveStatus == types.TimeToLiveStatusEnabled || d.TimeToLiveStatus == types.TimeToLiveStatusEnabling) {
		return nil
	}
	_, err = s.client.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName:               s.table,
		TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: aws.String(attrTTL), Enabled: aws.Bool(true)},
	})
	switch apiCode(err) {
	case "":
		return nil
	case "UnknownOperationException":
		// A test server without time to live (dynalite): items stay.
		return nil
	case "ValidationException":
		// Another process turned it on meanwhile.
		return nil
	}
	return s.fail(ctx, "UpdateTimeToLive", err)
}

// awaitActive waits until the table is active.
func (s *Store) awaitActive(ctx context.Context) error {
	for wait := 20 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		out, err := s.client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: s.table})
		if err != nil {
			return s.fail(ctx, "DescribeTable", err)
		}
		if out.Table.TableStatus == types.TableStatusActive {
			return nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("jobonce: dynamostore: table %q is %s, not yet active: %w", s.cfg.Table, out.Table.TableStatus, ctx.Err())
		case <-t.C:
		}
	}
}

// checkTable checks that the table exists with the key schema the Store
// needs.
func (s *Store) checkTable(ctx context.Context) error {
	out, err := s.client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: s.table})
	if err != nil {
		return s.fail(ctx, "DescribeTable", err)
	}
	types := map[string]types.ScalarAttributeType{}
	for _, d := range out.Table.AttributeDefinitions {
		types[aws.ToString(d.AttributeName)] = d.AttributeType
	}
	schema := out.Table.KeySchema
	if len(schema) != 1 || aws.ToString(schema[0].AttributeName) != attrKey || types[attrKey] != "B" {
		var found string
		for _, k := range schema {
			found += fmt.Sprintf(" %s %s (%s)", k.KeyType, aws.ToString(k.AttributeName), types[aws.ToString(k.AttributeName)])
		}
		return fmt.Errorf("%w: table %q has key schema%s; the Store needs a partition key %q of type B and no sort key", ErrKeySchema, s.cfg.Table, found, attrKey)
	}
	return nil
}
