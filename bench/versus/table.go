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

// endpointTarget is issue 25's bound on the outbox's cost: the drain with
// an endpoint keeps at least this share of its rate without.
const endpointTarget = 0.75

var storeNames = map[string]string{storePostgres: "PostgreSQL", storeSQLite: "SQLite"}

func describe(o *Options, w workload) string {
	switch w.kind {
	case "bulk":
		return fmt.Sprintf("%s: insert %s unique rows in batches of %s, rows/s", storeNames[w.store], thousands(float64(o.N)), thousands(float64(o.Batch)))
	case "one":
		return fmt.Sprintf("%s: insert %s unique rows one at a time, rows/s", storeNames[w.store], thousands(float64(o.One)))
	case "work":
		return fmt.Sprintf("%s: work %s (River, no-op worker) / drain (msgq, zero-latency sim), msgs/s", storeNames[w.store], thousands(float64(o.N)))
	case "aged":
		return fmt.Sprintf("%s: work / drain %s beside %s finished rows (River: completed jobs; msgq: messages with history and attempts), msgs/s",
			storeNames[w.store], thousands(float64(o.N)), thousands(float64(o.Aged)))
	case "endpoint":
		return fmt.Sprintf("%s: msgq drain %s with one event endpoint (outbox written, no dispatcher) / without, msgs/s", storeNames[w.store], thousands(float64(o.N)))
	}
	return w.store + " " + w.kind
}

// writeTable prints one Markdown table: workload | River | msgq | ratio,
// each cell the median with the range over the runs.
func writeTable(w io.Writer, o *Options, res *results) {
	fmt.Fprintf(w, "| workload | River | msgq | ratio msgq/River |\n|---|---:|---:|---:|\n")
	endpoint := false
	for _, st := range o.Stores {
		for _, kind := range []string{"bulk", "one", "work", "aged"} {
			wl := workload{st, kind}
			r, m := res.rates[wl]["River"], res.rates[wl]["msgq"]
			if len(r) == 0 || len(m) == 0 {
				continue
			}
			rs, ms := summarise(r), summarise(m)
			fmt.Fprintf(w, "| %s | %s | %s | %.2f |\n", describe(o, wl), rs, ms, ms.median/rs.median)
		}
		// msgq against itself: River has no outbox to compare with.
		wl := workload{st, "endpoint"}
		with, without := res.rates[wl][withEndpoint], res.rates[wl][withoutEndpoint]
		if len(with) == 0 || len(without) == 0 {
			continue
		}
		ws, wos := summarise(with), summarise(without)
		fmt.Fprintf(w, "| %s | n/a | with %s; without %s | %.2f with/without (target ≥ %.2f) |\n",
			describe(o, wl), ws, wos, ws.median/wos.median, endpointTarget)
		endpoint = true
	}
	fmt.Fprintf(w, "\neach cell: median (min–max) of %d run(s) per side\n", o.Runs)
	if endpoint {
		fmt.Fprintf(w, "endpoint rows: msgq's drain with one event endpoint registered against the same drain without, each run in a fresh queue; the outbox may cost at most %.0f%%\n", (1-endpointTarget)*100)
	}
}
