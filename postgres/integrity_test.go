package postgres_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"gcos"
	"gcos/postgres"
	"gcos/scan"
)

// TestHistoryKept: candidate state, rulesets, groups and GCOS's run and audit ledgers refuse TRUNCATE; rows under a
// superseded ruleset are marked superseded at activation; audit_ref links the audit row of the operation that wrote
// a row (backfill capture, activation); issue_ref follows a group's open finding and is cleared when it auto-closes.
func TestHistoryKept(t *testing.T) {
	t.Parallel()
	b := setup(t, 600)
	first := b.backfill(t)
	b.activate(t, first.RulesetVersion)

	t.Run("truncate is refused", func(t *testing.T) {
		for _, table := range []string{"governance_candidate_state", "governance_candidate_object", "governance_candidate_coverage",
			"governance_ruleset", "governance_group", "candidate_scan_run", "candidate_scan_attempt", "governance_audit_row"} {
			tx, err := b.pool.Begin(b.ctx)
			if err != nil {
				t.Fatal(err)
			}
			_, err = tx.Exec(b.ctx, `TRUNCATE `+table+` CASCADE`)
			_ = tx.Rollback(b.ctx)
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != "23001" || !strings.Contains(pgErr.Message, "never truncated") {
				t.Fatalf("TRUNCATE %s: %v, want restrict_violation", table, err)
			}
		}
	})

	t.Run("the backfill's rows link its capture's audit row", func(t *testing.T) {
		if n := b.count(t, `SELECT count(*) FROM governance_candidate_state c
			WHERE c.ruleset_version = $1 AND NOT EXISTS (SELECT 1 FROM governance_audit_row a JOIN registry_changelog r ON r.id = a.changelog_id
			    WHERE r.id::text = c.audit_ref AND r.entity_type = 'governance_snapshot' AND r.action = 'capture')`, first.RulesetVersion); n != 0 {
			t.Fatalf("%d seeded rows do not link the capture's audit row", n)
		}
	})

	t.Run("issue_ref follows the open finding", func(t *testing.T) {
		key := b.strs(t, `SELECT group_key FROM governance_candidate_state WHERE ruleset_version = $1
			AND risk_class NOT IN ('read/descriptive') ORDER BY group_key LIMIT 1`, first.RulesetVersion)[0]
		b.exec(t, `UPDATE governance_candidate_state SET scan_time = now() - interval '2 days', stale_after = now() - interval '1 second' WHERE group_key = $1`, key)
		if _, err := scan.New(b.store).ExpireStale(b.ctx); err != nil {
			t.Fatal(err)
		}
		ref := b.count(t, `SELECT coalesce(issue_ref, 0) FROM governance_candidate_state WHERE group_key = $1 AND ruleset_version = $2`, key, first.RulesetVersion)
		open := b.count(t, `SELECT coalesce(max(id), -1) FROM system_issues WHERE coalesce_key = $1 AND status = 'open'`,
			gcos.CoalesceKey(gcos.IssueCandidateStale, key))
		if ref == 0 || ref != open {
			t.Fatalf("issue_ref %d, open candidate_stale finding %d", ref, open)
		}
		b.world().ScanAll(t, postgres.ModeIncremental)
		if n := b.count(t, `SELECT count(*) FROM system_issues WHERE id = $1 AND status = 'resolved'`, ref); n != 1 {
			t.Fatal("the rescan did not close the stale finding")
		}
		if n := b.count(t, `SELECT count(*) FROM governance_candidate_state WHERE issue_ref IS NOT NULL AND group_key = $1`, key); n != 0 {
			t.Fatal("issue_ref still points at the closed finding")
		}
	})

	t.Run("activation marks the old rows superseded and links the carried rows", func(t *testing.T) {
		b.exec(t, `UPDATE measurement_registry SET enabled = false WHERE measurement_id = (SELECT min(measurement_id) FROM measurement_registry WHERE enabled)`)
		next, created := b.sb12Compute(t, "history-proposer")
		if !created || next.Version == first.RulesetVersion {
			t.Fatalf("no new ruleset: %s (created %v)", next.Version, created)
		}
		res := b.activate(t, next.Version)
		for _, table := range []string{"governance_candidate_state", "governance_candidate_object"} {
			if n := b.count(t, `SELECT count(*) FROM `+table+` WHERE ruleset_version = $1 AND lifecycle_status = 'active'`, first.RulesetVersion); n != 0 {
				t.Fatalf("%s: %d rows under the superseded ruleset still active", table, n)
			}
			if n := b.count(t, `SELECT count(*) FROM `+table+` WHERE ruleset_version = $1 AND lifecycle_status = 'superseded'`, next.Version); n != 0 {
				t.Fatalf("%s: %d rows under the active ruleset marked superseded", table, n)
			}
			if n := b.count(t, `SELECT count(*) FROM `+table+` WHERE ruleset_version = $1 AND audit_ref IS DISTINCT FROM $2`, next.Version, fmt.Sprint(res.AuditID)); n != 0 {
				t.Fatalf("%s: %d carried rows do not link the activation's audit row %d", table, n, res.AuditID)
			}
		}
		if n := b.count(t, `SELECT count(*) FROM governance_candidate_state WHERE ruleset_version = $1 AND lifecycle_status = 'superseded'`, first.RulesetVersion); n == 0 {
			t.Fatal("no row under the old ruleset was marked superseded")
		}
	})
}
