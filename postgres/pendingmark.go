package postgres

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// PendingMarkBatch is how many pending marks (each the keys of one marking transaction, or the keys a tick left
// pending) a scan tick settles at most.
const PendingMarkBatch = 100

// settlePendingSQL judges the pending marks ($2 keys, $3 reasons, $4 when each was marked) under ruleset $1 against
// the rows as committed, without waiting for anyone:
//   - a row clean under a scan that read its counts before the mark (counted_at; a row written without a count
//     read, its scan_time, the writing transaction's start) may hold a count from before the change: it is marked
//     dirty, with the pending mark's reason and time, unless another transaction holds it (then the mark stays
//     pending);
//
// and returns the marks still pending: a row dirty (a scan will count it, and whether that scan counted after the
// mark decides again), or owed (clean) and held by another transaction. A row clean under a scan that counted after
// the mark counted the change, and a key with no row under the ruleset has nothing to mark: both are settled.
const settlePendingSQL = `
WITH m AS (
    SELECT * FROM unnest($2::text[], $3::text[], $4::timestamptz[]) AS u(k, r, at)
), owed AS (
    SELECT c.group_key, m.r, m.at FROM governance_candidate_state c JOIN m ON m.k = c.group_key
    WHERE c.ruleset_version = $1 AND c.group_key = ANY($2) AND NOT c.dirty AND coalesce(c.counted_at, c.scan_time) < m.at
    ORDER BY c.group_key FOR UPDATE OF c SKIP LOCKED
), marked AS (
    UPDATE governance_candidate_state c
    SET dirty = true, dirty_reason = o.r, dirtied_at = o.at,
        recompute_status = CASE WHEN c.recompute_status = 'ok' THEN 'dirty' ELSE c.recompute_status END, updated_at = now()
    FROM owed o
    WHERE c.group_key = o.group_key AND c.ruleset_version = $1
    RETURNING c.group_key
)
SELECT m.k, m.r, m.at, NOT c.dirty, (SELECT count(*) FROM marked)
FROM m JOIN governance_candidate_state c ON c.group_key = m.k AND c.ruleset_version = $1
WHERE (c.dirty OR coalesce(c.counted_at, c.scan_time) < m.at) AND NOT EXISTS (SELECT 1 FROM marked WHERE marked.group_key = m.k)
UNION ALL
SELECT NULL, NULL, NULL, NULL, (SELECT count(*) FROM marked)`

// PendingMarks is what settling pending marks did.
type PendingMarks struct {
	Marked int64 // groups marked dirty: a scan that counted before their mark cleared them
	Held   int64 // groups owed their mark whose rows another transaction holds: still pending
}

// ApplyPendingMarks settles the pending membership marks (markDirtySQL) of ruleset inside tx without waiting for
// anyone: at most limit of them, the oldest first (0: all), skipping those another transaction is settling. Marks
// of a ruleset that is no longer current are dropped (an activation moves them to the ruleset it activates, with the
// rows it carries, so what is left belongs to no current row); each key is judged on its
// row (settlePendingSQL), and the keys still pending are written back as one mark. A scan tick calls it, in a
// transaction of its own, before it claims, so a group it marks is claimed in the same tick; the full audit calls it
// once it holds every candidate row, so its checks see every mark.
func ApplyPendingMarks(ctx context.Context, tx pgx.Tx, ruleset string, limit int) (PendingMarks, error) {
	var res PendingMarks
	var bound *int // LIMIT NULL: all
	if limit > 0 {
		bound = &limit
	}
	rows, err := tx.Query(ctx, `SELECT id, ruleset_version, group_keys, reasons, marked_at FROM governance_pending_mark
		WHERE ruleset_version = $2 OR ruleset_version IS DISTINCT FROM (SELECT ruleset_version FROM v_current_ruleset)
		ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED`, bound, ruleset)
	if err != nil {
		return res, fmt.Errorf("read pending marks: %w", err)
	}
	type mark struct {
		reason string
		at     time.Time
	}
	var ids []int64
	latest := map[string]mark{} // per group key, its latest pending mark under ruleset
	for rows.Next() {
		var id int64
		var rv string
		var keys, reasons []string
		var ats []time.Time
		if err := rows.Scan(&id, &rv, &keys, &reasons, &ats); err != nil {
			rows.Close()
			return res, fmt.Errorf("read pending marks: %w", err)
		}
		ids = append(ids, id)
		if rv != ruleset {
			continue
		}
		for i, k := range keys {
			if was, ok := latest[k]; !ok || ats[i].After(was.at) || (ats[i].Equal(was.at) && reasons[i] < was.reason) {
				latest[k] = mark{reasons[i], ats[i]}
			}
		}
	}
	if err := rows.Err(); err != nil {
		return res, fmt.Errorf("read pending marks: %w", err)
	}
	if len(ids) == 0 {
		return res, nil
	}
	if _, err := tx.Exec(ctx, `DELETE FROM governance_pending_mark WHERE id = ANY($1)`, ids); err != nil {
		return res, fmt.Errorf("take pending marks: %w", err)
	}
	if len(latest) == 0 {
		return res, nil
	}
	keys, reasons, ats := make([]string, 0, len(latest)), make([]string, 0, len(latest)), make([]time.Time, 0, len(latest))
	for _, k := range slices.Sorted(maps.Keys(latest)) {
		keys, reasons, ats = append(keys, k), append(reasons, latest[k].reason), append(ats, latest[k].at)
	}
	rows, err = tx.Query(ctx, settlePendingSQL, ruleset, keys, reasons, ats)
	if err != nil {
		return res, fmt.Errorf("settle pending marks: %w", err)
	}
	var still, stillReasons []string
	var stillAt []time.Time
	for rows.Next() {
		var k, r *string
		var at *time.Time
		var owed *bool
		if err := rows.Scan(&k, &r, &at, &owed, &res.Marked); err != nil {
			rows.Close()
			return res, fmt.Errorf("settle pending marks: %w", err)
		}
		if k != nil {
			still, stillReasons, stillAt = append(still, *k), append(stillReasons, *r), append(stillAt, *at)
			if *owed {
				res.Held++
			}
		}
	}
	if err := rows.Err(); err != nil {
		return res, fmt.Errorf("settle pending marks: %w", err)
	}
	if len(still) > 0 {
		if _, err := tx.Exec(ctx, `INSERT INTO governance_pending_mark (ruleset_version, group_keys, reasons, marked_at) VALUES ($1, $2, $3, $4)`,
			ruleset, still, stillReasons, stillAt); err != nil {
			return res, fmt.Errorf("keep pending marks: %w", err)
		}
	}
	return res, nil
}
