package memstore

import "time"

// expiryQueue holds the times at which entries expire, earliest first, as a
// binary heap: one item each time an entry's expiry is set (a claim, an
// extension, a done marker). An item whose entry has since been given a
// later expiry, or replaced, is taken when due and finds its entry live, or
// gone.
type expiryQueue []expiry

type expiry struct {
	at  time.Time
	key string
}

// add queues key's expiry at.
func (q *expiryQueue) add(key string, at time.Time) {
	h := append(*q, expiry{at, key})
	for i := len(h) - 1; i > 0; {
		parent := (i - 1) / 2
		if !h[i].at.Before(h[parent].at) {
			break
		}
		h[i], h[parent] = h[parent], h[i]
		i = parent
	}
	*q = h
}

// due takes the earliest expiry at or before now, if any, and returns its
// key.
func (q *expiryQueue) due(now time.Time) (string, bool) {
	h := *q
	if len(h) == 0 || now.Before(h[0].at) {
		return "", false
	}
	key, last := h[0].key, len(h)-1
	h[0], h[last] = h[last], expiry{}
	h = h[:last]
	for i := 0; ; {
		least, l, r := i, 2*i+1, 2*i+2
		if l < len(h) && h[l].at.Before(h[least].at) {
			least = l
		}
		if r < len(h) && h[r].at.Before(h[least].at) {
			least = r
		}
		if least == i {
			break
		}
		h[i], h[least] = h[least], h[i]
		i = least
	}
	*q = h
	return key, true
}
