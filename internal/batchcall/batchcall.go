// Package batchcall sends claims alone, or done markers alone, through a
// driver.BatchStore's Batch, for jobonce's own tests of its stores (the
// storetest cases and each store's tests).
package batchcall

import (
	"context"

	"github.com/jobonce/jobonce/core/driver"
)

// Claims sends claims alone through bs.Batch and returns their replies and
// errors.
func Claims(ctx context.Context, bs driver.BatchStore, claims []driver.ClaimRequest) ([]driver.ClaimReply, []error) {
	replies, errs, _ := bs.Batch(ctx, nil, claims)
	return replies, errs
}

// Completes sends completes alone through bs.Batch and returns their errors.
func Completes(ctx context.Context, bs driver.BatchStore, completes []driver.CompleteRequest) []error {
	_, _, errs := bs.Batch(ctx, completes, nil)
	return errs
}
