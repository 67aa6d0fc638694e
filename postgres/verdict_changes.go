package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
)

// The verdict change log (gcos_verdict_change): a scan records, just before it writes, every group and object row
// whose candidate verdict or coverage outcome its write changes, with the dirty mark that made it scan. The row's
// stored values are read in the writing transaction, which holds the rows' claim, so before → after is exact. A
// change is stamped when it is written (clock_timestamp), not when its transaction began: a mark the statement sees
// committed before it, so change − mark is never negative.

// recordGroupChangesSQL: $1 ruleset, $2 run, $3 group keys, $4 their new verdicts, $5 their new coverage outcomes
// ("" when not relevant).
const recordGroupChangesSQL = `
INSERT INTO gcos_verdict_change (subject, key, group_key, scope, ruleset_version, verdict_before, verdict_after,
    coverage_before, coverage_after, why, dirtied_at, run_id, changed_at)
SELECT 'group', c.group_key, c.group_key, g.scope, $1, c.candidate_verdict, u.verdict, cov.outcome, nullif(u.coverage, ''),
       CASE WHEN c.dirty THEN c.dirty_reason ELSE 'rescan' END, CASE WHEN c.dirty THEN c.dirtied_at END, $2, clock_timestamp()
FROM unnest($3::text[], $4::text[], $5::text[]) AS u(key, verdict, coverage)
JOIN governance_candidate_state c ON c.group_key = u.key AND c.ruleset_version = $1
JOIN governance_group g ON g.group_key = c.group_key
LEFT JOIN governance_candidate_coverage cov ON cov.candidate_ref = c.group_key AND cov.ruleset_version = $1
WHERE (c.candidate_verdict, coalesce(cov.outcome, '')) IS DISTINCT FROM (u.verdict, u.coverage)
RETURNING ` + changeAnnounceColumns

// changeAnnounceColumns are what a coverage change's announcement needs.
const changeAnnounceColumns = `id, subject, key, coalesce(object_ref, ''), group_key, coalesce(scope, ''),
    coalesce(coverage_before, ''), coalesce(coverage_after, '')`

// recordObjectChangesSQL is recordGroupChangesSQL for active object rows ($3 candidate keys).
const recordObjectChangesSQL = `
INSERT INTO gcos_verdict_change (subject, key, object_ref, group_key, scope, ruleset_version, verdict_before,
    verdict_after, coverage_before, coverage_after, why, dirtied_at, run_id, changed_at)
SELECT 'object', o.candidate_key, o.object_ref, o.group_key, g.scope, $1, o.candidate_verdict, u.verdict, cov.outcome,
       nullif(u.coverage, ''), CASE WHEN o.dirty THEN o.dirty_reason ELSE 'rescan' END, CASE WHEN o.dirty THEN o.dirtied_at END, $2,
       clock_timestamp()
FROM unnest($3::text[], $4::text[], $5::text[]) AS u(key, verdict, coverage)
JOIN governance_candidate_object o ON o.candidate_key = u.key AND o.ruleset_version = $1 AND o.lifecycle_status = 'active'
JOIN governance_group g ON g.group_key = o.group_key
LEFT JOIN governance_candidate_coverage cov ON cov.candidate_ref = 'object:' || o.candidate_key AND cov.ruleset_version = $1
WHERE (o.candidate_verdict, coalesce(cov.outcome, '')) IS DISTINCT FROM (u.verdict, u.coverage)
RETURNING ` + changeAnnounceColumns

// RecordVerdictChangesTx records, in tx, what writing vs will change (keys: group keys, or candidate keys with objects).
func RecordVerdictChangesTx(ctx context.Context, tx pgx.Tx, ruleset, runID string, objects bool, keys []string, vs []CandidateValues) error {
	if len(keys) == 0 {
		return nil
	}
	verdicts, coverage := make([]string, len(vs)), make([]string, len(vs))
	for i, v := range vs {
		verdicts[i] = string(v.Verdict)
		if v.Verdict == gcos.VerdictRelevant {
			coverage[i] = string(v.Coverage)
		}
	}
	sql := recordGroupChangesSQL
	if objects {
		sql = recordObjectChangesSQL
	}
	rows, err := tx.Query(ctx, sql, ruleset, runID, keys, verdicts, coverage)
	if err != nil {
		return fmt.Errorf("record verdict changes: %w", err)
	}
	type change struct {
		ID                                                int64
		Subject, Key, Object, Group, Scope, Before, After string
	}
	changes, err := pgx.CollectRows(rows, pgx.RowToStructByPos[change])
	if err != nil {
		return fmt.Errorf("record verdict changes: %w", err)
	}
	// A change of coverage outcome is a lifecycle fact: an owner assigned or revoked, an exception granted.
	for _, c := range changes {
		eventType, ok := gcos.CoverageEvent(c.Before, c.After)
		if !ok {
			continue
		}
		payload := map[string]any{"group_key": c.Group, "coverage_before": c.Before, "coverage_after": c.After,
			"run_id": runID, "ruleset_version": ruleset}
		if c.Scope != "" {
			payload["scope"] = c.Scope
		}
		table := "governance_candidate_state"
		if c.Subject == "object" {
			table, payload["object_ref"] = "governance_candidate_object", c.Object
		}
		if err := AnnounceTx(ctx, tx, Emit{EventType: eventType, SubjectTable: table, SubjectRef: c.Key,
			CollectionName: table, EntityCode: c.Key, CorrelationID: fmt.Sprintf("verdict_change:%d", c.ID),
			Payload: payload}); err != nil {
			return err
		}
	}
	return nil
}

// VerdictChangeSubjects are what a verdict change is of (gcos_verdict_change.subject).
var VerdictChangeSubjects = []string{"group", "object"}

// VerdictChange is one row of the verdict change log.
type VerdictChange struct {
	ID             int64      `json:"id"`
	ChangedAt      time.Time  `json:"changed_at"`
	Subject        string     `json:"subject"` // group or object
	Key            string     `json:"key"`
	ObjectRef      *string    `json:"object_ref"`
	GroupKey       string     `json:"group_key"`
	Scope          *string    `json:"scope"`
	RulesetVersion string     `json:"ruleset_version"`
	VerdictBefore  string     `json:"verdict_before"`
	VerdictAfter   string     `json:"verdict_after"`
	CoverageBefore *string    `json:"coverage_before"`
	CoverageAfter  *string    `json:"coverage_after"`
	Why            string     `json:"why"` // the dirty mark's reason, or rescan
	DirtiedAt      *time.Time `json:"dirtied_at"`
	// LatencySeconds is changed_at − dirtied_at: from the mark to the new verdict (nil for a rescan).
	LatencySeconds *float64 `json:"latency_seconds"`
	RunID          string   `json:"run_id"`
}

// VerdictChangeFilter selects changes: newer than Since (zero: any), at most Limit, newest first.
type VerdictChangeFilter struct {
	Since time.Time
	Limit int
}

// VerdictChanges lists the verdict change log, newest first.
func (s *Store) VerdictChanges(ctx context.Context, f VerdictChangeFilter) ([]VerdictChange, error) {
	var err error
	if f.Limit, err = CheckLimit("limit", f.Limit, DefaultChangeLimit, MaxChangeLimit); err != nil {
		return nil, err
	}
	var since any
	if !f.Since.IsZero() {
		since = f.Since
	}
	rows, err := s.pool.Query(ctx, `SELECT id, changed_at, subject, key, object_ref, group_key, scope, ruleset_version,
			verdict_before, verdict_after, coverage_before, coverage_after, why, dirtied_at,
			extract(epoch FROM changed_at - dirtied_at)::float8, run_id
		FROM gcos_verdict_change WHERE $1::timestamptz IS NULL OR changed_at > $1
		ORDER BY changed_at DESC, id DESC LIMIT $2`, since, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("verdict changes: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (VerdictChange, error) {
		var c VerdictChange
		err := r.Scan(&c.ID, &c.ChangedAt, &c.Subject, &c.Key, &c.ObjectRef, &c.GroupKey, &c.Scope, &c.RulesetVersion,
			&c.VerdictBefore, &c.VerdictAfter, &c.CoverageBefore, &c.CoverageAfter, &c.Why, &c.DirtiedAt, &c.LatencySeconds, &c.RunID)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("verdict changes: %w", err)
	}
	return out, nil
}
