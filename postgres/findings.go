package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"gcos"
)

// Findings live in system_issues, one open row per coalesce_key. system_issues is a substrate table GCOS may not
// alter, so there is no unique index to lean on: a transaction-scoped advisory lock on the key serialises raisers.
// The ruleset a finding was last raised under is kept in business_logic_hash (the identity of the business logic
// that judged it), which is what keys auto-close by (coalesce_key, ruleset_version).

const findingLockSQL = `SELECT pg_advisory_xact_lock(hashtextextended('gcos.finding:' || $1, 0))`

// findingTryLockSQL takes the same lock only when no other transaction holds it (RaiseHeldSignalFindingTx).
const findingTryLockSQL = `SELECT pg_try_advisory_xact_lock(hashtextextended('gcos.finding:' || $1, 0))`

const findingOpenSQL = `
SELECT id, occurrence_count, reopen_count FROM system_issues
WHERE coalesce_key = $1 AND status = 'open'
ORDER BY id LIMIT 1`

const findingRepeatSQL = `
UPDATE system_issues
SET occurrence_count = occurrence_count + 1, last_seen_at = now(), severity = $2, run_id = coalesce($3, run_id),
    business_logic_hash = coalesce($4, business_logic_hash), evidence_snapshot = $5
WHERE id = $1`

const findingLastClosedSQL = `
SELECT id, occurrence_count, reopen_count FROM system_issues
WHERE coalesce_key = $1 AND status = 'resolved'
ORDER BY id DESC LIMIT 1`

const findingReopenSQL = `
UPDATE system_issues
SET status = 'open', reopen_count = reopen_count + 1, occurrence_count = occurrence_count + 1, resolved_at = NULL,
    last_seen_at = now(), severity = $2, run_id = coalesce($3, run_id),
    business_logic_hash = coalesce($4, business_logic_hash), evidence_snapshot = $5
WHERE id = $1`

const findingInsertSQL = `
INSERT INTO system_issues (issue_type, severity, coalesce_key, occurrence_count, reopen_count, business_logic_hash,
                           run_id, evidence_snapshot, status, first_seen_at, last_seen_at)
VALUES ($1, $2, $3, 1, 0, $4, $5, $6, 'open', now(), now())
RETURNING id`

// RaiseFinding records f: a new open row, a repeat of the open row (occurrence_count+1, severity escalated), or
// the re-opening of a resolved one (reopen_count+1). It returns the system_issues id. Opening and re-opening are
// announced (governance.<family>.<state>, transition opened / reopened); a repeat is coalesced into the open row
// and announces nothing.
func (s *Store) RaiseFinding(ctx context.Context, f gcos.Finding) (int64, error) {
	var id int64
	err := s.InTx(ctx, func(tx pgx.Tx) error {
		var err error
		id, err = RaiseFindingTx(ctx, tx, f)
		return err
	})
	return id, err
}

// RaiseFindingTx is RaiseFinding inside tx. The candidate row the finding links is locked before the finding's key
// (LockOrder: candidate rows, object rows, then findings); a transaction raising several findings locks all their
// rows first (LockFindingLinksTx).
func RaiseFindingTx(ctx context.Context, tx pgx.Tx, f gcos.Finding) (int64, error) {
	if err := LockFindingLinksTx(ctx, tx, []gcos.Finding{f}); err != nil {
		return 0, fmt.Errorf("raise %s: %w", f.Type, err)
	}
	key := gcos.CoalesceKey(f.Type, f.Subject)
	if _, err := tx.Exec(ctx, findingLockSQL, key); err != nil {
		return 0, fmt.Errorf("raise %s: lock: %w", f.Type, err)
	}
	return raiseLockedFinding(ctx, tx, f)
}

// LockFindingLinksTx locks the candidate rows the findings link (the rows raiseLockedFinding's link writes: the
// group's or object's row under the finding's ruleset, else the active one), groups' then objects', each in key
// order, before any finding's key is locked. The link is written after the finding's lock, and a row taken only then
// would be a candidate-row lock after a finding lock, the reverse of LockOrder, which a scan holding the row and
// raising the same finding would wait on in a cycle. A row this transaction already holds (a scan's claimed row) is
// no wait.
func LockFindingLinksTx(ctx context.Context, tx pgx.Tx, fs []gcos.Finding) error {
	var groups, groupRulesets, objects, objectRulesets []string
	for _, f := range fs {
		switch {
		case f.Object != "":
			objects, objectRulesets = append(objects, f.Object), append(objectRulesets, f.RulesetVersion)
		case f.Group != "":
			groups, groupRulesets = append(groups, f.Group), append(groupRulesets, f.RulesetVersion)
		}
	}
	for _, l := range []struct {
		what, table, key string
		keys, rulesets   []string
	}{
		{"candidate", "governance_candidate_state", "group_key", groups, groupRulesets},
		{"object", "governance_candidate_object", "candidate_key", objects, objectRulesets},
	} {
		if len(l.keys) == 0 {
			continue
		}
		if _, err := tx.Exec(ctx, `SELECT 1 FROM `+l.table+` c JOIN unnest($1::text[], $2::text[]) AS l(k, rs) ON c.`+l.key+` = l.k
			AND c.ruleset_version = coalesce(nullif(l.rs, ''), (SELECT ruleset_version FROM governance_ruleset WHERE status = 'active'))
			ORDER BY c.`+l.key+` FOR NO KEY UPDATE OF c`, l.keys, l.rulesets); err != nil {
			return fmt.Errorf("lock the linked %s rows: %w", l.what, err)
		}
	}
	return nil
}

// LockFindingTx takes the lock raisers and resolvers of a coalesce key hold (until tx ends): a caller that decides
// from the state whether to raise or resolve reads it after the lock, so it sees what the last holder committed.
func LockFindingTx(ctx context.Context, tx pgx.Tx, issueType gcos.IssueType, subject string) error {
	if _, err := tx.Exec(ctx, findingLockSQL, gcos.CoalesceKey(issueType, subject)); err != nil {
		return fmt.Errorf("lock %s: %w", issueType, err)
	}
	return nil
}

// RefreshFindingTx brings the evidence of the open finding of (issueType, subject) up to date without counting an
// occurrence: the same condition still holds, only its counts moved (a coverage detection's object count). It
// reports whether an open row was updated; a finding no longer open is left to the next raise, which reopens it.
func RefreshFindingTx(ctx context.Context, tx pgx.Tx, issueType gcos.IssueType, subject string, evidence map[string]any) (bool, error) {
	key := gcos.CoalesceKey(issueType, subject)
	if _, err := tx.Exec(ctx, findingLockSQL, key); err != nil {
		return false, fmt.Errorf("refresh %s: lock: %w", issueType, err)
	}
	if b := gcos.IssueBucket(issueType); b != "" {
		evidence["bucket"] = b
	}
	ev, err := json.Marshal(evidence)
	if err != nil {
		return false, fmt.Errorf("refresh %s: evidence: %w", issueType, err)
	}
	tag, err := tx.Exec(ctx, `UPDATE system_issues SET evidence_snapshot = $2, last_seen_at = now()
		WHERE coalesce_key = $1 AND status = 'open'`, key, ev)
	if err != nil {
		return false, fmt.Errorf("refresh %s: %w", issueType, err)
	}
	return tag.RowsAffected() > 0, nil
}

// RaiseHeldSignalFindingTx raises the finding of a signal held for its unregistered or inactive type, unless another
// transaction is raising the same finding at this moment: then it writes nothing and returns the id of the open
// row, when one is committed (else 0). This finding is raised from inside other transactions (a finding's
// announcement of an inactive type raises it while that finding's lock is held), by many of them for one type, so
// waiting for its lock would order it after whatever its holder locks next: two raisers could wait on each other.
// A raise skipped here is not lost: the captured signal is, and the promoter raises the finding of every type
// still holding signals without one (raiseHeldTypeFindings).
func RaiseHeldSignalFindingTx(ctx context.Context, tx pgx.Tx, f gcos.Finding) (int64, error) {
	key := gcos.CoalesceKey(f.Type, f.Subject)
	var free bool
	if err := tx.QueryRow(ctx, findingTryLockSQL, key).Scan(&free); err != nil {
		return 0, fmt.Errorf("raise %s: lock: %w", f.Type, err)
	}
	if free {
		return raiseLockedFinding(ctx, tx, f)
	}
	var id, occurrences, reopens int64
	switch err := tx.QueryRow(ctx, findingOpenSQL, key).Scan(&id, &occurrences, &reopens); err {
	case nil, pgx.ErrNoRows:
		return id, nil
	default:
		return 0, fmt.Errorf("raise %s: %w", f.Type, err)
	}
}

// raiseLockedFinding raises f, its coalesce key's lock held, announces a transition and links its candidate row.
func raiseLockedFinding(ctx context.Context, tx pgx.Tx, f gcos.Finding) (int64, error) {
	ev, err := raiseFindingRow(ctx, tx, f)
	if err != nil {
		return 0, err
	}
	id := ev.id
	if ev.transition != "" {
		if err := announceFinding(ctx, tx, ev); err != nil {
			return 0, fmt.Errorf("raise %s: %w", f.Type, err)
		}
	}
	if f.Group == "" && f.Object == "" {
		return id, nil
	}
	// Link the candidate row the finding is about (under the finding's ruleset, else the active one).
	col := "issue_ref"
	if gcos.IsInputIssue(f.Type) {
		col = "input_quality_ref"
	}
	table, keyCol, key := "governance_candidate_state", "group_key", f.Group
	if f.Object != "" {
		table, keyCol, key = "governance_candidate_object", "candidate_key", f.Object
	}
	if _, err := tx.Exec(ctx, `UPDATE `+table+` SET `+col+` = $2
		WHERE `+keyCol+` = $1 AND `+col+` IS DISTINCT FROM $2
		  AND ruleset_version = coalesce($3, (SELECT ruleset_version FROM governance_ruleset WHERE status = 'active'))`,
		key, id, nullIfEmpty(f.RulesetVersion)); err != nil {
		return 0, fmt.Errorf("raise %s: link %s: %w", f.Type, key, err)
	}
	return id, nil
}

// raiseFindingRow writes the row and says what happened to it: transition opened, reopened, or "" for a repeat. The
// caller holds the coalesce key's lock.
func raiseFindingRow(ctx context.Context, tx pgx.Tx, f gcos.Finding) (findingEvent, error) {
	key := gcos.CoalesceKey(f.Type, f.Subject)
	ev := findingEvent{issueType: f.Type, key: key, ruleset: f.RulesetVersion, group: f.Group}
	text := func(k string) string { s, _ := f.Evidence[k].(string); return s }
	ev.reason, ev.scope = text("reason"), text("scope")
	if b := gcos.IssueBucket(f.Type); b != "" {
		if f.Evidence == nil {
			f.Evidence = map[string]any{}
		}
		f.Evidence["bucket"] = b // the seeds' bucket travels with the finding (doc 34 §10, doc 32 §8)
	}
	evidence, err := json.Marshal(f.Evidence)
	if err != nil {
		return ev, fmt.Errorf("raise %s: evidence: %w", f.Type, err)
	}
	runID, ruleset := nullIfEmpty(f.RunID), nullIfEmpty(f.RulesetVersion)
	err = tx.QueryRow(ctx, findingOpenSQL, key).Scan(&ev.id, &ev.occurrences, &ev.reopens)
	switch {
	case err == nil:
		ev.occurrences++
		sev := gcos.Escalate(f.Type, ev.occurrences)
		if _, err := tx.Exec(ctx, findingRepeatSQL, ev.id, string(sev), runID, ruleset, evidence); err != nil {
			return ev, fmt.Errorf("raise %s: repeat: %w", f.Type, err)
		}
		return ev, nil
	case err != pgx.ErrNoRows:
		return ev, fmt.Errorf("raise %s: %w", f.Type, err)
	}
	err = tx.QueryRow(ctx, findingLastClosedSQL, key).Scan(&ev.id, &ev.occurrences, &ev.reopens)
	switch {
	case err == nil:
		ev.occurrences++
		ev.reopens++
		sev := gcos.Escalate(f.Type, ev.occurrences)
		if _, err := tx.Exec(ctx, findingReopenSQL, ev.id, string(sev), runID, ruleset, evidence); err != nil {
			return ev, fmt.Errorf("raise %s: reopen: %w", f.Type, err)
		}
		ev.transition, ev.severity = TransitionReopened, string(sev)
		return ev, nil
	case err != pgx.ErrNoRows:
		return ev, fmt.Errorf("raise %s: %w", f.Type, err)
	}
	sev := gcos.Escalate(f.Type, 1)
	if err := tx.QueryRow(ctx, findingInsertSQL, string(f.Type), string(sev), key, ruleset, runID, evidence).Scan(&ev.id); err != nil {
		return ev, fmt.Errorf("raise %s: insert: %w", f.Type, err)
	}
	ev.occurrences, ev.transition, ev.severity = 1, TransitionOpened, string(sev)
	return ev, nil
}

// findingResolveSQL closes a finding and clears the candidate rows' links to it (issue_ref, input_quality_ref).
const findingResolveSQL = `
WITH closed AS (
    UPDATE system_issues SET status = 'resolved', resolved_at = now()
    WHERE coalesce_key = $1 AND status = 'open' AND ($2::text IS NULL OR business_logic_hash = $2)
    RETURNING ` + closedColumns + `
` + unlinkClosedSQL + `
SELECT * FROM closed ORDER BY id`

// unlinkClosedSQL follows a CTE closed of closed findings: it clears the candidate rows' links to them, and o1 and
// o2 return the groups of the object rows they held.
const unlinkClosedSQL = `), g1 AS (
    UPDATE governance_candidate_state SET issue_ref = NULL WHERE issue_ref IN (SELECT id FROM closed)
), g2 AS (
    UPDATE governance_candidate_state SET input_quality_ref = NULL WHERE input_quality_ref IN (SELECT id FROM closed)
), o1 AS (
    UPDATE governance_candidate_object SET issue_ref = NULL WHERE issue_ref IN (SELECT id FROM closed) RETURNING group_key
), o2 AS (
    UPDATE governance_candidate_object SET input_quality_ref = NULL WHERE input_quality_ref IN (SELECT id FROM closed)
    RETURNING group_key
)`

// closedColumns are what a closed finding's announcement needs.
const closedColumns = `id, issue_type, coalesce_key, severity, occurrence_count, reopen_count,
        coalesce(business_logic_hash, '') AS ruleset, coalesce(evidence_snapshot::jsonb ->> 'reason', '') AS reason,
        coalesce(evidence_snapshot::jsonb ->> 'scope', '') AS scope`

// announceClosed announces every finding a statement closed (rows of closedColumns).
func announceClosed(ctx context.Context, tx pgx.Tx, rows pgx.Rows) (int, error) {
	closed, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (findingEvent, error) {
		var f findingEvent
		err := r.Scan(f.closedFields()...)
		f.transition = TransitionResolved
		return f, err
	})
	if err != nil {
		return 0, err
	}
	for _, f := range closed {
		if err := announceFinding(ctx, tx, f); err != nil {
			return 0, err
		}
	}
	return len(closed), nil
}

// ResolveFinding auto-closes the open finding of (issueType, subject) when its condition has cleared. With a
// non-empty rulesetVersion only a finding last raised under that ruleset closes, so a clean result under an old
// ruleset cannot mask a finding raised under a newer one. It reports whether a row was closed.
func (s *Store) ResolveFinding(ctx context.Context, issueType gcos.IssueType, subject, rulesetVersion string) (bool, error) {
	var closed bool
	err := s.InTx(ctx, func(tx pgx.Tx) error {
		var err error
		closed, err = ResolveFindingTx(ctx, tx, issueType, subject, rulesetVersion)
		return err
	})
	return closed, err
}

// ResolveFindingTx is ResolveFinding inside tx.
func ResolveFindingTx(ctx context.Context, tx pgx.Tx, issueType gcos.IssueType, subject, rulesetVersion string) (bool, error) {
	key := gcos.CoalesceKey(issueType, subject)
	if _, err := tx.Exec(ctx, findingLockSQL, key); err != nil {
		return false, fmt.Errorf("resolve %s: lock: %w", issueType, err)
	}
	rows, err := tx.Query(ctx, findingResolveSQL, key, nullIfEmpty(rulesetVersion))
	if err != nil {
		return false, fmt.Errorf("resolve %s: %w", issueType, err)
	}
	closed, err := announceClosed(ctx, tx, rows)
	if err != nil {
		return false, fmt.Errorf("resolve %s: %w", issueType, err)
	}
	return closed > 0, nil
}

// ResolveFindingsExceptTx closes every open GCOS finding of issueType whose key is not in keep (a pass that
// re-derived the whole set of them), announcing each.
func ResolveFindingsExceptTx(ctx context.Context, tx pgx.Tx, issueType gcos.IssueType, keep []string) (int, error) {
	rows, err := tx.Query(ctx, `UPDATE system_issues SET status = 'resolved', resolved_at = now()
		WHERE issue_type = $1 AND status = 'open' AND coalesce_key LIKE 'gov:%' AND coalesce_key <> ALL($2)
		RETURNING `+closedColumns, string(issueType), keep)
	if err != nil {
		return 0, fmt.Errorf("resolve %s: %w", issueType, err)
	}
	n, err := announceClosed(ctx, tx, rows)
	if err != nil {
		return 0, fmt.Errorf("resolve %s: %w", issueType, err)
	}
	return n, nil
}

// openFindingExists reports whether an open finding of issueType (any subject) exists.
func (s *Store) openFindingExists(ctx context.Context, issueType gcos.IssueType) (bool, error) {
	var ok bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM system_issues WHERE issue_type = $1 AND status = 'open' AND coalesce_key LIKE 'gov:%')`, string(issueType)).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("check open %s: %w", issueType, err)
	}
	return ok, nil
}

func nullIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// RaiseExceptionLiftedTx raises the coalesced exception_lifted finding naming the exception, the object and why. A
// lift already open for the same object and reason is not repeated, so a re-run that finds nothing new writes
// nothing.
func RaiseExceptionLiftedTx(ctx context.Context, tx pgx.Tx, l gcos.ExceptionLift, object, ruleset, runID, by string) error {
	var open bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM system_issues WHERE coalesce_key = $1 AND status = 'open'
		AND evidence_snapshot ->> 'reason' = $2 AND evidence_snapshot ->> 'object' = $3)`,
		gcos.CoalesceKey(gcos.IssueExceptionLifted, l.ExceptionID), l.Reason, object).Scan(&open); err != nil {
		return fmt.Errorf("read open exception_lifted: %w", err)
	}
	if open {
		return nil
	}
	_, err := RaiseFindingTx(ctx, tx, gcos.NewFinding(gcos.IssueExceptionLifted, l.ExceptionID, runID, ruleset, map[string]any{
		"exception_id": l.ExceptionID, "object": object, "reason": l.Reason, "detail": l.Detail, "raised_by": by}))
	return err
}

// findingResolveByIDSQL closes one open finding by id, clears the candidate rows' links to it and returns the groups
// of the object rows it held.
const findingResolveByIDSQL = `
WITH closed AS (
    UPDATE system_issues SET status = 'resolved', resolved_at = now()
    WHERE id = $1 AND status = 'open'
    RETURNING ` + closedColumns + `
` + unlinkClosedSQL + `
SELECT closed.*, ARRAY(SELECT group_key FROM o1 UNION SELECT group_key FROM o2 ORDER BY 1) FROM closed`

// ResolveFindingByIDTx closes open finding id in tx because a person (by, already allowed to) says so, with a
// reason: under the raisers' lock, its candidate links cleared, the groups of the object rows it held marked dirty
// (input), one audit row naming them whole with the reason, and the resolution announced like an auto-close. An
// unknown id is ENOTFOUND, a finding already resolved ECONFLICT.
func ResolveFindingByIDTx(ctx context.Context, tx pgx.Tx, id int64, reason string, by gcos.Actor) error {
	var key, status string
	err := tx.QueryRow(ctx, `SELECT coalesce_key, status FROM system_issues WHERE id = $1 AND coalesce_key LIKE 'gov:%'`, id).Scan(&key, &status)
	if errors.Is(err, pgx.ErrNoRows) {
		return gcos.Errorf(gcos.ENOTFOUND, "resolve finding %d: no such finding (gcos findings list shows them)", id)
	}
	if err != nil {
		return fmt.Errorf("resolve finding %d: %w", id, err)
	}
	// The raisers' lock: a scan re-raising the same key waits, and then reopens what this closed.
	if _, err := tx.Exec(ctx, findingLockSQL, key); err != nil {
		return fmt.Errorf("resolve finding %d: lock: %w", id, err)
	}
	rows, err := tx.Query(ctx, findingResolveByIDSQL, id)
	if err != nil {
		return fmt.Errorf("resolve finding %d: %w", id, err)
	}
	var held []string // the groups of the object rows the finding held
	closed, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (findingEvent, error) {
		var f findingEvent
		err := r.Scan(append(f.closedFields(), &held)...)
		return f, err
	})
	if err != nil {
		return fmt.Errorf("resolve finding %d: %w", id, err)
	}
	if len(closed) == 0 {
		return gcos.Errorf(gcos.ECONFLICT, "resolve finding %d: it is not open (status %s); nothing changed", id, status)
	}
	f := closed[0]
	// An object row held by the finding lost its reason: its group is re-evaluated (dirty reason input, as for a
	// corrected input), so the row becomes a tombstone there and the incremental state stays equal to a
	// from-scratch evaluation.
	if _, err := MarkKeysDirtyTx(ctx, tx, held, gcos.DirtyInput); err != nil {
		return fmt.Errorf("resolve finding %d: %w", id, err)
	}
	f.auditID, err = Audit(ctx, tx, AuditEntry{EntityType: "governance_finding", EntityCode: strconv.FormatInt(id, 10),
		Action: "resolve", Actor: by.Principal, Detail: map[string]any{"reason": reason, "issue_type": string(f.issueType),
			"coalesce_key": f.key, "occurrence_count": f.occurrences, "reopen_count": f.reopens, "actor": by.Audit()}})
	if err != nil {
		return err
	}
	f.transition, f.resolvedBy = TransitionResolved, by.Principal
	if err := announceFinding(ctx, tx, f); err != nil {
		return fmt.Errorf("resolve finding %d: %w", id, err)
	}
	return nil
}
