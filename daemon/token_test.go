package daemon_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
	"gcos/daemon"
	"gcos/gcostest"
	"gcos/gcostest/wait"
	"gcos/oracle"
)

// tokenAPI asks a running daemon's gate over HTTP, each question with a consistency token taken after the writes
// before it (GET /v1/token), as a pipeline that just wrote its registry row does.
type tokenAPI struct {
	t    *testing.T
	ctx  context.Context
	base string
}

func (a tokenAPI) do(method, path string, body []byte, out any) int {
	a.t.Helper()
	req, err := http.NewRequestWithContext(a.ctx, method, a.base+path, bytes.NewReader(body))
	if err != nil {
		a.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			a.t.Fatalf("%s %s: decode: %v", method, path, err)
		}
	}
	return resp.StatusCode
}

func (a tokenAPI) token() string {
	a.t.Helper()
	var tok struct{ Token string }
	if st := a.do("GET", "/v1/token", nil, &tok); st != http.StatusOK || tok.Token == "" {
		a.t.Fatalf("GET /v1/token: %d %+v", st, tok)
	}
	return tok.Token
}

// gate asks about objects (write) with a fresh token, in batches of the gate's limit.
func (a tokenAPI) gate(objects []string) []gcos.GateAnswer {
	a.t.Helper()
	var out []gcos.GateAnswer
	for lo := 0; lo < len(objects); lo += 1000 {
		var batch gcos.GateBatch
		for _, o := range objects[lo:min(lo+1000, len(objects))] {
			batch.Checks = append(batch.Checks, gcos.GateCheck{Object: o, Action: gcos.ActionWrite})
		}
		body, _ := json.Marshal(batch)
		var ans gcos.GateBatchAnswer
		if st := a.do("POST", "/v1/gate?at_least="+url.QueryEscape(a.token()), body, &ans); st != http.StatusOK {
			a.t.Fatalf("POST /v1/gate: %d %+v", st, ans)
		}
		out = append(out, ans.Decisions...)
	}
	return out
}

// allowed lists the objects the gate allows now.
func (a tokenAPI) allowed(objects []string) []string {
	var out []string
	for _, d := range a.gate(objects) {
		if d.Allowed() {
			out = append(out, d.Object)
		}
	}
	return out
}

// revocation is one external governance edit, committed with its change-ledger rows as the registries' writers
// commit them, and its undo (for an edit that turned out to revoke nothing the test asks about).
type revocation struct {
	what       string
	edit, undo []stmt
}

// stmt is one statement and its arguments.
type stmt struct {
	sql  string
	args []any
}

// TestTokenCoversSourceWrites (SPEC §12 freshness): a writer outside GCOS revokes what allowed a high-risk object —
// its lifecycle moves to retired, its collection's coverage status changes, the exception that covered it is
// revoked, the ownership rows of its scope are deactivated — commits the registry row with its change-ledger row,
// takes a token (GET /v1/token) and asks the gate with at_least=<token> over HTTP. Which allowed objects each edit
// revokes is the from-scratch reference's judgement of the substrate after the edit; the gate must block every one
// of them on the first question, and for a reason of its own, not because its wait for the intake ran out. A token
// the database never issued is a 400 and a block.
func TestTokenCoversSourceWrites(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	w := gcostest.Ready(t, gcostest.Options{Births: 2000, Seed: 11, Config: func(cfg *gcos.Config) {
		// An intake that polls seldom: without the wait a question asked right after the commit would read the
		// state before the handoff.
		cfg.Intake.PollInterval = gcos.Duration(300 * time.Millisecond)
		cfg.Scan.CoalesceWindow = gcos.Duration(20 * time.Millisecond)
		cfg.Scan.StormFraction = 1
		cfg.HTTP.InsecureNoAuth = true
		// A slow machine makes the gate wait longer, never answer otherwise: a wait that runs out blocks with its
		// own reason, which the test tells from a decided block.
		cfg.Gate.Timeout = gcos.Duration(30 * time.Second)
		cfg.Gate.RescanDeadline = gcos.Duration(10 * time.Second)
		cfg.Intake.RegistryPoll = gcos.Duration(300 * time.Millisecond)
	}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := w.Daemon(t, daemon.Config{Listener: ln, Version: "test"})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })
	api := tokenAPI{t: t, ctx: ctx, base: "http://" + ln.Addr().String()}
	waitFor(t, done, "the API is ready", func() bool {
		resp, err := http.Get(api.base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	t.Run("a token never issued", func(t *testing.T) {
		var ans struct {
			gcos.GateAnswer
			Error struct{ Code string }
		}
		obj := w.Strings(t, `SELECT collection_name || ':' || entity_code FROM birth_registry ORDER BY id LIMIT 1`)[0]
		st := api.do("GET", "/v1/gate?object="+url.QueryEscape(obj)+"&at_least="+url.QueryEscape("99999999:99999999:"), nil, &ans)
		if st != http.StatusBadRequest || ans.Decision != gcos.GateBlock || ans.Error.Code != gcos.EINVALID {
			t.Fatalf("a never-issued token: %d %+v, want 400, block, %s", st, ans, gcos.EINVALID)
		}
		body, _ := json.Marshal(gcos.GateBatch{Checks: []gcos.GateCheck{{Object: obj, Action: gcos.ActionWrite}}})
		var batch gcos.GateBatchAnswer
		if st := api.do("POST", "/v1/gate?at_least="+url.QueryEscape("99999999:99999999:"), body, &batch); st != http.StatusBadRequest || batch.Decision != gcos.GateBlock {
			t.Fatalf("a never-issued token, batch: %d %+v, want 400 and a block", st, batch)
		}
	})

	// The objects asked about: one per base (the group grain: its other members are judged the same), roots only.
	objects := w.Strings(t, `SELECT DISTINCT ON (collection_name, entity_type, status) collection_name || ':' || entity_code
		FROM birth_registry WHERE parent_code IS NULL ORDER BY collection_name, entity_type, status, id`)
	lowRisk := w.Store.Config().Gate.LowRiskClasses
	reference := func() *oracle.Reference {
		ref, err := oracle.ReferenceAlso(ctx, w.Store, objects)
		if err != nil {
			t.Fatalf("reference: %v", err)
		}
		return ref
	}
	// allowedHighRisk: the high-risk objects both the reference and the gate (asked with a token) allow.
	allowedHighRisk := func() []string {
		ref := reference()
		var hr []string
		for _, o := range objects {
			if d := ref.Gate(o, gcos.ActionWrite); d.Allowed() && gcos.IsHighRisk(d.RiskClass, lowRisk) {
				hr = append(hr, o)
			}
		}
		return api.allowed(hr)
	}
	exec := func(stmts []stmt) {
		t.Helper()
		err := pgx.BeginFunc(ctx, w.Pool, func(tx pgx.Tx) error {
			for _, s := range stmts {
				if _, err := tx.Exec(ctx, s.sql, s.args...); err != nil {
					return fmt.Errorf("%s: %w", s.sql, err)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// revoke applies the first edit that revokes an allowed high-risk object, checks the gate blocks every object it
	// revoked on the first question with a token taken after the commit, and undoes it.
	revoke := func(t *testing.T, allowed []string, edits []revocation) {
		t.Helper()
		if len(allowed) == 0 {
			t.Fatal("no allowed high-risk object to revoke")
		}
		for _, e := range edits {
			exec(e.edit)
			ref := reference()
			var revoked []string
			for _, o := range allowed {
				if !ref.Gate(o, gcos.ActionWrite).Allowed() {
					revoked = append(revoked, o)
				}
			}
			if len(revoked) == 0 {
				exec(e.undo)
				continue
			}
			for _, a := range api.gate(revoked) {
				switch {
				case a.Allowed():
					t.Errorf("%s: %s allowed with a token taken after the commit: %s", e.what, a.Object, a.Reason)
				case strings.Contains(a.Reason, "waited gate.timeout"):
					t.Errorf("%s: %s blocked only because the wait for the intake ran out: %s", e.what, a.Object, a.Reason)
				}
			}
			t.Logf("%s: %d allowed high-risk objects revoked, each blocked on the first question with a token", e.what, len(revoked))
			exec(e.undo) // the world as it was, for the next edit
			return
		}
		t.Fatalf("no edit of %d revoked one of %d allowed high-risk objects", len(edits), len(allowed))
	}

	t.Run("lifecycle to retired", func(t *testing.T) {
		allowed := allowedHighRisk()
		var edits []revocation
		for _, o := range allowed {
			coll, code, _ := strings.Cut(o, ":")
			lifecycle := func(status, action string) []stmt {
				return []stmt{{`UPDATE birth_registry SET status = $3 WHERE collection_name = $1 AND entity_code = $2`, []any{coll, code, status}},
					{`INSERT INTO registry_changelog (entity_type, entity_code, action, changed_by)
					  SELECT entity_type, entity_code, $3, 'registry-sync' FROM birth_registry WHERE collection_name = $1 AND entity_code = $2`,
						[]any{coll, code, action}}}
			}
			edits = append(edits, revocation{what: "retire " + o, edit: lifecycle("retired", "retire"), undo: lifecycle("active", "update")})
		}
		revoke(t, allowed, edits)
	})

	t.Run("coverage status", func(t *testing.T) {
		allowed := allowedHighRisk()
		var edits []revocation
		seen := map[string]bool{}
		for _, o := range allowed {
			coll, _, _ := strings.Cut(o, ":")
			if seen[coll] {
				continue
			}
			seen[coll] = true
			old := w.Strings(t, `SELECT coalesce(coverage_status, '') FROM collection_registry WHERE collection_name = $1`, coll)
			if len(old) == 0 {
				continue
			}
			for _, status := range []string{"BIRTH_REQUIRED", "BIRTH_DEFERRED_NEEDS_REVIEW", "BIRTH_EXEMPT_SYSTEM"} {
				if status == old[0] {
					continue
				}
				coverage := func(status string) []stmt {
					return []stmt{{`UPDATE collection_registry SET coverage_status = nullif($2, '') WHERE collection_name = $1`, []any{coll, status}},
						{`INSERT INTO registry_changelog (entity_type, entity_code, action, changed_by) VALUES ('collection', $1, 'update', 'registry-sync')`, []any{coll}}}
				}
				edits = append(edits, revocation{what: "collection " + coll + " " + old[0] + " → " + status, edit: coverage(status), undo: coverage(old[0])})
			}
		}
		revoke(t, allowed, edits)
	})

	t.Run("exception revoked", func(t *testing.T) {
		// First grant: an exception on every orphan base of a scope, so that objects blocked as orphans become
		// allowed by their exception; then revoke them all.
		before := allowedHighRisk()
		exec([]stmt{{`INSERT INTO governance_exception (exception_id, scope_code, entity_type, collection_name, approval_ref, expires_at)
			SELECT 'EXC-TOKEN-' || row_number() OVER (), scope, object_class, source_registry, 'APR-TOKEN', now() + interval '1 hour'
			FROM (SELECT DISTINCT scope, object_class, source_registry FROM v_candidate_effective
			      WHERE coverage_outcome = 'orphan' AND lifecycle_status = 'active') o`, nil},
			{`INSERT INTO registry_changelog (entity_type, entity_code, action, changed_by)
			 SELECT 'exception', exception_id, 'create', 'registry-sync' FROM governance_exception WHERE exception_id LIKE 'EXC-TOKEN-%'`, nil}})
		var excepted []string
		wait.For(t, 2*time.Minute, "objects allowed by their new exceptions", func() bool {
			excepted = nil
			for _, o := range allowedHighRisk() {
				if !slices.Contains(before, o) {
					excepted = append(excepted, o)
				}
			}
			return len(excepted) > 0
		})
		revoke(t, excepted, []revocation{{what: "exceptions revoked",
			edit: []stmt{{`UPDATE governance_exception SET status = 'revoked' WHERE exception_id LIKE 'EXC-TOKEN-%'`, nil},
				{`INSERT INTO registry_changelog (entity_type, entity_code, action, changed_by)
				 SELECT 'exception', exception_id, 'update', 'registry-sync' FROM governance_exception WHERE exception_id LIKE 'EXC-TOKEN-%'`, nil}}}})
	})

	// No change-ledger row at all: the registry watch sees the edit, and the token covers it too.
	t.Run("ownership deactivated silently", func(t *testing.T) {
		allowed := allowedHighRisk()
		var edits []revocation
		for _, scope := range w.Strings(t, `SELECT scope_code FROM governance_object_ownership WHERE status = 'active'
			GROUP BY scope_code ORDER BY count(*) DESC, scope_code`) {
			move := func(from, to string) []stmt {
				return []stmt{{`UPDATE governance_object_ownership SET status = $3 WHERE scope_code = $1 AND status = $2`, []any{scope, from, to}}}
			}
			edits = append(edits, revocation{what: "every owner of scope " + scope + " revoked with no change-ledger row",
				edit: move("active", "withdrawn"), undo: move("withdrawn", "active")})
		}
		revoke(t, allowed, edits)
	})

	t.Run("ownership deactivated", func(t *testing.T) {
		allowed := allowedHighRisk()
		var edits []revocation
		for _, scope := range w.Strings(t, `SELECT scope_code FROM governance_object_ownership WHERE status = 'active'
			GROUP BY scope_code ORDER BY count(*) DESC, scope_code`) {
			move := func(from, to string) []stmt {
				return []stmt{{`INSERT INTO registry_changelog (entity_type, entity_code, action, changed_by)
					SELECT 'ownership', id::text, 'update', 'registry-sync' FROM governance_object_ownership WHERE scope_code = $1 AND status = $2`, []any{scope, from}},
					{`UPDATE governance_object_ownership SET status = $3 WHERE scope_code = $1 AND status = $2`, []any{scope, from, to}}}
			}
			edits = append(edits, revocation{what: "every owner of scope " + scope + " revoked", edit: move("active", "revoked"), undo: move("revoked", "active")})
		}
		revoke(t, allowed, edits)
	})
}
