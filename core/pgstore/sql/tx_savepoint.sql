-- tx_savepoint.sql opens the savepoint that bounds a transactional record.
SAVEPOINT jobonce_record
