package pgstore

// Table returns the keys table's name as quoted in SQL.
func (s *Store) Table() string { return s.table }

// Channel returns the channel on which the store notifies the end of a
// claim that a copy awaits, for LISTEN.
func (s *Store) Channel() string { return s.channel }
