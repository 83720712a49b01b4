// Package dynamostore keeps jobonce claims in a DynamoDB table
// (aws-sdk-go-v2), for programs on AWS that run neither Redis nor
// PostgreSQL. It is a module of its own, so only its users depend on the
// DynamoDB SDK.
//
//	import "github.com/jobonce/jobonce/core/dynamostore"
//
// # Getting started
//
// New returns a Store; pass it to core.New and use the Guard as with any
// store:
//
//	store, err := dynamostore.New(ctx, dynamodb.NewFromConfig(awsCfg), &dynamostore.Config{CreateTable: true})
//	if err != nil {
//		return err // a missing table, a wrong key schema or a missing permission
//	}
//	guard, err := core.New(store, nil)
//
// One item per key holds a running claim, a done marker or a released key.
// Each operation is one conditional UpdateItem.
//
// # Clocks
//
// DynamoDB's conditions have no clock of their own: every write states its
// writer's time, and leases and retentions are judged by it. A claim takes
// over an ended lease only Config.ClockSkew after its end. So while the
// processes' clocks differ by less than ClockSkew, no process takes a key
// that another still holds.
//
// # Transactional mode
//
// core.NewTxGuard[*dynamostore.Tx](guard) commits the job's own DynamoDB
// writes (Tx.Add) with the key's done marker in one TransactWriteItems.
// They happen together, once, or not at all.
//
// DynamoDB has no completion signal, so a copy that waits for its running
// copy polls the key. docs/dynamodb.md explains the table's schema, the IAM
// permissions, clocks, throttling, the transactional mode and the cost per
// message.
package dynamostore
