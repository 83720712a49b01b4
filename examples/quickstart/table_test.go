package main

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The README shows the demo's table between these markers. Each cell of a
// row is a bound the demo's figure must meet:
//
//	2,000                      exactly
//	0–20                       a range, both ends included
//	4,000 + crash gap          that number plus the row's crash gap
//	0 to 2,000 + crash gap     a range whose ends are such figures ("crash gap" alone is one)
//	0.5–2 s                    seconds; the upper end is checked only without -race, which
//	                           slows the embedded Redis's interpreted Lua many times over
//
// Text in parentheses after a bound is a note, not checked.
const (
	tableBegin = "<!-- demo-table:begin -->"
	tableEnd   = "<!-- demo-table:end -->"
	readmePath = "../../README.md"
)

// table is a table as printed: its header and its rows' cells by strategy.
type table struct {
	header []string
	order  []string
	cells  map[string][]string // without the strategy
}

func (tb table) rows() []string { return tb.order }

func (tb *table) add(t *testing.T, name string, cells []string) {
	t.Helper()
	_, dup := tb.cells[name]
	require.False(t, dup, "row %q appears twice", name)
	require.Len(t, cells, len(tb.header)-1, "row %q: %q", name, cells)
	tb.order = append(tb.order, name)
	tb.cells[name] = cells
}

var columnGap = regexp.MustCompile(`\s{2,}`)

// demoTable reads the table the demo printed, and its lines explaining the
// columns.
func demoTable(t *testing.T, out string) table {
	t.Helper()
	lines := strings.Split(out, "\n")
	i := 0
	for i < len(lines) && !strings.HasPrefix(lines[i], columns[0].name+" ") {
		i++
	}
	require.Less(t, i, len(lines), "no table header in the demo's output:\n%s", out)
	tb := table{header: columnGap.Split(strings.TrimSpace(lines[i]), -1), cells: map[string][]string{}}
	for i++; i < len(lines) && lines[i] != ""; i++ {
		line := lines[i]
		if strings.HasPrefix(line, "  (") {
			continue // a note under a row
		}
		require.Greater(t, len(line), strategyWidth, "short row %q", line)
		tb.add(t, strings.TrimSpace(line[:strategyWidth]), strings.Fields(line[strategyWidth:]))
	}
	return tb
}

// demoColumnLines returns the demo's line explaining each column, by name.
func demoColumnLines(t *testing.T, out string) map[string]string {
	t.Helper()
	means := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		parts := columnGap.Split(line, 2)
		if len(parts) != 2 {
			continue
		}
		for _, c := range columns {
			if parts[0] == c.name && !strings.Contains(parts[1], "  ") {
				means[c.name] = parts[1]
			}
		}
	}
	return means
}

// readmeTable reads the Markdown table between the markers in readme.
func readmeTable(t *testing.T, readme string) table {
	t.Helper()
	begin, end := strings.Index(readme, tableBegin), strings.Index(readme, tableEnd)
	require.True(t, begin >= 0 && end > begin, "README.md has no %s … %s block", tableBegin, tableEnd)
	var rows [][]string
	for _, line := range strings.Split(readme[begin+len(tableBegin):end], "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			continue
		}
		var cells []string
		for _, c := range strings.Split(strings.Trim(line, "|"), "|") {
			cells = append(cells, strings.TrimSpace(c))
		}
		rows = append(rows, cells)
	}
	require.GreaterOrEqual(t, len(rows), 3, "the README's table has no rows")
	tb := table{header: rows[0], cells: map[string][]string{}}
	for _, r := range rows[2:] { // rows[1] is the |---| line
		tb.add(t, r[0], r[1:])
	}
	return tb
}

// bound is one README cell: lo ≤ figure ≤ hi, in seconds for the took
// column.
type bound struct {
	lo, hi  float64
	seconds bool
}

// parseBound reads a README cell, given the row's crash gap.
func parseBound(t *testing.T, cell string, gap int) bound {
	t.Helper()
	expr, _, _ := strings.Cut(cell, " (")
	var b bound
	if s, ok := strings.CutSuffix(expr, " s"); ok {
		expr, b.seconds = s, true
	}
	lo, hi, isRange := strings.Cut(expr, " to ")
	if !isRange {
		lo, hi, isRange = strings.Cut(expr, "–")
	}
	if !isRange {
		hi = lo
	}
	b.lo, b.hi = parseFigure(t, cell, lo, gap), parseFigure(t, cell, hi, gap)
	return b
}

func parseFigure(t *testing.T, cell, s string, gap int) float64 {
	t.Helper()
	s = strings.TrimSpace(s)
	add := 0.0
	if rest, ok := strings.CutSuffix(s, "crash gap"); ok {
		add = float64(gap)
		s = strings.TrimSuffix(strings.TrimSpace(rest), "+")
		if strings.TrimSpace(s) == "" {
			return add
		}
	}
	v, err := strconv.ParseFloat(strings.ReplaceAll(strings.TrimSpace(s), ",", ""), 64)
	require.NoError(t, err, "README cell %q", cell)
	return v + add
}

// TestDemoTableAgreesWithTheREADME runs the demo and checks the README's
// table against it: the same rows and columns, and every figure the demo
// printed within the README's bound for it, and the same line explaining
// each column under both tables.
func TestDemoTableAgreesWithTheREADME(t *testing.T) {
	out := demoOutput(t)
	readme, err := os.ReadFile(readmePath)
	require.NoError(t, err)
	demoT, readmeT := demoTable(t, out), readmeTable(t, string(readme))
	require.Equal(t, demoT.header, readmeT.header, "columns")
	require.Equal(t, demoT.rows(), readmeT.rows(), "rows")

	gapCol := columnIndex(t, demoT, "crash gap")
	for _, name := range demoT.rows() {
		demoCells := demoT.cells[name]
		gap, err := strconv.Atoi(demoCells[gapCol])
		require.NoError(t, err, "row %q: crash gap %q", name, demoCells[gapCol])
		for i, cell := range readmeT.cells[name] {
			b := parseBound(t, cell, gap)
			got := demoFigure(t, demoCells[i], b.seconds)
			where := "row " + strconv.Quote(name) + ", column " + strconv.Quote(demoT.header[i+1]) + ": README " + strconv.Quote(cell)
			require.GreaterOrEqual(t, got, b.lo, "%s, the demo printed %s\n%s", where, demoCells[i], out)
			if b.seconds && raceDetector {
				continue
			}
			require.LessOrEqual(t, got, b.hi, "%s, the demo printed %s\n%s", where, demoCells[i], out)
		}
	}

	means := demoColumnLines(t, out)
	for _, c := range columns {
		require.Contains(t, means, c.name, "the demo explains no column %q", c.name)
		require.Contains(t, string(readme), "- **"+c.name+"**: "+means[c.name]+"\n", "the README explains column %q as the demo does", c.name)
	}
}

// columnIndex returns the index, among a row's cells, of the named column.
func columnIndex(t *testing.T, tb table, name string) int {
	t.Helper()
	for i, h := range tb.header[1:] {
		if h == name {
			return i
		}
	}
	require.Failf(t, "no such column", "%q in %q", name, tb.header)
	return 0
}

// demoFigure reads one figure the demo printed: a count, or a duration.
func demoFigure(t *testing.T, s string, seconds bool) float64 {
	t.Helper()
	if seconds {
		d, err := time.ParseDuration(s)
		require.NoError(t, err, "took %q", s)
		return d.Seconds()
	}
	v, err := strconv.Atoi(s)
	require.NoError(t, err, "figure %q", s)
	return float64(v)
}

// TestREADMECellBounds pins the grammar of the README's cells.
func TestREADMECellBounds(t *testing.T) {
	const gap = 3
	for cell, want := range map[string]bound{
		"2,000":                              {lo: 2000, hi: 2000},
		"0–20":                               {lo: 0, hi: 20},
		"0–20 (held by the killed consumer)": {lo: 0, hi: 20},
		"4,000 + crash gap":                  {lo: 4003, hi: 4003},
		"2,000 to 2,000 + crash gap":         {lo: 2000, hi: 2003},
		"0 to crash gap (the effect→marker gap)":       {lo: 0, hi: 3},
		"0 to 2,000 + crash gap (copies that overlap)": {lo: 0, hi: 2003},
		"0.5–2 s": {lo: 0.5, hi: 2, seconds: true},
	} {
		require.Equal(t, want, parseBound(t, cell, gap), "%q", cell)
	}
}
