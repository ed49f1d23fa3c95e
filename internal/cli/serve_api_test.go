package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"

	"github.com/msgq/msgq/internal/store"
)

// apiClient calls a real `msgq serve` and validates every response
// against the OpenAPI document by a real validator library.
type apiClient struct {
	t    *testing.T
	base string
	v    validator.Validator
}

type apiResp struct {
	status int
	header http.Header
	body   map[string]any
	raw    []byte
}

func newAPIClient(t *testing.T, base string) *apiClient {
	t.Helper()
	spec, err := os.ReadFile(filepath.Join("..", "..", "docs", "openapi.json"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := libopenapi.NewDocument(spec)
	if err != nil {
		t.Fatal(err)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatalf("validator: %v", errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		for _, e := range verrs {
			t.Errorf("docs/openapi.json: %s: %s", e.Message, e.Reason)
		}
		t.FailNow()
	}
	return &apiClient{t: t, base: base, v: v}
}

func (c *apiClient) do(method, path, key string, hdr map[string]string, body string) apiResp {
	c.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		c.t.Fatal(err)
	}
	resp.Body = io.NopCloser(bytes.NewReader(raw))
	if ok, errs := c.v.ValidateHttpResponse(req, resp); !ok {
		for _, e := range errs {
			c.t.Errorf("%s %s -> %d: response does not match docs/openapi.json: %s: %s (%s)", method, path, resp.StatusCode, e.Message, e.Reason, raw)
		}
	}
	r := apiResp{status: resp.StatusCode, header: resp.Header, raw: raw}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(raw, &r.body); err != nil {
			c.t.Fatalf("%s %s: %v: %s", method, path, err, raw)
		}
	}
	return r
}

func (c *apiClient) post(key, idem, body string) apiResp {
	c.t.Helper()
	h := map[string]string{}
	if idem != "" {
		h["Idempotency-Key"] = idem
	}
	return c.do(http.MethodPost, "/v1/messages", key, h, body)
}

func want(t *testing.T, what string, r apiResp, status int, code string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("%s: status %d, want %d: %s", what, r.status, status, r.raw)
	}
	if code != "" && r.body["code"] != code {
		t.Fatalf("%s: code %v, want %s: %s", what, r.body["code"], code, r.raw)
	}
}

// apiEnv is a store with two tenants' keys, and a way to start serve.
type apiEnv struct {
	e            *msgqEnv
	b            *backend
	shop, other  string
	otherKeyName string
}

func newAPIEnv(t *testing.T, kind string) *apiEnv {
	t.Helper()
	dir := t.TempDir()
	b := newBackend(t, kind, dir)
	cfg := filepath.Join(dir, "msgq.yaml")
	writeFile(t, cfg, "{}\n")
	e := &msgqEnv{t: t, env: []string{"MSGQ_CONFIG=" + cfg, "MSGQ_STORE=" + b.url}}
	e.run("migrate")
	shop := strings.TrimSpace(e.run("api-keys", "create", "--tenant", "shop", "--name", "checkout"))
	other := strings.TrimSpace(e.run("api-keys", "create", "--tenant", "billing", "--name", "invoices"))
	return &apiEnv{e: e, b: b, shop: shop, other: other, otherKeyName: "invoices"}
}

func startAPI(t *testing.T, e *msgqEnv, args ...string) (*serveProcess, string) {
	t.Helper()
	return startListener(t, e, "serve: listening on ", append([]string{"serve", "--addr", "127.0.0.1:0"}, args...)...)
}

const orderBody = `{"to":"+15551234567","identity":"sim","template":{"name":"order_update","language":"en","parameters":["Ada","1001"]}}`

// TestServeAPI: every status code and header of the contract, against a
// real `msgq serve` on both stores, each response valid by the OpenAPI
// document.
func TestServeAPI(t *testing.T) {
	bothStores(t, func(t *testing.T, kind string) {
		env := newAPIEnv(t, kind)
		st := env.b.watch(t)
		ctx := context.Background()
		p, base := startAPI(t, env.e, "--key-cache", "0")
		c := newAPIClient(t, base)

		// The document itself, identical to docs/openapi.json.
		r := c.do(http.MethodGet, "/v1/openapi.json", "", nil, "")
		spec, _ := os.ReadFile(filepath.Join("..", "..", "docs", "openapi.json"))
		if r.status != 200 || !bytes.Equal(r.raw, spec) {
			t.Fatalf("GET /v1/openapi.json: %d, %d bytes; want docs/openapi.json (%d bytes)", r.status, len(r.raw), len(spec))
		}

		// 401 without a valid key, with WWW-Authenticate.
		for _, key := range []string{"", "nope", "msgq_" + strings.Repeat("a", 52)} {
			r := c.post(key, "k-1", orderBody)
			want(t, "no valid key", r, 401, "unauthorized")
			if !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
				t.Fatalf("401 without WWW-Authenticate: %v", r.header)
			}
		}
		// 400: the Idempotency-Key missing or malformed.
		want(t, "no Idempotency-Key", c.post(env.shop, "", orderBody), 400, "idempotency_key_required")
		want(t, "bad Idempotency-Key", c.post(env.shop, "bad key!", orderBody), 400, "idempotency_key_invalid")
		want(t, "not JSON", c.post(env.shop, "order-1", `{"to":`), 400, "malformed_json")

		// 422: nothing written.
		r = c.post(env.shop, "order-1", `{"to":"+15551234567","text":"hi","tenant":"billing"}`)
		want(t, "unknown field", r, 422, "unknown_field")
		if r.body["field"] != "tenant" {
			t.Fatalf("unknown field named %v, want tenant", r.body["field"])
		}
		r = c.post(env.shop, "order-1", `{"to":"12","text":"hi"}`)
		want(t, "bad number", r, 422, "invalid")
		if r.body["field"] != "to" {
			t.Fatalf("bad number: field %v, want to", r.body["field"])
		}
		want(t, "no content", c.post(env.shop, "order-1", `{"to":"+15551234567"}`), 422, "invalid")
		want(t, "unknown identity", c.post(env.shop, "order-1", `{"to":"+15551234567","text":"hi","identity":"nope"}`), 422, "invalid")
		// A key given twice, at any depth (encoding/json would keep the
		// last): 422 naming it by its path.
		for body, field := range map[string]string{
			`{"to":"+15551234567","text":"hi","to":"+15557654321"}`:                                                                              "to",
			`{"to":"+15551234567","TEXT":"hi","text":"ho"}`:                                                                                      "text",
			`{"to":"+15551234567","template":{"name":"order_update","language":"en","name":"other"}}`:                                            "template.name",
			`{"to":"+15551234567","text":"x","expires_in":"10m","steps":[{"identity":"sim","to":"+1555","to":"+1556","text":"x","after":"2m"}]}`: "steps[0].to",
		} {
			r = c.post(env.shop, "order-1", body)
			want(t, "duplicate key "+field, r, 422, "duplicate_key")
			if r.body["field"] != field || !strings.Contains(r.body["message"].(string), `"`+field+`"`) {
				t.Fatalf("duplicate key: field %v, message %v; want %s named", r.body["field"], r.body["message"], field)
			}
		}
		if _, err := st.MessageGet(ctx, "shop", "order-1"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("after refusals, order-1: %v, want not found", err)
		}

		// 202: written, durable, in the key's tenant.
		r = c.post(env.shop, "order-1", orderBody)
		want(t, "first send", r, 202, "")
		id, _ := r.body["id"].(string)
		if m, err := st.MessageGet(ctx, "shop", "order-1"); err != nil || m.ID != id || m.To != "+15551234567" || m.Payload.Template != "order_update" {
			t.Fatalf("after 202: %+v, %v", m, err)
		}
		// 200: the same key and body, Idempotent-Replayed, nothing written.
		r = c.post(env.shop, "order-1", orderBody)
		want(t, "replay", r, 200, "")
		if r.header.Get("Idempotent-Replayed") != "true" || r.body["id"] != id || r.body["replayed"] != true {
			t.Fatalf("replay: %v %s", r.header, r.raw)
		}
		// 409: the same key, another body, naming the message.
		r = c.post(env.shop, "order-1", `{"to":"+15551234567","text":"other"}`)
		want(t, "reused key", r, 409, "idempotency_key_reused")
		if r.body["existing_id"] != id {
			t.Fatalf("409 names %v, want %s", r.body["existing_id"], id)
		}
		// The same key in another tenant is another message.
		want(t, "other tenant's send", c.post(env.other, "order-1", orderBody), 202, "")
		if n, err := st.MessageCount(ctx, &store.ListParams{}, 0); err != nil || n != 2 {
			t.Fatalf("%d rows, %v; want 2", n, err)
		}

		// GET by id and by key: the fields of msgq show -o json.
		r = c.do(http.MethodGet, "/v1/messages/"+id, env.shop, nil, "")
		want(t, "get by id", r, 200, "")
		var show map[string]any
		if err := json.Unmarshal([]byte(env.e.run("show", id, "--tenant", "shop", "-o", "json")), &show); err != nil {
			t.Fatal(err)
		}
		for k := range show {
			if _, ok := r.body[k]; !ok {
				t.Errorf("GET lacks show -o json's field %q", k)
			}
		}
		for k := range r.body {
			if _, ok := show[k]; !ok {
				t.Errorf("GET has %q, which show -o json has not", k)
			}
		}
		if h, _ := r.body["history"].([]any); len(h) != 1 || r.body["state"] != "queued" {
			t.Fatalf("GET: %s", r.raw)
		}
		want(t, "get by key", c.do(http.MethodGet, "/v1/messages?key=order-1", env.shop, nil, ""), 200, "")
		want(t, "get without key", c.do(http.MethodGet, "/v1/messages", env.shop, nil, ""), 400, "idempotency_key_required")
		want(t, "another tenant's id", c.do(http.MethodGet, "/v1/messages/"+id, env.other, nil, ""), 404, "not_found")
		want(t, "unknown id", c.do(http.MethodGet, "/v1/messages/01JD5Q3XK0M9T4W8Y2B6C1N7PZ", env.shop, nil, ""), 404, "not_found")
		// A path id is an id, a ?key= a key: the store's look-up takes
		// either, the API does not.
		want(t, "a key as a path id", c.do(http.MethodGet, "/v1/messages/order-1", env.shop, nil, ""), 404, "not_found")
		want(t, "an id as ?key=", c.do(http.MethodGet, "/v1/messages?key="+id, env.shop, nil, ""), 404, "not_found")

		// A challenge with a fallback step.
		r = c.post(env.shop, "signup-1", `{"to":"+15551234567","text":"Your code is 123456","expires_in":"10m",`+
			`"steps":[{"identity":"sim","to":"+15551234568","text":"Your code is 123456","after":"2m"}]}`)
		want(t, "challenge", r, 202, "")
		if ch, _ := r.body["challenge"].(map[string]any); ch == nil {
			t.Fatalf("challenge answer without its challenge: %s", r.raw)
		}
		want(t, "challenge without deadline", c.post(env.shop, "signup-2", `{"to":"+15551234567","text":"x",`+
			`"steps":[{"identity":"sim","to":"+15551234568","text":"x","after":"2m"}]}`), 422, "invalid")

		// Batch: a result per item, --file semantics.
		r = c.do(http.MethodPost, "/v1/messages/batch", env.shop, nil, `{"messages":[`+
			`{"key":"b-1","to":"+15551230001","text":"one"},`+
			`{"key":"order-1","to":"+15551234567","identity":"sim","template":{"name":"order_update","language":"en","parameters":["Ada","1001"]}},`+
			`{"key":"order-1","to":"+15551234567","text":"other"},`+
			`{"key":"b-2","to":"12","text":"bad"},`+
			`{"to":"+15551230002","text":"no key"},`+
			`{"key":"b-3","to":"+15551230003","text":"one","text":"two"}]}`)
		want(t, "batch", r, 200, "")
		res, _ := r.body["results"].([]any)
		wantRes := []string{"enqueued", "replayed", "conflict", "invalid", "invalid", "invalid"}
		if len(res) != len(wantRes) {
			t.Fatalf("batch: %s", r.raw)
		}
		for i, w := range wantRes {
			if got := res[i].(map[string]any)["result"]; got != w {
				t.Errorf("batch item %d: %v, want %s: %s", i, got, w, r.raw)
			}
		}
		if len(res) == len(wantRes) {
			if got := res[5].(map[string]any); got["code"] != "duplicate_key" || got["field"] != "text" {
				t.Errorf("batch item with a key twice: %v, want code duplicate_key, field text", got)
			}
		}
		want(t, "empty batch", c.do(http.MethodPost, "/v1/messages/batch", env.shop, nil, `{"messages":[]}`), 422, "invalid")
		want(t, "batch envelope with a key twice", c.do(http.MethodPost, "/v1/messages/batch", env.shop, nil,
			`{"messages":[{"key":"b-4","to":"+15551230004","text":"x"}],"messages":[]}`), 422, "duplicate_key")
		want(t, "batch not JSON", c.do(http.MethodPost, "/v1/messages/batch", env.shop, nil, `[`), 400, "malformed_json")

		// Concurrent single sends are group-committed; each 202 is durable.
		var wg sync.WaitGroup
		codes := make([]int, 64)
		for i := range codes {
			wg.Go(func() {
				req, _ := http.NewRequest(http.MethodPost, base+"/v1/messages", strings.NewReader(fmt.Sprintf(`{"to":"+1555200%04d","text":"hi %d"}`, i, i)))
				req.Header.Set("Authorization", "Bearer "+env.shop)
				req.Header.Set("Idempotency-Key", fmt.Sprintf("many-%02d", i))
				if resp, err := http.DefaultClient.Do(req); err == nil {
					codes[i] = resp.StatusCode
					resp.Body.Close()
				}
			})
		}
		wg.Wait()
		for i, code := range codes {
			if code != 202 {
				t.Fatalf("concurrent send %d: %d", i, code)
			}
			if _, err := st.MessageGet(ctx, "shop", fmt.Sprintf("many-%02d", i)); err != nil {
				t.Fatalf("concurrent send %d answered 202 but: %v", i, err)
			}
		}

		// A revoked key is refused (--key-cache 0: at once).
		env.e.run("api-keys", "revoke", env.otherKeyName)
		want(t, "revoked key", c.do(http.MethodGet, "/v1/messages?key=order-1", env.other, nil, ""), 401, "unauthorized")

		_ = p.proc.Signal(syscall.SIGTERM)
		if err := <-p.done; err != nil {
			t.Fatalf("serve on SIGTERM: %v: %s", err, p.log.String())
		}
		if strings.Contains(p.log.String(), env.shop) {
			t.Fatal("serve logged an API key")
		}

		// 429 with Retry-After past the key's rate; 413 past --max-body.
		p, base = startAPI(t, env.e, "--rate", "0.001", "--burst", "1", "--max-body", "200")
		c = newAPIClient(t, base)
		want(t, "over max-body", c.post(env.shop, "big-1", `{"to":"+15551234567","text":"`+strings.Repeat("x", 300)+`"}`), 413, "body_too_large")
		r = c.post(env.shop, "order-1", orderBody)
		want(t, "over the rate", r, 429, "rate_limited")
		if r.header.Get("Retry-After") == "" {
			t.Fatalf("429 without Retry-After: %v", r.header)
		}
		_ = p.proc.Signal(syscall.SIGTERM)
		if err := <-p.done; err != nil {
			t.Fatalf("serve on SIGTERM: %v: %s", err, p.log.String())
		}
	})
}

// TestServeSIGTERMFinishesInFlight: a real process, a real signal, 16
// clients sending one after another: serve exits 0, every request that got
// an answer got a 202 (none was cut off with an error status), and every
// 202 is in the store.
func TestServeSIGTERMFinishesInFlight(t *testing.T) {
	bothStores(t, func(t *testing.T, kind string) {
		env := newAPIEnv(t, kind)
		st := env.b.watch(t)
		p, base := startAPI(t, env.e)
		const clients = 16
		var (
			mu     sync.Mutex
			acked  []string
			others []int
		)
		first := make(chan struct{}, clients*4)
		var wg sync.WaitGroup
		for c := range clients {
			wg.Go(func() {
				for i := 0; ; i++ {
					key := fmt.Sprintf("term-%02d-%04d", c, i)
					req, _ := http.NewRequest(http.MethodPost, base+"/v1/messages", strings.NewReader(fmt.Sprintf(`{"to":"+1555300%04d","text":"hi %d"}`, i, i)))
					req.Header.Set("Authorization", "Bearer "+env.shop)
					req.Header.Set("Idempotency-Key", key)
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						return // the server closed: no answer, the client would retry
					}
					resp.Body.Close()
					mu.Lock()
					if resp.StatusCode == 202 {
						acked = append(acked, key)
					} else {
						others = append(others, resp.StatusCode)
					}
					mu.Unlock()
					select {
					case first <- struct{}{}:
					default:
					}
				}
			})
		}
		// Signal once sends are flowing: some are in flight at that moment.
		for range clients * 4 {
			<-first
		}
		_ = p.proc.Signal(syscall.SIGTERM)
		wg.Wait()
		if err := <-p.done; err != nil {
			t.Fatalf("serve on SIGTERM: %v: %s", err, p.log.String())
		}
		if !strings.Contains(p.log.String(), "serve: stopped") {
			t.Fatalf("no clean stop: %s", p.log.String())
		}
		if len(others) > 0 {
			t.Fatalf("answers other than 202 around the stop: %v", others)
		}
		if len(acked) < clients*4 {
			t.Fatalf("%d sends answered 202, want at least %d", len(acked), clients*4)
		}
		for _, key := range acked {
			if _, err := st.MessageGet(context.Background(), "shop", key); err != nil {
				t.Fatalf("send %s answered 202 but is not in the store: %v", key, err)
			}
		}
	})
}

// TestServeStoreUnreachable: serve reaches PostgreSQL through a proxy the
// test then cuts: sends get 503 with Retry-After, and nothing is lost.
func TestServeStoreUnreachable(t *testing.T) {
	t.Parallel()
	env := newAPIEnv(t, "postgres")
	px := newTCPProxy(t, "127.0.0.1:5432")
	url := strings.Replace(env.b.url, "127.0.0.1:5432", px.addr, 1)
	if url == env.b.url {
		t.Fatalf("store URL %s does not name 127.0.0.1:5432", env.b.url)
	}
	e := &msgqEnv{t: t, env: append(append([]string{}, env.e.env...), "MSGQ_STORE="+url)}
	p, base := startAPI(t, e, "--key-cache", "1h")
	c := newAPIClient(t, base)
	want(t, "before the cut", c.post(env.shop, "cut-1", orderBody), 202, "")
	px.cut()
	r := c.post(env.shop, "cut-2", orderBody)
	want(t, "store unreachable", r, 503, "store_unavailable")
	if r.header.Get("Retry-After") == "" {
		t.Fatalf("503 without Retry-After: %v", r.header)
	}
	// The server is back: the client's retry with its key is written once.
	px.resume(t)
	retryUntilAccepted(t, c, env.shop, "cut-2")
	want(t, "the retry's replay", c.post(env.shop, "cut-2", orderBody), 200, "")
	_ = p.proc.Signal(syscall.SIGTERM)
	if err := <-p.done; err != nil {
		t.Fatalf("serve after SIGTERM: %v: %s", err, p.log.String())
	}
}

// retryUntilAccepted posts orderBody with key as a client does after a
// 503: again after each Retry-After, until the answer is 202 (any answer
// but 202 or 503 fails the test, and so do five minutes of 503s).
func retryUntilAccepted(t *testing.T, c *apiClient, apiKey, key string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		r := c.post(apiKey, key, orderBody)
		if r.status == 202 {
			return
		}
		want(t, "while the store comes back", r, 503, "store_unavailable")
		if time.Now().After(deadline) {
			t.Fatalf("still 503 five minutes after the store came back")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestServeStartsWhileTheStoreIsUnreachable: a serve whose PostgreSQL is
// down at start listens anyway and answers 503 with Retry-After (the
// OpenAPI document needs no store: 200), and serves sends once the
// server can be reached, with nothing sent before written twice.
func TestServeStartsWhileTheStoreIsUnreachable(t *testing.T) {
	t.Parallel()
	env := newAPIEnv(t, "postgres")
	st := env.b.watch(t)
	px := newTCPProxy(t, "127.0.0.1:5432")
	px.cut()
	url := strings.Replace(env.b.url, "127.0.0.1:5432", px.addr, 1)
	if url == env.b.url {
		t.Fatalf("store URL %s does not name 127.0.0.1:5432", env.b.url)
	}
	e := &msgqEnv{t: t, env: append(append([]string{}, env.e.env...), "MSGQ_STORE="+url)}
	p, base := startAPI(t, e)
	c := newAPIClient(t, base)
	r := c.post(env.shop, "early-1", orderBody)
	want(t, "store down at start", r, 503, "store_unavailable")
	if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra <= 0 {
		t.Fatalf("503 without a Retry-After of whole seconds: %v", r.header)
	}
	if r := c.do("GET", "/v1/openapi.json", "", nil, ""); r.status != 200 {
		t.Fatalf("GET /v1/openapi.json while the store is down: %d", r.status)
	}
	if !strings.Contains(p.log.String(), "answering 503 until it opens") {
		t.Fatalf("serve did not say that the store is unreachable: %s", p.log.String())
	}

	px.resume(t)
	retryUntilAccepted(t, c, env.shop, "early-1")
	if _, err := st.MessageGet(context.Background(), "shop", "early-1"); err != nil {
		t.Fatalf("early-1 answered 202 but is not in the store: %v", err)
	}
	want(t, "the retry's replay", c.post(env.shop, "early-1", orderBody), 200, "")
	_ = p.proc.Signal(syscall.SIGTERM)
	if err := <-p.done; err != nil {
		t.Fatalf("serve after SIGTERM: %v: %s", err, p.log.String())
	}
}

// tcpProxy forwards connections to a server until cut, which closes
// every connection and refuses new ones; resume forwards again, on the
// same address.
type tcpProxy struct {
	addr   string
	target string
	ln     net.Listener
	mu     sync.Mutex
	conns  []net.Conn
	dead   bool
}

func newTCPProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	px := &tcpProxy{addr: ln.Addr().String(), target: target, ln: ln}
	t.Cleanup(px.cut)
	go px.forward(ln)
	return px
}

func (px *tcpProxy) forward(ln net.Listener) {
	for {
		in, err := ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", px.target)
		if err != nil {
			in.Close()
			continue
		}
		px.mu.Lock()
		if px.dead {
			in.Close()
			out.Close()
		}
		px.conns = append(px.conns, in, out)
		px.mu.Unlock()
		go func() { _, _ = io.Copy(out, in); out.Close() }()
		go func() { _, _ = io.Copy(in, out); in.Close() }()
	}
}

// resume listens on the proxy's address again (the port it held, which
// nothing else on this host takes in between but by rare chance).
func (px *tcpProxy) resume(t *testing.T) {
	t.Helper()
	var ln net.Listener
	var err error
	for range 50 {
		if ln, err = net.Listen("tcp", px.addr); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("proxy: listen on %s again: %v", px.addr, err)
	}
	px.mu.Lock()
	px.ln, px.dead, px.conns = ln, false, nil
	px.mu.Unlock()
	go px.forward(ln)
}

func (px *tcpProxy) cut() {
	px.mu.Lock()
	defer px.mu.Unlock()
	px.dead = true
	px.ln.Close()
	for _, c := range px.conns {
		c.Close()
	}
}
