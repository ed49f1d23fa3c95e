package versus

import (
	"fmt"
	"io"
	"slices"
	"strconv"
)

// spread is the median and the range of one side's runs.
type spread struct{ median, lo, hi float64 }

func summarise(xs []float64) spread {
	s := slices.Clone(xs)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return spread{median: m, lo: s[0], hi: s[len(s)-1]}
}

func (s spread) String() string {
	return fmt.Sprintf("%s (%s–%s)", thousands(s.median), thousands(s.lo), thousands(s.hi))
}

// thousands formats x rounded to an integer with comma separators.
func thousands(x float64) string {
	d := strconv.FormatInt(int64(x+0.5), 10)
	for i := len(d) - 3; i > 0; i -= 3 {
		d = d[:i] + "," + d[i:]
	}
	return d
}

var storeNames = map[string]string{storePostgres: "PostgreSQL", storeSQLite: "SQLite"}

func describe(o *Options, w workload) string {
	switch w.kind {
	case "bulk":
		return fmt.Sprintf("%s: insert %s unique rows in batches of %s, rows/s", storeNames[w.store], thousands(float64(o.N)), thousands(float64(o.Batch)))
	case "one":
		return fmt.Sprintf("%s: insert %s unique rows one at a time, rows/s", storeNames[w.store], thousands(float64(o.One)))
	case "work":
		return fmt.Sprintf("%s: work %s (River, no-op worker) / drain (msgq, zero-latency sim), msgs/s", storeNames[w.store], thousands(float64(o.N)))
	}
	return w.store + " " + w.kind
}

// writeTable prints one Markdown table: workload | River | msgq | ratio,
// each cell the median with the range over the runs.
func writeTable(w io.Writer, o *Options, res *results) {
	fmt.Fprintf(w, "| workload | River | msgq | ratio msgq/River |\n|---|---:|---:|---:|\n")
	for _, st := range o.Stores {
		for _, kind := range []string{"bulk", "one", "work"} {
			wl := workload{st, kind}
			r, m := res.rates[wl]["River"], res.rates[wl]["msgq"]
			if len(r) == 0 || len(m) == 0 {
				continue
			}
			rs, ms := summarise(r), summarise(m)
			fmt.Fprintf(w, "| %s | %s | %s | %.2f |\n", describe(o, wl), rs, ms, ms.median/rs.median)
		}
	}
	fmt.Fprintf(w, "\neach cell: median (min–max) of %d run(s) per side\n", o.Runs)
}
