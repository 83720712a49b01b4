// Package bench measures jobonce next to the Redis lock libraries people use
// for the same job, in one run. It is a module of its own so that its peers
// never enter jobonce's go.mod:
//
//	go -C bench test -run '^$' -bench . -count 6 | benchstat -col /impl -
package bench
