-- tx_release.sql releases the savepoint; the record stays in the transaction.
RELEASE SAVEPOINT jobonce_record
