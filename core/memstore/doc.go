// Package memstore keeps jobonce claims in process memory, for tests and
// single-process programs. Claims are lost when the process exits.
//
//	import "github.com/jobonce/jobonce/core/memstore"
package memstore
