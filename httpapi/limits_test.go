package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"gcos"
	"gcos/gate"
	"gcos/gcostest"
	"gcos/gcostest/wait"
	"gcos/httpapi"
	"gcos/postgres"
)

// serveReal serves e's store through httpapi.NewServer on a real loopback socket with limits, and returns its
// address and its log.
func serveReal(t *testing.T, e *env, limits gcos.HTTPConfig) (string, *gcostest.LogBuffer) {
	t.Helper()
	return serveStore(t, e.store, limits)
}

// serveStore is serveReal for any store.
func serveStore(t *testing.T, store *postgres.Store, limits gcos.HTTPConfig) (string, *gcostest.LogBuffer) {
	t.Helper()
	return serveWithRegistry(t, store, limits, prometheus.NewRegistry())
}

// serveWithRegistry is serveStore with the server's metrics in reg, for tests that read them in process.
func serveWithRegistry(t *testing.T, store *postgres.Store, limits gcos.HTTPConfig, reg *prometheus.Registry) (string, *gcostest.LogBuffer) {
	t.Helper()
	limits.Listen = "127.0.0.1:0"
	limits.ReaderTokens, limits.OperatorTokens = []string{readerToken}, []string{operatorToken}
	logs := &gcostest.LogBuffer{}
	srv, err := httpapi.NewServer(httpapi.Config{Store: store, HTTP: limits, Registry: reg,
		Logger: slog.New(slog.NewTextHandler(logs, nil)), Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String(), logs
}

// closedByServer reads c until the server closes it; it fails the test if that takes longer than a generous
// deadline (the limits under test are a second or two; without them the connection stays open for minutes).
func closedByServer(t *testing.T, c net.Conn, what string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	var got bytes.Buffer
	_, err := io.Copy(&got, c)
	if got.Len() > 0 && !bytes.HasPrefix(got.Bytes(), []byte("HTTP/1.1 408 ")) {
		t.Errorf("%s: the server answered %q, want 408 or a closed connection", what, got.String())
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Errorf("%s: the server still holds the connection after 30 s", what)
	}
}

// TestServerCutsOffSlowClients: a client that announces a body and never sends it, or never finishes its headers,
// loses its connection after the read timeouts instead of holding it.
func TestServerCutsOffSlowClients(t *testing.T) {
	e := newEnv(t, 0, false)
	addr, _ := serveReal(t, e, gcos.HTTPConfig{ReadHeaderTimeout: gcos.Duration(time.Second), ReadTimeout: gcos.Duration(2 * time.Second)})
	for what, req := range map[string]string{
		"a body announced and never sent": "POST /v1/cursors/src/reset HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + operatorToken +
			"\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{",
		"headers never finished": "GET /v1/summary HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ",
	} {
		t.Run(what, func(t *testing.T) {
			t.Parallel()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := io.WriteString(c, req); err != nil {
				t.Fatal(err)
			}
			closedByServer(t, c, what)
		})
	}
}

// TestServerClosesIdleConnections: 500 keep-alive connections that sent one request and went quiet are all
// closed by the server after its idle timeout.
func TestServerClosesIdleConnections(t *testing.T) {
	e := newEnv(t, 0, false)
	addr, _ := serveReal(t, e, gcos.HTTPConfig{IdleTimeout: gcos.Duration(time.Second)})
	const conns = 500
	var wg sync.WaitGroup
	var served, closed atomic.Int64
	errs := make(chan error, conns)
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
				errs <- err
				return
			}
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				errs <- err
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || resp.Close {
				errs <- fmt.Errorf("status %d, close %v: want a 200 on a kept-alive connection", resp.StatusCode, resp.Close)
				return
			}
			served.Add(1)
			// Now idle: the next read must end because the server closed the connection.
			_ = c.SetReadDeadline(time.Now().Add(60 * time.Second))
			if _, err := br.ReadByte(); err == nil {
				errs <- errors.New("the server sent bytes on an idle connection")
				return
			} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
				errs <- errors.New("the idle connection is still open after 60 s")
				return
			}
			closed.Add(1)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if served.Load() != conns || closed.Load() != conns {
		t.Fatalf("served %d, closed by the server %d, of %d connections", served.Load(), closed.Load(), conns)
	}
}

// TestServerShedsLoadBeyondItsCap: with every reader place taken, a read answers 503 with Retry-After at once,
// while the gate (its own places) and /healthz still answer; freed places serve again.
func TestServerShedsLoadBeyondItsCap(t *testing.T) {
	e := newEnv(t, 2000, true)
	const capacity = 2
	reg := prometheus.NewRegistry()
	addr, logs := serveWithRegistry(t, e.store, gcos.HTTPConfig{MaxConcurrent: capacity, ReadTimeout: gcos.Duration(time.Minute)}, reg)
	base := "http://" + addr
	get := func(path string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest("GET", base+path, nil)
		req.Header.Set("Authorization", "Bearer "+readerToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	// Occupy every place with requests whose handlers wait for a body that has not arrived yet.
	holders := make([]net.Conn, capacity)
	for i := range holders {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /v1/cursors/src/reset HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 16\r\n\r\n{", operatorToken)
		holders[i] = c
	}
	// Probe only once both holders are inside their handlers: a probe answered while a holder is still being read
	// would take its place and shed the holder instead.
	inProgress := func() float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "gcos_http_requests_in_progress" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "class" && l.GetValue() == "read" {
						return m.GetGauge().GetValue()
					}
				}
			}
		}
		t.Fatal("no gcos_http_requests_in_progress{class=\"read\"} gauge")
		return 0
	}
	if !wait.Until(30*time.Second, func() bool { return inProgress() >= capacity }) {
		t.Fatalf("the %d held requests never reached their handlers (%v in progress)", capacity, inProgress())
	}
	shed, body := get("/v1/summary")
	if shed.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("with %d requests in progress and a cap of %d, a read answered %d: %s", capacity, capacity, shed.StatusCode, body)
	}
	if shed.Header.Get("Retry-After") == "" || !strings.Contains(string(body), gcos.EUNAVAILABLE) {
		t.Errorf("the shed answer lacks Retry-After or a JSON error: %v %s", shed.Header, body)
	}
	if resp, b := get("/v1/gate?object=nowhere:x"); resp.StatusCode != http.StatusOK {
		t.Errorf("the gate answered %d while the readers' places were full: %s", resp.StatusCode, b)
	}
	if resp, _ := get("/healthz"); resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz answered %d while the readers' places were full", resp.StatusCode)
	}
	// Finish the held requests; their places serve again.
	for _, c := range holders {
		if _, err := io.WriteString(c, `"to":"start"}   `); err != nil {
			t.Fatal(err)
		}
	}
	ok := wait.Until(30*time.Second, func() bool {
		resp, _ := get("/v1/summary")
		return resp.StatusCode == http.StatusOK
	})
	if !ok {
		t.Fatal("reads are still shed after the held requests finished")
	}
	if strings.Contains(logs.String(), "level=ERROR") {
		t.Errorf("shedding load logged errors:\n%s", logs)
	}
}

// TestServerBoundsDatabaseWork: a read blocked by a lock answers 503 after http.request_timeout instead of
// hanging, and a client that gives up is not logged as an error.
func TestServerBoundsDatabaseWork(t *testing.T) {
	e := newEnv(t, 2000, true)
	addr, logs := serveReal(t, e, gcos.HTTPConfig{RequestTimeout: gcos.Duration(time.Second)})
	tx, err := e.pool.Begin(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(e.ctx) }()
	if _, err := tx.Exec(e.ctx, `LOCK TABLE governance_candidate_state IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	call := func(ctx context.Context, path string) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+path, nil)
		req.Header.Set("Authorization", "Bearer "+readerToken)
		return http.DefaultClient.Do(req)
	}
	ctx, cancel := context.WithTimeout(e.ctx, 60*time.Second)
	defer cancel()
	resp, err := call(ctx, "/v1/summary")
	if err != nil {
		t.Fatalf("a read behind a lock got no answer: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a read behind a lock answered %d, want 503: %s", resp.StatusCode, b)
	}
	// A client that gives up while its read waits.
	gone, giveUp := context.WithTimeout(e.ctx, 200*time.Millisecond)
	defer giveUp()
	if _, err := call(gone, "/v1/groups"); err == nil {
		t.Fatal("the client's own deadline did not end its request")
	}
	// The server notices when its query is canceled; wait for the request counter to show the answer.
	wait.Until(30*time.Second, func() bool {
		resp, err := call(e.ctx, "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		m, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return strings.Contains(string(m), `route="GET /v1/groups"`)
	})
	if strings.Contains(logs.String(), "level=ERROR") {
		t.Errorf("a timed-out read or a client that left was logged as an error:\n%s", logs)
	}
}

// TestGateIsNotStarvedByReaders: forty clients read /v1/invariant in a loop while every connection of the shared
// pool is taken; the gate, on its own pool, gives every object the same decision it gave idle (never a block for
// lack of an answer), and the readers are served the invariant computed once, with its as_of.
func TestGateIsNotStarvedByReaders(t *testing.T) {
	e := newEnv(t, 3000, true)
	cfg := gcos.DefaultConfig()
	// Long enough for a loaded CI machine under -race; a gate waiting on the shared pool's taken connection still
	// times out whatever the length.
	cfg.Gate.Timeout = gcos.Duration(5 * time.Second)
	open := func(conns int32) *pgxpool.Pool {
		pc := e.pool.Config().Copy()
		pc.MaxConns = conns
		p, err := pgxpool.NewWithConfig(e.ctx, pc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		return p
	}
	shared, gatePool := open(1), open(2)
	store := postgres.New(shared, cfg, nil).WithGatePool(gatePool)
	addr, _ := serveStore(t, store, gcos.HTTPConfig{ReadCacheInterval: gcos.Duration(time.Hour)})
	base := "http://" + addr
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 30 * time.Second}
	get := func(path string, v any) int {
		req, _ := http.NewRequest("GET", base+path, nil)
		req.Header.Set("Authorization", "Bearer "+readerToken)
		resp, err := client.Do(req)
		if err != nil {
			t.Error(err)
			return 0
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Error(err)
		}
		return resp.StatusCode
	}
	var objects []string
	rows, err := e.pool.Query(e.ctx, `SELECT collection_name || ':' || entity_code FROM birth_registry ORDER BY id LIMIT 200`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var o string
		if err := rows.Scan(&o); err != nil {
			t.Fatal(err)
		}
		objects = append(objects, o)
	}
	rows.Close()
	decide := func(o string) gate.GateResult {
		var res gate.GateResult
		if code := get("/v1/gate?object="+url.QueryEscape(o), &res); code != 200 {
			t.Errorf("gate %s: status %d", o, code)
		}
		return res
	}
	idle := map[string]string{}
	allowed := 0
	for _, o := range objects {
		res := decide(o)
		idle[o] = res.Decision
		if res.Decision == gcos.GateAllow {
			allowed++
		}
	}
	if allowed == 0 {
		t.Fatal("no object is allowed idle: the comparison below could not see a starved gate")
	}
	var first httpapi.InvariantView
	if code := get("/v1/invariant", &first); code != 200 || first.AsOf == nil {
		t.Fatalf("invariant: %d, as_of %v", code, first.AsOf)
	}

	// Take the shared pool's only connection, as forty slow ledger queries would.
	hog, err := shared.Acquire(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hog.Release()
	stop := make(chan struct{})
	var readers sync.WaitGroup
	stopReaders := sync.OnceFunc(func() { close(stop); readers.Wait() })
	defer stopReaders() // before the test ends, also when it fails
	var reads, bad atomic.Int64
	for range 40 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				var v httpapi.InvariantView
				if code := get("/v1/invariant", &v); code != 200 || v.AsOf == nil || !v.AsOf.Equal(*first.AsOf) {
					bad.Add(1)
				}
				reads.Add(1)
			}
		}()
	}
	for _, o := range objects {
		res := decide(o)
		if res.Decision != idle[o] {
			t.Errorf("%s: %s beside the readers, %s idle: %v", o, res.Decision, idle[o], res.Reasons)
		}
		for _, r := range res.Reasons {
			if strings.Contains(r, "could not read the candidate state") {
				t.Fatalf("the gate was starved: %s", r)
			}
		}
	}
	stopReaders()
	if reads.Load() < 40 || bad.Load() > 0 {
		t.Errorf("the readers got %d answers, %d of them not the cached invariant", reads.Load(), bad.Load())
	}
}
