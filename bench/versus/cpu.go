package versus

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// withApp returns the PostgreSQL URL u with application_name set to app, so
// that the server's backends of one queue can be told apart. The parameter
// is appended, leaving the others as they were written. A URL that does
// not parse is returned as it is (its server CPU is then not counted).
func withApp(u, app string) string {
	p, err := url.Parse(u)
	if err != nil || (p.Scheme != "postgres" && p.Scheme != "postgresql") {
		return u
	}
	if p.RawQuery != "" {
		p.RawQuery += "&"
	}
	p.RawQuery += "application_name=" + url.QueryEscape(app)
	return p.String()
}

// clientCPU is the CPU time this process has used so far.
func clientCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serverCPU is the CPU time used so far by each backend of application
// app, read from /proc: only for a server on this machine, readable by
// this user. Backends that have already exited are not counted.
func serverCPU(pgURL, app string) map[int]time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		return nil
	}
	defer c.Close(ctx)
	rs, err := c.Query(ctx, "SELECT pid FROM pg_stat_activity WHERE application_name = $1", app)
	if err != nil {
		return nil
	}
	pids, err := pgx.CollectRows(rs, pgx.RowTo[int32])
	if err != nil {
		return nil
	}
	out := map[int]time.Duration{}
	for _, pid := range pids {
		if d, ok := procCPU(int(pid)); ok {
			out[int(pid)] = d
		}
	}
	return out
}

// procCPU reads utime+stime of process pid (in clock ticks of 10 ms: the
// kernel's USER_HZ is 100 on Linux everywhere).
func procCPU(pid int) (time.Duration, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	// After the command: state is field 3, utime 14 and stime 15.
	if len(f) < 13 {
		return 0, false
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(ut+st) * 10 * time.Millisecond, true
}

// cpuMeter measures one phase's CPU: this process's, and the server's
// backends of one application.
type cpuMeter struct {
	url, app string
	client   time.Duration
	server   map[int]time.Duration
}

func startCPU(pgURL, app string) *cpuMeter {
	m := &cpuMeter{url: pgURL, app: app, client: clientCPU()}
	if app != "" {
		m.server = serverCPU(pgURL, app)
	}
	return m
}

// stop returns the client's and the server's CPU since start (server 0
// when not measured).
func (m *cpuMeter) stop() (client, server time.Duration) {
	client = clientCPU() - m.client
	if m.app == "" {
		return client, 0
	}
	for pid, d := range serverCPU(m.url, m.app) {
		server += d - m.server[pid] // a backend started meanwhile counts from 0
	}
	return client, server
}

// writeCPU prints the CPU per message of the work phases and of the
// one-at-a-time insert, median of the runs, per store and side. On a
// loaded machine it moves less than the rates do.
func writeCPU(w io.Writer, o *Options, res *results) {
	if len(res.cpu) == 0 {
		return
	}
	for _, kind := range []string{"work", "one", "aged", "endpoint"} {
		title := map[string]string{"work": "while working", "one": "inserting one at a time",
			"aged":     fmt.Sprintf("while working beside %s finished rows", thousands(float64(o.Aged))),
			"endpoint": "of msgq's drain with one event endpoint and without"}[kind]
		sides := []string{"River", "msgq"}
		if kind == "endpoint" {
			sides = []string{withEndpoint, withoutEndpoint}
		}
		header := false
		for _, st := range o.Stores {
			var parts []string
			for _, sd := range sides {
				c := res.cpu[workload{st, kind}][sd]
				if c == nil || len(c.client) == 0 {
					continue
				}
				cl, sv := summarise(c.client).median, summarise(c.server).median
				if st == storePostgres {
					parts = append(parts, fmt.Sprintf("%s %.0f µs client + %.0f µs server", sd, cl, sv))
				} else {
					parts = append(parts, fmt.Sprintf("%s %.0f µs", sd, cl))
				}
			}
			if len(parts) == 0 {
				continue
			}
			if !header {
				fmt.Fprintf(w, "\nCPU per message %s (median of runs; server: PostgreSQL backends of the side, read from /proc; SQLite runs in the client):\n", title)
				header = true
			}
			fmt.Fprintf(w, "  %-10s %s\n", storeNames[st]+":", strings.Join(parts, "; "))
		}
	}
}
