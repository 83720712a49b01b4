// Package bench measures jobonce next to the Redis lock libraries people use
// for the same job, in one run, and its stores side by side (Redis,
// PostgreSQL, DynamoDB on dynalite). It is a module of its own so that its
// peers and the DynamoDB SDK never enter jobonce's go.mod:
//
//	go -C bench test -run '^$' -bench ClaimComplete -count 6 | benchstat -col /impl -
//	go -C bench test -run '^$' -bench Stores -benchtime 200x
package bench
