package cli_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/msgq/msgq/internal/sim"
)

// simsKey holds a script's simulators by name (set up in scriptParams).
type simsKey struct{}

// scriptSim is a simulator a script serves over HTTP: the first dropFirst
// message calls go to a sim that accepts each and then drops the
// connection (the answer is lost, the message is on the phone), the rest
// to a sim without faults. Its deliveries are both sims'.
type scriptSim struct {
	dropping, clean *sim.Sim
}

func (s *scriptSim) deliveries() []sim.Delivery {
	return append(s.dropping.Deliveries(), s.clean.Deliveries()...)
}

// cmdSimServe is `simserve NAME DROP_FIRST [FILE...]`: serve a simulator
// for the rest of the script, with its URL in $NAME, the first DROP_FIRST
// message calls answered by accept-then-drop. "${NAME}" in each FILE (a
// config file of the script's) is replaced by the URL: testscript does
// not expand variables inside files.
func cmdSimServe(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: simserve NAME DROP_FIRST [FILE...]")
	}
	dropFirst, err := strconv.ParseInt(args[1], 10, 64)
	if err != nil || dropFirst < 0 {
		ts.Fatalf("simserve: bad DROP_FIRST %q", args[1])
	}
	drop := sim.DefaultConfig()
	drop.FaultDrop = 1
	s := &scriptSim{dropping: sim.New(drop), clean: sim.New(sim.DefaultConfig())}
	dh, ch := s.dropping.Handler(), s.clean.Handler()
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && calls.Add(1) <= dropFirst {
			dh.ServeHTTP(w, r)
			return
		}
		ch.ServeHTTP(w, r)
	}))
	ts.Defer(srv.Close)
	ts.Setenv(args[0], srv.URL)
	ts.Value(simsKey{}).(map[string]*scriptSim)[args[0]] = s
	for _, f := range args[2:] {
		path := ts.MkAbs(f)
		b, err := os.ReadFile(path)
		ts.Check(err)
		ts.Check(os.WriteFile(path, []byte(strings.ReplaceAll(string(b), "${"+args[0]+"}", srv.URL)), 0o600))
	}
}

// cmdDeliveries is `deliveries NAME`: print what simulator NAME delivered,
// one line each ("to=+E164 ref=ROW_ID"), so that a script can count them.
func cmdDeliveries(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: deliveries NAME")
	}
	s := ts.Value(simsKey{}).(map[string]*scriptSim)[args[0]]
	if s == nil {
		ts.Fatalf("deliveries: no simulator %s (simserve it first)", args[0])
	}
	out := ts.Stdout()
	for _, d := range s.deliveries() {
		fmt.Fprintf(out, "to=%s ref=%s\n", d.To, d.Ref)
	}
}
