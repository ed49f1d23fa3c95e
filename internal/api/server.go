package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/msgq/msgq/internal/bodybudget"
	"github.com/msgq/msgq/internal/groupcommit"
	"github.com/msgq/msgq/internal/store"
)

// Server is the API's HTTP handler. Create it with New, serve Handler(),
// and Close it after the HTTP server has shut down.
type Server struct {
	cfg    Config
	commit *groupcommit.Committer[store.EnqueueParams, store.EnqueueResult]
	// budget holds the bytes of the bodies in flight (Config.MaxPending).
	budget *bodybudget.Budget
	// busy counts 503s for the budget since busyLogged (unix
	// nanoseconds) last logged them.
	busy       atomic.Int64
	busyLogged atomic.Int64

	mu       sync.Mutex
	keys     map[string]cachedKey // by token hash
	limiters map[string]*rate.Limiter
	bg       sync.WaitGroup // last_used_at writes
}

type cachedKey struct {
	key   *store.APIKey
	until time.Time
}

// New starts the server's committer.
func New(cfg Config) *Server {
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.MaxBatchBody <= 0 {
		cfg.MaxBatchBody = DefaultMaxBatchBody
	}
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = DefaultMaxPending
	}
	if cfg.Rate <= 0 {
		cfg.Rate = DefaultRate
	}
	if cfg.Burst <= 0 {
		cfg.Burst = DefaultBurst
	}
	if cfg.MaxItems <= 0 {
		cfg.MaxItems = DefaultMaxItems
	}
	if cfg.MaxCommit <= 0 {
		cfg.MaxCommit = 512
	}
	if cfg.RetryAfter <= 0 {
		cfg.RetryAfter = DefaultRetryAfter
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.ConnectionLost == nil {
		cfg.ConnectionLost = func(error) bool { return false }
	}
	s := &Server{cfg: cfg, keys: map[string]cachedKey{}, limiters: map[string]*rate.Limiter{}, budget: bodybudget.New(cfg.MaxPending)}
	// Concurrent single sends go into one MessageEnqueueMany, so one fsync
	// acknowledges many requests (internal/groupcommit).
	s.commit = groupcommit.Start(cfg.MaxCommit, 30*time.Second, cfg.Store.MessageEnqueueMany)
	return s
}

// Close stops the committer. Call it after the HTTP server has shut down,
// so that every request still in a handler has had its answer.
func (s *Server) Close() {
	s.commit.Close()
	s.bg.Wait()
}

// Handler serves the API.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+PathOpenAPI, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(OpenAPI)
	})
	mux.Handle("POST "+PathMessages, s.authed(s.postMessage))
	mux.Handle("GET "+PathMessages, s.authed(s.getByKey))
	mux.Handle("GET "+PathMessages+"/{id}", s.authed(s.getByID))
	mux.Handle("POST "+PathBatch, s.authed(s.postBatch))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: "no such endpoint: " + r.Method + " " + r.URL.Path + " (see " + PathOpenAPI + ")"})
	})
	return s.accessLog(mux)
}

// handler is an endpoint for a caller whose key was accepted.
type handler func(w http.ResponseWriter, r *http.Request, k *store.APIKey)

// statusWriter keeps the status for the access log.
type statusWriter struct {
	http.ResponseWriter
	status int
	tenant string
	keyID  string
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// accessLog logs each request on the server's logger: successes at debug,
// refusals at info, failures at warn. It logs the key's id, never the key,
// and the path without its query (which may carry a key K of the
// caller's).
func (s *Server) accessLog(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		lvl := slog.LevelDebug
		switch {
		case sw.status >= 500:
			lvl = slog.LevelWarn
		case sw.status >= 400:
			lvl = slog.LevelInfo
		}
		// Checked first: at 10,000 requests a second the boxed fields of
		// a line nobody keeps (success at debug) are a real cost.
		if !s.cfg.Log.Enabled(r.Context(), lvl) {
			return
		}
		s.cfg.Log.Log(r.Context(), lvl, "api", "method", r.Method, "path", r.URL.Path, "status", sw.status,
			"ms", float64(time.Since(start).Microseconds())/1000, "tenant", sw.tenant, "api_key", sw.keyID, "remote", r.RemoteAddr)
	})
}

// authed checks the bearer key and its rate before the endpoint runs.
func (s *Server) authed(h handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || !LooksLikeToken(strings.TrimSpace(token)) {
			unauthorized(w, "give an API key: Authorization: Bearer msgq_... (msgq api-keys create)")
			return
		}
		k, err := s.lookup(r.Context(), HashToken(strings.TrimSpace(token)))
		if errors.Is(err, store.ErrNotFound) {
			unauthorized(w, "the API key is unknown or revoked")
			return
		}
		if err != nil {
			s.storeError(w, err)
			return
		}
		if sw, ok := w.(*statusWriter); ok {
			sw.tenant, sw.keyID = k.Tenant, k.ID
		}
		if wait, ok := s.allow(k.ID); !ok {
			w.Header().Set("Retry-After", strconv.Itoa(wait))
			writeError(w, &Error{Status: http.StatusTooManyRequests, Code: CodeRateLimited,
				Message: fmt.Sprintf("this key's request rate is over %g/s (burst %d); retry after %ds", s.cfg.Rate, s.cfg.Burst, wait)})
			return
		}
		h(w, r, k)
	})
}

func unauthorized(w http.ResponseWriter, msg string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="msgq"`)
	writeError(w, &Error{Status: http.StatusUnauthorized, Code: CodeUnauthorized, Message: msg})
}

// lookup finds the live key with the hash, from the cache while its entry
// is fresh. Unknown hashes are not cached: a key just created works at
// once, and only a revoke waits for the cache.
func (s *Server) lookup(ctx context.Context, hash string) (*store.APIKey, error) {
	now := time.Now()
	s.mu.Lock()
	c, ok := s.keys[hash]
	s.mu.Unlock()
	if ok && now.Before(c.until) {
		return c.key, nil
	}
	k, err := s.cfg.Store.APIKeyLookup(ctx, hash)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.cfg.KeyCache > 0 {
		s.keys[hash] = cachedKey{k, now.Add(s.cfg.KeyCache)}
	}
	s.mu.Unlock()
	// last_used_at is written once per look-up (so at most once per
	// KeyCache), beside the request: it is for the operator, and a
	// request must not wait for it.
	s.bg.Go(func() {
		wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.cfg.Store.APIKeyUsed(wctx, k.ID); err != nil {
			s.cfg.Log.Debug("api: recording a key's use failed", "api_key", k.ID, "err", err)
		}
	})
	return k, nil
}

// allow takes one request from the key's rate, or says how many seconds
// to wait.
func (s *Server) allow(id string) (int, bool) {
	s.mu.Lock()
	l := s.limiters[id]
	if l == nil {
		l = rate.NewLimiter(rate.Limit(s.cfg.Rate), s.cfg.Burst)
		s.limiters[id] = l
	}
	s.mu.Unlock()
	if l.Allow() {
		return 0, true
	}
	r := l.Reserve()
	d := r.Delay()
	r.Cancel()
	return max(1, int((d+time.Second-1)/time.Second)), false
}

// writeError answers an error object.
func writeError(w http.ResponseWriter, e *Error) {
	writeJSON(w, e.Status, e)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// storeError answers a store that failed: 503 with Retry-After when the
// connection is lost (the client retries with its key, which is safe),
// else 500.
func (s *Server) storeError(w http.ResponseWriter, err error) {
	if s.cfg.ConnectionLost(err) {
		s.cfg.Log.Warn("api: store unreachable; answering 503", "err", err)
		writeUnavailable(w, s.cfg.RetryAfter)
		return
	}
	s.cfg.Log.Error("api: store error", "err", err)
	writeError(w, &Error{Status: http.StatusInternalServerError, Code: CodeInternal, Message: "the store failed; retry with the same Idempotency-Key"})
}

// writeUnavailable is the 503 of a store that cannot be reached: safe to
// retry with the same key after Retry-After (whole seconds, rounded up).
func writeUnavailable(w http.ResponseWriter, retryAfter time.Duration) {
	w.Header().Set("Retry-After", strconv.Itoa(int((retryAfter+time.Second-1)/time.Second)))
	writeError(w, &Error{Status: http.StatusServiceUnavailable, Code: CodeStoreUnavailable, Message: "the store is unreachable; retry with the same Idempotency-Key"})
}

// Unavailable answers every request with that 503, but the OpenAPI
// document, which needs no store: what msgq serve answers while a store
// that was unreachable at its start has not opened yet (a load balancer
// or client then retries, as it does after a 503 mid-run).
func Unavailable(retryAfter time.Duration) http.Handler {
	if retryAfter <= 0 {
		retryAfter = DefaultRetryAfter
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Path == PathOpenAPI {
			w.Header().Set("Content-Type", "application/json")
			w.Write(OpenAPI)
			return
		}
		writeUnavailable(w, retryAfter)
	})
}

// readBody reads a body of at most limit bytes into memory reserved
// from the budget, answering 413 (too large), 503 (no room now) or 400
// itself. Neither refusal reads the body when its Content-Length gives
// the reason. The caller must call release once nothing made from the
// body is held any more: when the answer is written.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, limit int64) (body []byte, release func(), ok bool) {
	body, reserved, err := s.budget.Read(http.MaxBytesReader(w, r.Body, limit), r.ContentLength, limit)
	release = func() { s.budget.Give(reserved) }
	if err == nil {
		return body, release, true
	}
	release()
	var mbe *http.MaxBytesError
	switch {
	case errors.Is(err, bodybudget.ErrTooLarge), errors.As(err, &mbe):
		// The rest of the body is not read: do not let the client send
		// it on this connection.
		w.Header().Set("Connection", "close")
		writeError(w, &Error{Status: http.StatusRequestEntityTooLarge, Code: CodeBodyTooLarge, Message: fmt.Sprintf("the body is over %d bytes", limit)})
	case errors.Is(err, bodybudget.ErrBusy):
		s.logBusy()
		w.Header().Set("Connection", "close")
		w.Header().Set("Retry-After", strconv.Itoa(int(busyRetryAfter/time.Second)))
		writeError(w, &Error{Status: http.StatusServiceUnavailable, Code: CodeBusy,
			Message: "busy: too many request bytes in progress; retry later with the same Idempotency-Key"})
	default:
		writeError(w, &Error{Status: http.StatusBadRequest, Code: CodeMalformedJSON, Message: "could not read the body"})
	}
	return nil, nil, false
}

// busyRetryAfter is the Retry-After of a 503 busy: the bodies in flight
// are written and answered within milliseconds, so room comes back soon.
const busyRetryAfter = time.Second

// logBusy logs the budget's 503s at most once a second, with how many
// there were: a flood must not turn into a flood of log lines.
func (s *Server) logBusy() {
	n := s.busy.Add(1)
	now := time.Now().UnixNano()
	last := s.busyLogged.Load()
	if now-last < int64(time.Second) || !s.busyLogged.CompareAndSwap(last, now) {
		return
	}
	s.busy.Add(-n)
	s.cfg.Log.Warn("api: requests refused for now (503): too many request bytes in progress",
		"refused", n, "max_pending", s.cfg.MaxPending)
}

// SendResult is what POST answers for a send: the message row (the
// fields of `msgq show -o json` but history, attempts and inbound, which
// a GET gives), whether this request created it, and a challenge's steps.
type SendResult struct {
	*store.Message
	AttemptCount int `json:"attempt_count"`
	// Attempts shadows the row's count of them, as in `msgq show -o json`
	// (where it is the array of calls): a POST has none to give.
	Attempts   []store.Attempt  `json:"attempts,omitempty"`
	Replayed   bool             `json:"replayed"`
	Revived    bool             `json:"revived"`
	Challenge  *store.Challenge `json:"challenge,omitempty"`
	Superseded int              `json:"superseded_steps,omitempty"`
}

func (s *Server) postMessage(w http.ResponseWriter, r *http.Request, k *store.APIKey) {
	key := r.Header.Get("Idempotency-Key")
	switch {
	case key == "":
		writeError(w, &Error{Status: http.StatusBadRequest, Code: CodeKeyRequired, Field: "Idempotency-Key", Message: "the Idempotency-Key header is required (1 to 64 characters of A-Za-z0-9._:-)"})
		return
	case !store.ValidKey(key):
		writeError(w, &Error{Status: http.StatusBadRequest, Code: CodeKeyInvalid, Field: "Idempotency-Key", Message: "the Idempotency-Key header must be 1 to 64 characters of A-Za-z0-9._:-"})
		return
	}
	body, release, ok := s.readBody(w, r, s.cfg.MaxBody)
	if !ok {
		return
	}
	// The body's reservation covers what is made from it too (the
	// parsed send, its place in the group commit) until the answer.
	defer release()
	it, perr := s.cfg.Parse(k.Tenant, key, body)
	if perr != nil {
		writeError(w, perr)
		return
	}
	res, err := s.send(r.Context(), it)
	if err != nil {
		s.storeError(w, err)
		return
	}
	if res.err != nil {
		writeError(w, res.err)
		return
	}
	status := http.StatusAccepted
	if res.out.Replayed {
		status = http.StatusOK
		w.Header().Set("Idempotent-Replayed", "true")
	}
	writeJSON(w, status, res.out)
}

// sent is one send's outcome: the answer, or the refusal of the item.
type sent struct {
	out *SendResult
	err *Error
}

// send writes one item: a single through the group commit, a challenge in
// a transaction of its own. The error is the store's (nothing written).
func (s *Server) send(ctx context.Context, it Item) (sent, error) {
	if it.Challenge != nil {
		res, err := s.cfg.Store.ChallengeEnqueue(ctx, it.Challenge)
		if e := itemError(err); e != nil {
			return sent{err: e}, nil
		}
		if err != nil {
			return sent{}, err
		}
		m := res.Challenge.Steps[0].Message
		return sent{out: &SendResult{Message: &m, AttemptCount: m.Attempts, Replayed: res.Replayed, Challenge: res.Challenge, Superseded: res.Superseded}}, nil
	}
	// Once handed over, the write happens whether or not the client waits;
	// the answer waits for it, so a 202 is only sent for a durable row.
	r, err := s.commit.Do(ctx, *it.Single)
	if err != nil {
		return sent{}, err
	}
	return result(r), nil
}

// result is the answer for one item of an enqueue.
func result(r store.EnqueueResult) sent {
	if e := itemError(r.Err); e != nil {
		return sent{err: e}
	}
	m := r.Message
	return sent{out: &SendResult{Message: m, AttemptCount: m.Attempts, Replayed: r.Replayed, Revived: r.Revived}}
}

// itemError is the API's refusal for an item's own store error (a key
// reused, content the store refused), nil for any other.
func itemError(err error) *Error {
	var ce *store.ConflictError
	var ie *store.InvalidError
	switch {
	case errors.As(err, &ce):
		return &Error{Status: http.StatusConflict, Code: CodeKeyReused, ExistingID: ce.ExistingID,
			Message: "the Idempotency-Key is already used by message " + ce.ExistingID + " with a different body"}
	case errors.As(err, &ie):
		return &Error{Status: http.StatusUnprocessableEntity, Code: CodeInvalid, Field: ie.Field, Message: err.Error()}
	}
	return nil
}

func (s *Server) getByID(w http.ResponseWriter, r *http.Request, k *store.APIKey) {
	s.show(w, r, k, r.PathValue("id"), func(m *store.Message) string { return m.ID })
}

func (s *Server) getByKey(w http.ResponseWriter, r *http.Request, k *store.APIKey) {
	key := r.URL.Query().Get("key")
	if key == "" {
		writeError(w, &Error{Status: http.StatusBadRequest, Code: CodeKeyRequired, Field: "key", Message: "give ?key=K, the Idempotency-Key the message was sent with"})
		return
	}
	s.show(w, r, k, key, func(m *store.Message) string { return m.Key })
}

// show answers the tenant's message whose id (or key: field says which)
// is ref. Another tenant's message is not found, as if it did not exist.
// The store's look-up takes an id or a key alike; a path id that is some
// message's key (or a ?key= that is some message's id) is not that
// message.
func (s *Server) show(w http.ResponseWriter, r *http.Request, k *store.APIKey, ref string, field func(*store.Message) string) {
	m, err := s.cfg.Store.MessageGet(r.Context(), k.Tenant, ref)
	if err == nil && field(m) != ref {
		err = store.ErrNotFound
	}
	if errors.Is(err, store.ErrNotFound) {
		writeError(w, &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: fmt.Sprintf("no message %q", ref)})
		return
	}
	if err != nil {
		s.storeError(w, err)
		return
	}
	v, err := s.cfg.Show(r.Context(), s.cfg.Store, m)
	if err != nil {
		s.storeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}
