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
       CASE WHEN c.dirty THEN c.dirty_reason ELSE 'rescan' END, CASE WHEN c.dirty THEN c.dirtied_at ELSE ` + runStartSQL + ` END, $2, clock_timestamp()
FROM unnest($3::text[], $4::text[], $5::text[]) AS u(key, verdict, coverage)
JOIN governance_candidate_state c ON c.group_key = u.key AND c.ruleset_version = $1
JOIN governance_group g ON g.group_key = c.group_key
LEFT JOIN governance_candidate_coverage cov ON cov.candidate_ref = c.group_key AND cov.ruleset_version = $1
WHERE (c.candidate_verdict, coalesce(cov.outcome, '')) IS DISTINCT FROM (u.verdict, u.coverage)
RETURNING ` + changeAnnounceColumns

// runStartSQL is the mark of a change no dirty mark asked for (a re-scan: the full audit, a gate's synchronous
// re-scan of an expired row): the start of the run that looked, so every change carries a latency.
const runStartSQL = `(SELECT r.started_at FROM candidate_scan_run r WHERE r.run_id = $2)`

// changeAnnounceColumns are what a coverage change's announcement needs.
const changeAnnounceColumns = `id, subject, key, coalesce(object_ref, ''), group_key, coalesce(scope, ''),
    coalesce(coverage_before, ''), coalesce(coverage_after, '')`

// recordObjectChangesSQL is recordGroupChangesSQL for active object rows ($3 candidate keys).
const recordObjectChangesSQL = `
INSERT INTO gcos_verdict_change (subject, key, object_ref, group_key, scope, ruleset_version, verdict_before,
    verdict_after, coverage_before, coverage_after, why, dirtied_at, run_id, changed_at)
SELECT 'object', o.candidate_key, o.object_ref, o.group_key, g.scope, $1, o.candidate_verdict, u.verdict, cov.outcome,
       nullif(u.coverage, ''), CASE WHEN o.dirty THEN o.dirty_reason ELSE 'rescan' END, CASE WHEN o.dirty THEN o.dirtied_at ELSE ` + runStartSQL + ` END, $2,
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
	ID             int64     `json:"id"`
	ChangedAt      time.Time `json:"changed_at"`
	Subject        string    `json:"subject"` // group or object
	Key            string    `json:"key"`
	ObjectRef      *string   `json:"object_ref"`
	GroupKey       string    `json:"group_key"`
	Scope          *string   `json:"scope"`
	RulesetVersion string    `json:"ruleset_version"`
	VerdictBefore  string    `json:"verdict_before"`
	VerdictAfter   string    `json:"verdict_after"`
	CoverageBefore *string   `json:"coverage_before"`
	CoverageAfter  *string   `json:"coverage_after"`
	Why            string    `json:"why"` // the dirty mark's reason, or rescan
	// DirtiedAt is when the mark that made the scan look was made; for a rescan, when its run began.
	DirtiedAt *time.Time `json:"dirtied_at"`
	// LatencySeconds is changed_at − dirtied_at: from the mark to the new verdict.
	LatencySeconds *float64 `json:"latency_seconds"`
	RunID          string   `json:"run_id"`
}

// changeColumns are what a reader of the log gets of a change: latency_seconds is changed_at − dirtied_at.
const changeColumns = `v.id, v.changed_at, v.subject, v.key, v.object_ref, v.group_key, v.scope, v.ruleset_version,
	v.verdict_before, v.verdict_after, v.coverage_before, v.coverage_after, v.why, v.dirtied_at,
	extract(epoch FROM v.changed_at - v.dirtied_at)::float8, v.run_id`

func scanChange(r pgx.CollectableRow) (VerdictChange, error) {
	var c VerdictChange
	err := r.Scan(&c.ID, &c.ChangedAt, &c.Subject, &c.Key, &c.ObjectRef, &c.GroupKey, &c.Scope, &c.RulesetVersion,
		&c.VerdictBefore, &c.VerdictAfter, &c.CoverageBefore, &c.CoverageAfter, &c.Why, &c.DirtiedAt, &c.LatencySeconds, &c.RunID)
	return c, err
}

// ChangePage is one answer of the verdict change log (SPEC §13 feed).
type ChangePage struct {
	AsOf    time.Time       `json:"as_of"`
	Changes []VerdictChange `json:"changes"`
	// Next is the cursor to read on from: the changes after the last one here (after=Next).
	Next string `json:"next"`
	// More says changes committed before this read are not in it yet (the page was full): ask again at once.
	More bool `json:"more"`

	seen, window *gcos.ConsistencyToken // the cursor's snapshot and the page's window (ChangesAfter's pages only)
}

// CursorAfter is the cursor just past change c of the page (ChangesAfter's): reading on from it returns the changes
// after c, as Next does after the last.
func (p ChangePage) CursorAfter(c VerdictChange) string {
	if p.seen == nil || (!p.More && len(p.Changes) > 0 && p.Changes[len(p.Changes)-1].ID == c.ID) {
		return p.Next
	}
	return gcos.ChangeCursor{Seen: *p.seen, Upto: p.window, AfterAt: c.ChangedAt, AfterID: c.ID}.String()
}

// ChangeQuery selects one answer of the verdict change log (GET /v1/changes): After (a cursor, ChangesFromStart or
// ChangesFromNow) pages it in commit order; else Since (non-zero) reads it oldest first up to the answer's AsOf;
// else the newest Limit changes, newest first, with the cursor to follow from. Limit 0 is the default.
type ChangeQuery struct {
	After string
	Since time.Time
	Limit int
}

// Changes answers q (ChangeQuery).
func (s *Store) Changes(ctx context.Context, q ChangeQuery) (ChangePage, error) {
	limit, err := CheckLimit("limit", q.Limit, DefaultChangeLimit, MaxChangeLimit)
	if err != nil {
		return ChangePage{}, err
	}
	switch {
	case q.After != "" && !q.Since.IsZero():
		return ChangePage{}, gcos.Errorf(gcos.EINVALID, "give after (a cursor) or since (a time), not both")
	case q.After != "":
		return s.changesAfter(ctx, q.After, limit)
	case !q.Since.IsZero():
		return s.changesSince(ctx, q.Since, limit)
	}
	return s.latestChanges(ctx, limit)
}

// Cursor words GET /v1/changes?after= accepts besides a cursor.
const (
	ChangesFromStart = "start" // the oldest change the log retains
	ChangesFromNow   = "now"   // the changes committed after this read
)

// changeWindowSQL reads the changes of the transactions a cursor has not seen ($1) that its window ($2) sees
// committed, after its position ($3, $4), in the order they were written. A transaction a snapshot does not see
// as committed has an id at or above its xmin, so the index on xid bounds the read.
const changeWindowSQL = `SELECT ` + changeColumns + ` FROM gcos_verdict_change v
	WHERE v.xid >= pg_snapshot_xmin($1::pg_snapshot) AND NOT pg_visible_in_snapshot(v.xid, $1::pg_snapshot)
	  AND pg_visible_in_snapshot(v.xid, $2::pg_snapshot)
	  AND ($3::timestamptz IS NULL OR (v.changed_at, v.id) > ($3::timestamptz, $4::bigint))
	ORDER BY v.changed_at, v.id LIMIT $5`

// changesAfter reads the verdict change log after a cursor (an earlier answer's Next, ChangesFromStart or
// ChangesFromNow), at most limit changes, in commit order: one answer holds the changes of the transactions that
// committed since the cursor's snapshot and before this read (or, while a window is being paged, the rest of that
// window), so a reader that follows Next receives every change exactly once whatever order transactions were
// given ids and committed in. A full page says More. A cursor this database did not issue is EINVALID; one whose
// changes may have been pruned since (scan.verdict_changes_keep) is EGONE.
func (s *Store) changesAfter(ctx context.Context, after string, limit int) (ChangePage, error) {
	var err error
	var cur gcos.ChangeCursor
	if after != ChangesFromStart && after != ChangesFromNow {
		if cur, err = gcos.ParseChangeCursor(after); err != nil {
			return ChangePage{}, err
		}
	}
	page := ChangePage{Changes: []VerdictChange{}}
	err = pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var presentText string
		var prunedBelow uint64
		if err := tx.QueryRow(ctx, `SELECT pg_current_snapshot()::text, clock_timestamp(), pruned_below::text::bigint
			FROM gcos_verdict_change_horizon`).Scan(&presentText, &page.AsOf, &prunedBelow); err != nil {
			return err
		}
		present, err := gcos.ParseConsistencyToken(presentText)
		if err != nil {
			return err
		}
		switch after {
		case ChangesFromNow:
			page.Next = gcos.ChangeCursor{Seen: present}.String()
			return nil
		case ChangesFromStart:
			// Everything below the horizon is pruned: the retained log starts there.
			from := max(prunedBelow, 1)
			cur = gcos.ChangeCursor{Seen: gcos.ConsistencyToken{Xmin: from, Xmax: from}}
		default:
			if !present.Covers(cur.Seen) || (cur.Upto != nil && !present.Covers(*cur.Upto)) {
				return gcos.Errorf(gcos.EINVALID, "cursor %s was not issued by this database: it names transactions not committed yet", gcos.Quote(after))
			}
			if cur.Seen.Xmin < prunedBelow {
				return gcos.Errorf(gcos.EGONE, "cursor %s: changes after it were pruned (scan.verdict_changes_keep); read again from after=%s or after=%s",
					gcos.Quote(after), ChangesFromStart, ChangesFromNow)
			}
		}
		window := present
		if cur.Upto != nil {
			window = *cur.Upto
		}
		var at any
		if cur.Upto != nil {
			at = cur.AfterAt
		}
		rows, err := tx.Query(ctx, changeWindowSQL, cur.Seen.String(), window.String(), at, cur.AfterID, limit+1)
		if err != nil {
			return err
		}
		if page.Changes, err = pgx.CollectRows(rows, scanChange); err != nil {
			return err
		}
		page.seen, page.window = &cur.Seen, &window
		next := gcos.ChangeCursor{Seen: window}
		if page.More = len(page.Changes) > limit; page.More {
			page.Changes = page.Changes[:limit]
			last := page.Changes[limit-1]
			next = gcos.ChangeCursor{Seen: cur.Seen, Upto: &window, AfterAt: last.ChangedAt, AfterID: last.ID}
		}
		page.Next = next.String()
		return nil
	})
	if err != nil {
		if gcos.ErrorCode(err) != gcos.EINTERNAL {
			return ChangePage{}, err
		}
		return ChangePage{}, fmt.Errorf("verdict changes after a cursor: %w", err)
	}
	return page, nil
}

// latestChanges reads the newest limit changes, newest first (the dashboard's list), with the cursor of this read:
// a reader that follows it from there receives every change committed after.
func (s *Store) latestChanges(ctx context.Context, limit int) (ChangePage, error) {
	page := ChangePage{Changes: []VerdictChange{}}
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var presentText string
		if err := tx.QueryRow(ctx, `SELECT pg_current_snapshot()::text, clock_timestamp()`).Scan(&presentText, &page.AsOf); err != nil {
			return err
		}
		present, err := gcos.ParseConsistencyToken(presentText)
		if err != nil {
			return err
		}
		page.Next = gcos.ChangeCursor{Seen: present}.String()
		rows, err := tx.Query(ctx, `SELECT `+changeColumns+` FROM gcos_verdict_change v ORDER BY v.changed_at DESC, v.id DESC LIMIT $1`, limit)
		if err != nil {
			return err
		}
		page.Changes, err = pgx.CollectRows(rows, scanChange)
		return err
	})
	if err != nil {
		return ChangePage{}, fmt.Errorf("latest verdict changes: %w", err)
	}
	return page, nil
}

// changeHorizonSQL is the instant below which no change can still commit: the clock, or the start of the oldest
// open transaction that holds a transaction id (a writer of the log claims its rows FOR UPDATE before it stamps a
// change, so it holds one by then, and its changes are stamped after its start), less a microsecond.
const changeHorizonSQL = `SELECT least(clock_timestamp(),
	(SELECT min(xact_start) FROM pg_stat_activity
	 WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_xid IS NOT NULL)) - interval '1 microsecond'`

// changesSince reads the changes stamped after since (zero: the oldest retained) and at or before the answer's
// AsOf, oldest first: a reader that asks again with since = the previous AsOf receives every change once. AsOf is
// held below the start of every open writing transaction (changeHorizonSQL), read before the changes are, so a
// change that commits later is stamped after it. A full page says More, and its AsOf is the last change's time (the
// page never ends inside one instant).
func (s *Store) changesSince(ctx context.Context, since time.Time, limit int) (ChangePage, error) {
	page := ChangePage{Changes: []VerdictChange{}}
	// Two statements of a READ COMMITTED transaction: the second's snapshot sees every writer the first saw open
	// that has ended since.
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, changeHorizonSQL).Scan(&page.AsOf); err != nil {
			return err
		}
		var from any
		if !since.IsZero() {
			from = since
		}
		rows, err := tx.Query(ctx, `SELECT `+changeColumns+` FROM gcos_verdict_change v
			WHERE ($1::timestamptz IS NULL OR v.changed_at > $1) AND v.changed_at <= $2
			ORDER BY v.changed_at, v.id LIMIT $3`, from, page.AsOf, limit+1)
		if err != nil {
			return err
		}
		if page.Changes, err = pgx.CollectRows(rows, scanChange); err != nil {
			return err
		}
		if page.More = len(page.Changes) > limit; !page.More {
			return nil
		}
		// End the page before the instant it would cut through; an instant with more changes than a page is sent
		// whole.
		edge := page.Changes[limit].ChangedAt
		keep := limit
		for keep > 0 && page.Changes[keep-1].ChangedAt.Equal(edge) {
			keep--
		}
		if keep == 0 {
			rows, err := tx.Query(ctx, `SELECT `+changeColumns+` FROM gcos_verdict_change v WHERE v.changed_at = $1 ORDER BY v.id`, edge)
			if err != nil {
				return err
			}
			if page.Changes, err = pgx.CollectRows(rows, scanChange); err != nil {
				return err
			}
			keep = len(page.Changes)
		}
		page.Changes = page.Changes[:keep]
		page.AsOf = page.Changes[keep-1].ChangedAt
		return nil
	})
	if err != nil {
		return ChangePage{}, fmt.Errorf("verdict changes since %s: %w", since.UTC().Format(time.RFC3339Nano), err)
	}
	return page, nil
}
