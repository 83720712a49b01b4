-- commit.sql commits the READ COMMITTED transaction that a leased claim's
-- statements run in (Store.send), in the same round trip as they do.
COMMIT
