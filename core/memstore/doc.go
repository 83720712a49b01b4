// Package memstore keeps jobonce claims in process memory, for tests and
// single-process programs. Claims are lost when the process exits.
//
// A Store remembers each key's last fence for as long as it lives, after the
// key is released or expires, so a key's fences always increase. That costs
// a small map entry per distinct key ever claimed, which suits tests and
// programs with a bounded set of keys.
//
// A done marker keeps a copy of its result, which each duplicate's claim
// copies again: a core.Guard stores results of up to
// core.Config.MaxResultSize (64 KiB by default) and records a larger one's
// marker without it.
//
//	import "github.com/jobonce/jobonce/core/memstore"
package memstore
