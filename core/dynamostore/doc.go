// Package dynamostore keeps jobonce claims in a DynamoDB table
// (aws-sdk-go-v2), for programs on AWS that run neither Redis nor
// PostgreSQL. It is a module of its own, so that only its users depend on
// the DynamoDB SDK.
//
//	import "github.com/jobonce/jobonce/core/dynamostore"
//
// # Leased claims
//
// A Store implements driver.Store, driver.BatchStore and driver.ReadyStore:
// pass it to core.New and use the Guard as with any store. One item per key
// (partition key "k", binary) holds a running claim (token, lease end,
// fence, fingerprint), a done marker (the token of the claim that wrote it,
// retention end, fingerprint, result) or a released key (its fence only).
// Claim, Extend, Complete and Release are each one conditional UpdateItem;
// a failed condition reads the item back in the same call
// (ReturnValuesOnConditionCheckFailure), or with a strongly consistent read
// on a server that does not return it. Extend, Complete and Release are
// token-checked and return core.ErrLeaseLost when the token no longer holds
// the key.
//
// # Clocks
//
// DynamoDB's conditions have no clock of their own: every write states its
// writer's time, and leases and retentions are judged by it. A claim takes
// over a lapsed lease or an expired done marker only Config.ClockSkew after
// its end by the claimant's clock, while the holder's own Extend, Complete
// and Release need its lease unexpired by its clock: as long as the
// processes' clocks differ by less than ClockSkew, no process takes a key
// another still holds. The expiry is checked in every condition; the item's
// "ttl" attribute only lets DynamoDB's time to live delete it, days late at
// worst, Config.FenceKeep after its end.
//
// A claim's fence is its writer's clock in microseconds, or one more than
// the key's previous fence, kept in the item, when that is not smaller: a
// key's fences increase whatever the writers' clocks, as long as its item
// is kept.
//
// # Limits and errors
//
// Keys are binary partition keys of up to 2048 bytes (a core.Guard stores
// long keys hashed); fingerprints and results are any bytes, nil and empty
// results kept apart. An item holds at most 400 KB: a done marker larger
// than that gives an error matching ErrItemTooLarge and is not sent, and a
// core.Guard's Config.MaxResultSize must stay at or below MaxResultSize.
//
// Throttling (ProvisionedThroughputExceededException, ThrottlingException,
// RequestLimitExceeded, TransactionConflict) is retried with backoff within
// the call's context and then answered with an error matching ErrThrottled:
// an answer of a reachable store, on which a core.Guard fails closed even
// with FailOpen. A missing table gives ErrTableMissing, a table with another
// key schema ErrKeySchema, missing permissions ErrAccessDenied, each naming
// the table and the action.
//
// DynamoDB has no completion signal: the Store is no driver.Notifier, and a
// copy that waits for its running copy (core.Job.WaitUntil) polls the key
// with backoff. See docs/dynamodb.md for the table's schema, the IAM
// permissions, time to live, clock skew and the cost per message.
package dynamostore
