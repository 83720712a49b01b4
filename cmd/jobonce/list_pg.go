package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/jobonce/jobonce/core/driver"
)

func (p *pgKeys) list(ctx context.Context, o listOptions) (listing, error) {
	l := listing{doneCount: -1}
	window := o.lease + leaseTolerance(o.lease)
	rows, err := p.pool.Query(ctx, loadSQL("list_claims", p.table), int64(o.scan), window.Microseconds())
	if err != nil {
		return listing{}, fmt.Errorf("reading %s: %w", p.table, err)
	}
	var read int64
	for rows.Next() {
		var (
			key                   []byte
			token                 pgtype.UUID
			fence, remaining, age *int64
		)
		if err := rows.Scan(&read, &key, &token, &fence, &remaining, &age); err != nil {
			rows.Close()
			return listing{}, fmt.Errorf("reading %s: %w", p.table, err)
		}
		if key == nil {
			continue // no claim: the count alone
		}
		if !strings.HasPrefix(string(key), o.prefix) {
			l.others++
			continue
		}
		e := entry{key: string(key), state: driver.StateRunning, token: token.Bytes, left: micros(*remaining)}
		if fence != nil && age != nil {
			e.fence, e.age = *fence, micros(*age)
		}
		l.claims = append(l.claims, e)
	}
	if err := rows.Err(); err != nil {
		return listing{}, fmt.Errorf("reading %s: %w", p.table, err)
	}
	l.read = int(read)
	l.notes = append(l.notes, fmt.Sprintf("Read the %s whose lease or retention ends within -lease %s, through the expiry index.", count(int(read), "row"), o.lease))
	if l.read >= o.scan {
		l.partial = true
		l.notes = append(l.notes, fmt.Sprintf("The read stopped at -scan %d rows: claims with less lease left are not listed.", o.scan))
	}
	if o.done {
		if err := p.listDone(ctx, o, &l); err != nil {
			return listing{}, err
		}
	}
	return l, nil
}

// listDone adds to l the done rows under o.prefix among the o.scan live
// rows with the most retention left.
func (p *pgKeys) listDone(ctx context.Context, o listOptions, l *listing) error {
	rows, err := p.pool.Query(ctx, loadSQL("list_done", p.table), int64(o.scan))
	if err != nil {
		return fmt.Errorf("reading %s: %w", p.table, err)
	}
	defer rows.Close()
	var read int64
	for rows.Next() {
		var key []byte
		var remaining *int64
		if err := rows.Scan(&read, &key, &remaining); err != nil {
			return fmt.Errorf("reading %s: %w", p.table, err)
		}
		if key == nil {
			continue
		}
		if !strings.HasPrefix(string(key), o.prefix) {
			continue // counted with the claims' rows when it was one
		}
		l.done = append(l.done, entry{key: string(key), state: driver.StateDone, left: micros(*remaining)})
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("reading %s: %w", p.table, err)
	}
	l.doneCount = len(l.done)
	if int(read) >= o.scan {
		l.notes = append(l.notes, fmt.Sprintf("Done markers: read the %d live rows with the most retention left (-scan): older ones are not listed.", read))
	}
	return nil
}
