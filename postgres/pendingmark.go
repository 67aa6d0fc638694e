package postgres

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// PendingMarkBatch is how many pending marks (each the keys of one marking transaction, or the keys a tick left
// pending) a scan tick settles at most.
const PendingMarkBatch = 100

// settlePendingSQL judges the pending marks ($2 keys, $3 reasons, $4 when each was marked, $5 the births behind
// each, $6 the transactions that made each) under ruleset $1 against the rows as committed, without waiting for
// anyone:
//   - a row clean under a count that does not include the mark (gcos_mark_counted: a count whose snapshot did not
//     see every transaction behind the mark, or, with no snapshot recorded, one begun before the mark, that did not
//     read its births, or read them while an object of the base is still queued for its object row) may hold a
//     result from before the change: it is marked dirty, with the pending mark's reason and time, unless another
//     transaction holds it (then the mark stays pending);
//
// and returns the marks still pending: a row dirty (a scan will count it, and whether that count includes the mark
// decides again), or owed (clean) and held by another transaction. A row clean under a count that includes the mark,
// and a key with no row under the ruleset (nothing to mark), are settled. Each key is judged once (j), on its row as
// the statement's snapshot holds it: a row a scan wrote since is still marked when it is found owed there (scanned
// once more at worst, never dropped), and one made dirty since is left to its scan.
const settlePendingSQL = `
WITH m AS (
    SELECT * FROM unnest($2::text[], $3::text[], $4::timestamptz[], $5::text[], $6::text[]) AS u(k, r, at, b, by)
), j AS MATERIALIZED (
    SELECT m.k, m.r, m.at, m.b, c.dirty,
           c.dirty OR NOT gcos_mark_counted(c.counted_at, c.scan_time, c.counted_births, m.at, m.b, gcos_objects_queued(c.group_key),
                                            c.counted_snapshot, m.by::xid8[]) AS pending
    FROM m JOIN governance_candidate_state c ON c.group_key = m.k AND c.ruleset_version = $1
), owed AS (
    SELECT c.group_key, j.r, j.at FROM governance_candidate_state c JOIN j ON j.k = c.group_key
    WHERE c.ruleset_version = $1 AND c.group_key = ANY($2) AND j.pending AND NOT j.dirty AND NOT c.dirty
    ORDER BY c.group_key FOR UPDATE OF c SKIP LOCKED
), marked AS (
    UPDATE governance_candidate_state c
    SET dirty = true, dirty_reason = o.r, dirtied_at = o.at,
        recompute_status = CASE WHEN c.recompute_status = 'ok' THEN 'dirty' ELSE c.recompute_status END, updated_at = now()
    FROM owed o
    WHERE c.group_key = o.group_key AND c.ruleset_version = $1
    RETURNING c.group_key
)
SELECT j.k, j.r, j.at, j.b, NOT j.dirty, (SELECT count(*) FROM marked)
FROM j
WHERE j.pending AND NOT EXISTS (SELECT 1 FROM marked WHERE marked.group_key = j.k)
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, (SELECT count(*) FROM marked)`

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
	rows, err := tx.Query(ctx, `SELECT id, ruleset_version, group_keys, reasons, marked_at, births, marked_by::text FROM governance_pending_mark
		WHERE ruleset_version = $2 OR ruleset_version IS DISTINCT FROM (SELECT ruleset_version FROM v_current_ruleset)
		ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED`, bound, ruleset)
	if err != nil {
		return res, fmt.Errorf("read pending marks: %w", err)
	}
	var ids []int64
	merged := map[string]*pendingKey{} // per group key, its pending marks under ruleset as one
	for rows.Next() {
		var id int64
		var rv string
		var keys, reasons []string
		var ats []time.Time
		var births []*string
		var by string
		if err := rows.Scan(&id, &rv, &keys, &reasons, &ats, &births, &by); err != nil {
			rows.Close()
			return res, fmt.Errorf("read pending marks: %w", err)
		}
		ids = append(ids, id)
		if rv != ruleset {
			continue
		}
		for i, k := range keys {
			var b *string
			if i < len(births) {
				b = births[i]
			}
			if merged[k] == nil {
				merged[k] = &pendingKey{}
			}
			if err := merged[k].add(reasons[i], ats[i], b, by); err != nil {
				rows.Close()
				return res, fmt.Errorf("read pending mark %d: %w", id, err)
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
	if len(merged) == 0 {
		return res, nil
	}
	n := len(merged)
	keys, reasons, ats, births, by := make([]string, 0, n), make([]string, 0, n), make([]time.Time, 0, n), make([]*string, 0, n), make([]string, 0, n)
	for _, k := range slices.Sorted(maps.Keys(merged)) {
		m := merged[k]
		keys, reasons, ats, births = append(keys, k), append(reasons, m.reason), append(ats, m.at), append(births, m.birthsText())
		by = append(by, "{"+strings.Join(slices.Sorted(maps.Keys(m.by)), ",")+"}")
	}
	rows, err = tx.Query(ctx, settlePendingSQL, ruleset, keys, reasons, ats, births, by)
	if err != nil {
		return res, fmt.Errorf("settle pending marks: %w", err)
	}
	var still, stillReasons []string
	var stillAt []time.Time
	var stillBirths []*string
	for rows.Next() {
		var k, r, b *string
		var at *time.Time
		var owed *bool
		if err := rows.Scan(&k, &r, &at, &b, &owed, &res.Marked); err != nil {
			rows.Close()
			return res, fmt.Errorf("settle pending marks: %w", err)
		}
		if k != nil {
			still, stillReasons, stillAt, stillBirths = append(still, *k), append(stillReasons, *r), append(stillAt, *at), append(stillBirths, b)
			if *owed {
				res.Held++
			}
		}
	}
	if err := rows.Err(); err != nil {
		return res, fmt.Errorf("settle pending marks: %w", err)
	}
	if len(still) > 0 {
		// Made again by this transaction (marked_by's default): a count that sees it commit sees the marks it
		// took, which committed before it read them.
		if _, err := tx.Exec(ctx, `INSERT INTO governance_pending_mark (ruleset_version, group_keys, reasons, marked_at, births) VALUES ($1, $2, $3, $4, $5)`,
			ruleset, still, stillReasons, stillAt, stillBirths); err != nil {
			return res, fmt.Errorf("keep pending marks: %w", err)
		}
	}
	return res, nil
}

// pendingKey is one group's pending marks merged into one: the latest mark's reason and time, and the births
// behind them all, unless one of them has none (it is then settled by time alone) or there are more than
// MarkBirthsMax. Whatever settles the merged mark settles each of them.
type pendingKey struct {
	reason   string
	at       time.Time
	births   map[int64]bool
	timeOnly bool
	by       map[string]bool // the transactions that made the marks (xid8 as text): a count must have seen them all
}

func (p *pendingKey) add(reason string, at time.Time, births *string, by string) error {
	if p.by == nil {
		p.by = map[string]bool{}
	}
	p.by[by] = true
	if p.at.IsZero() || at.After(p.at) || (at.Equal(p.at) && reason < p.reason) {
		p.reason, p.at = reason, at
	}
	if births == nil {
		p.timeOnly, p.births = true, nil
	}
	if p.timeOnly {
		return nil
	}
	ids, err := parseBirths(*births)
	if err != nil {
		return err
	}
	if p.births == nil {
		p.births = map[int64]bool{}
	}
	for _, id := range ids {
		p.births[id] = true
	}
	if len(p.births) > MarkBirthsMax || len(p.births) == 0 {
		p.timeOnly, p.births = true, nil
	}
	return nil
}

func (p *pendingKey) birthsText() *string {
	if p.timeOnly {
		return nil
	}
	return birthsText(slices.Sorted(maps.Keys(p.births)))
}

// parseBirths reads a bigint[] literal written by birthsText ("{1,2}").
func parseBirths(s string) ([]int64, error) {
	inner, open := strings.CutPrefix(s, "{")
	inner, closed := strings.CutSuffix(inner, "}")
	if !open || !closed {
		return nil, fmt.Errorf("births %q: not an array literal", s)
	}
	if inner == "" {
		return nil, nil
	}
	var ids []int64
	for _, f := range strings.Split(inner, ",") {
		id, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("births %q: %w", s, err)
		}
		ids = append(ids, id)
	}
	return ids, nil
}
