package gcostest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"gcos"
	"gcos/daemon"
	"gcos/gate"
	"gcos/postgres"
	"gcos/scan"
)

// What the store's and the gate's tests ask of a world: run its scans and its intake to the end, and find an
// object of a group or a base.

// ScanAll runs scan ticks of mode (expired rows too) until one finds nothing to scan, and returns the groups
// scanned or seeded.
func (w *World) ScanAll(t testing.TB, mode string) int {
	t.Helper()
	total := 0
	runID := ""
	for {
		res, err := scan.New(w.Store).ScanTick(w.Ctx, scan.ScanOptions{Mode: mode, RunID: runID, Expired: true})
		if err != nil {
			t.Fatalf("scan: %v", err)
		}
		runID = res.RunID
		total += res.Scanned + res.Seeded
		if res.Claimed == 0 || res.Scanned+res.Seeded == 0 {
			return total
		}
	}
}

// IntakeAll runs the intake until the change ledger's and the births' cursors have passed every row written so far
// (each tail holds back behind transactions in flight elsewhere, so one pass may not reach them).
func (w *World) IntakeAll(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(w.Ctx, 2*time.Minute)
	defer cancel()
	worker := w.Daemon(t, daemon.Config{}).Intake
	lastChange := w.Count(t, `SELECT coalesce(max(id), 0) FROM registry_changelog`)
	// The births' tail is keyed by (born_at, id).
	for w.Count(t, `SELECT count(*) FROM gov_worker_cursor c
		WHERE (c.source = 'registry_changelog' AND c.position_id >= $1)
		   OR (c.source = 'birth_registry' AND (c.position_tstz, c.position_id) >=
		       (SELECT born_at, id FROM birth_registry ORDER BY born_at DESC, id DESC LIMIT 1))`, lastChange) < 2 {
		if _, err := worker.Once(ctx); err != nil {
			t.Fatalf("intake: %v", err)
		}
		select {
		case <-ctx.Done():
			t.Fatal("the intake never passed the change ledger's last row")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// ObjectOf returns one parent-less object (collection:code) of a group that has no object row.
func (w *World) ObjectOf(t testing.TB, key string) string {
	t.Helper()
	var ref string
	err := w.Pool.QueryRow(w.Ctx, `
		SELECT br.collection_name || ':' || br.entity_code FROM birth_registry br
		JOIN governance_group g ON g.object_class = br.entity_type AND g.source_registry = br.collection_name AND g.lifecycle_status = br.status
		WHERE g.group_key = $1 AND br.parent_code IS NULL
		  AND NOT EXISTS (SELECT 1 FROM governance_candidate_object o WHERE o.object_ref = br.collection_name || ':' || br.entity_code)
		ORDER BY br.id LIMIT 1`, key).Scan(&ref)
	if err != nil {
		t.Fatalf("no object in group %s: %v", key, err)
	}
	return ref
}

// BaseWhere returns a (class, registry, lifecycle) base whose groups, taken together, satisfy a HAVING condition
// on v_candidate_effective, among classes no object row holds; and the scope of its orphan group, if any.
func (w *World) BaseWhere(t testing.TB, having string) (base [3]string, orphanScope string) {
	t.Helper()
	if err := w.Pool.QueryRow(w.Ctx, `
		SELECT object_class, source_registry, lifecycle_status,
		       coalesce(min(scope) FILTER (WHERE coverage_outcome = 'orphan'), '')
		FROM v_candidate_effective
		WHERE object_class NOT IN (SELECT object_type FROM governance_candidate_object)
		GROUP BY 1, 2, 3 HAVING `+having+`
		ORDER BY 1, 2, 3 LIMIT 1`).Scan(&base[0], &base[1], &base[2], &orphanScope); err != nil {
		t.Fatalf("no base having %s: %v", having, err)
	}
	return base, orphanScope
}

// ObjectOfBase returns a parent-less birth of a base.
func (w *World) ObjectOfBase(t testing.TB, base [3]string) string {
	t.Helper()
	var ref string
	if err := w.Pool.QueryRow(w.Ctx, `
		SELECT collection_name || ':' || entity_code FROM birth_registry
		WHERE entity_type = $1 AND collection_name = $2 AND status = $3 AND parent_code IS NULL
		ORDER BY id LIMIT 1`, base[0], base[1], base[2]).Scan(&ref); err != nil {
		t.Fatalf("no object of %v: %v", base, err)
	}
	return ref
}

// Digest is an md5 over a query's rows in order, to prove rows unchanged byte for byte.
func (w *World) Digest(t testing.TB, query string) string {
	t.Helper()
	var d string
	if err := w.Pool.QueryRow(w.Ctx, `SELECT coalesce(md5(string_agg(x::text, E'\n' ORDER BY x::text)), '') FROM (`+query+`) x`).Scan(&d); err != nil {
		t.Fatalf("digest %s: %v", query, err)
	}
	return d
}

// DirtyGroups is the number of dirty groups under the current ruleset.
func DirtyGroups(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var n int64
	err := pool.QueryRow(ctx, `SELECT count(*) FROM governance_candidate_state c JOIN v_current_ruleset cr USING (ruleset_version)
		WHERE c.dirty`).Scan(&n)
	return n, err
}

// FindingOpen reports whether an open GCOS finding of issue (any subject) exists.
func FindingOpen(ctx context.Context, pool *pgxpool.Pool, issue gcos.IssueType) (bool, error) {
	var open bool
	err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM system_issues
		WHERE issue_type = $1 AND status = 'open' AND coalesce_key LIKE 'gov:%')`, string(issue)).Scan(&open)
	return open, err
}

// NotHeldAnnouncement selects (a condition on system_issues) the findings that are not about a held signal of an
// inactive event type, which the announcements of every finding, run and snapshot raise while the vocabulary is
// not active.
const NotHeldAnnouncement = `NOT (issue_type IN ('issue_event_gap', 'handoff_unregistered_type') AND coalesce_key ~ ':governance\.')`

// HandOff is the gate's view of the intake (gate.WithHandOff) in a test with no daemon: it runs the intake itself,
// pass after pass, until every source row committed before the bound is handed off, as a running daemon's would
// have, and then reads the present. What the world holds already is handed off at once, so that a question asked
// later waits only for what the test itself wrote since.
func (w *World) HandOff(t testing.TB) gate.HandOff {
	t.Helper()
	worker := w.Daemon(t, daemon.Config{}).Intake
	stage := worker.Stage
	var mu sync.Mutex // a worker makes one pass at a time
	handOff := func(ctx context.Context, at time.Time) (postgres.SourcePresent, error) {
		mu.Lock()
		defer mu.Unlock()
		for {
			p, err := stage.Present(ctx, at)
			if err != nil || len(p.Waiting) == 0 {
				return p, err
			}
			at = p.At
			if _, err := worker.Once(ctx); err != nil {
				return p, err
			}
		}
	}
	ctx, cancel := context.WithTimeout(w.Ctx, 2*time.Minute)
	defer cancel()
	// A world never backfilled has no cursor yet: a question with a token blocks there, as it would in a daemon.
	if _, err := handOff(ctx, time.Time{}); err != nil && gcos.ErrorCode(err) != gcos.ENOTFOUND {
		t.Fatalf("hand off the world: %v", err)
	}
	return handOff
}
