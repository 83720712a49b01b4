package dynamostore

import "time"

// SetClock makes s read the time from now, as a process whose clock is off.
func SetClock(s *Store, now func() time.Time) { s.now = now }

// Table returns the name of s's table.
func (s *Store) Table() string { return s.cfg.Table }
