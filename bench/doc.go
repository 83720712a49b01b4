// Package bench measures jobonce next to the Redis lock libraries people use
// for the same job, in one run; its stores side by side (Redis, PostgreSQL,
// DynamoDB on dynalite); and the Lambda SQS handler on each store. It is a
// module of its own so that its peers, the DynamoDB SDK and aws-lambda-go
// never enter another module's go.mod:
//
//	go -C bench test -run '^$' -bench ClaimComplete -count 6 | benchstat -col /impl -
//	go -C bench test -run '^$' -bench Stores -benchtime 200x
//	go -C bench test -run '^$' -bench Handler -benchtime 2000x
package bench
