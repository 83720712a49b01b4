package main

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// column is one column of the table, with the line that explains it.
type column struct {
	name, means string
	width       int
}

// columns are the table's columns, as the README shows them too.
var columns = []column{
	{"strategy", "how each handler guards its job's one effect", strategyWidth},
	{"effects", "effects made on the system the jobs act on: 2000 when every job acts once", 8},
	{"duplicate effects", "effects beyond a job's first", 18},
	{"missing jobs", "jobs with no effect at all", 13},
	{"crash gap", "deliveries the killed consumer had made the effect of but not acknowledged", 10},
	{"took", "until every delivery was acknowledged: the leased rows first wait out the killed consumer's 1s leases", 6},
}

const strategyWidth = 40

// conclusion follows the table.
const conclusion = `
"none" acts on every delivery: twice per job, and once more for each delivery in the
crash gap, which comes back after the kill. Copies that check a done marker at the same
moment both act. A claim without a lease outlives the killed consumer, so the jobs it
held are never done. jobonce's lease expires with the dead consumer and a later copy
runs: its only repeats are deliveries in the crash gap whose done marker was not yet
written. The idempotency key closes that gap (the API refuses the repeat), and so does
the transaction (the kill rolls the effect back with its key).

Which row fits which effect:
  a write to the database that keeps the keys  transactional (core.TxGuard): exactly once
  an API that accepts idempotency keys         jobonce + core.IdempotencyKey: repeats absorbed there
  an external effect without one               jobonce alone: a repeat only from the crash gap
  one where skipping beats repeating           a claim with no lease: at most once
`

func printHeader(w io.Writer) {
	fmt.Fprintf(w, "%-*s", columns[0].width, columns[0].name)
	for _, c := range columns[1:] {
		fmt.Fprintf(w, " %*s", c.width, c.name)
	}
	fmt.Fprintln(w)
}

func printRow(w io.Writer, name string, r result) {
	fmt.Fprintf(w, "%-*s", columns[0].width, name)
	for i, v := range []string{fmt.Sprint(r.effects), fmt.Sprint(r.duplicates), fmt.Sprint(r.missing), fmt.Sprint(r.gap), seconds(r.took)} {
		fmt.Fprintf(w, " %*s", columns[i+1].width, v)
	}
	fmt.Fprintln(w)
}

// printColumns explains each column in one line.
func printColumns(w io.Writer) {
	width := 0
	for _, c := range columns {
		width = max(width, len(c.name))
	}
	for _, c := range columns {
		fmt.Fprintf(w, "%-*s  %s\n", width, c.name, c.means)
	}
}

// seconds formats d as seconds with two decimals, as "0.53s".
func seconds(d time.Duration) string {
	return strings.TrimSpace(fmt.Sprintf("%.2fs", d.Seconds()))
}
