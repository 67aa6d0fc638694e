package evaluate

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos/postgres"
)

// Object rows as stored, and the writer a derivation pass flushes its changed rows through.

// storedObject is what a pass compares a derived row with.
type storedObject struct {
	objectType, objectRef, reason, groupKey, evidence, groupEvidence string
	active, settled                                                  bool
}

// readStoredObjects reads the object rows a pass may rewrite or retire (storedObjectsSQL, storedChangedObjectsSQL).
func readStoredObjects(ctx context.Context, tx pgx.Tx, sql string, args ...any) (map[string]storedObject, error) {
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("read stored objects: %w", err)
	}
	stored := map[string]storedObject{}
	for rows.Next() {
		var key string
		var o storedObject
		if err := rows.Scan(&key, &o.objectType, &o.objectRef, &o.reason, &o.groupKey, &o.evidence, &o.groupEvidence, &o.active, &o.settled); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read stored objects: %w", err)
		}
		stored[key] = o
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read stored objects: %w", err)
	}
	return stored, nil
}

// objectChunk is how many births a pass reads per fetch and how many changed object rows it writes per statement
// (a variable only so that a test can make a small world's pass span many chunks).
var objectChunk = 1000

// objectWriter writes a pass's derived object rows in chunks. Only a row whose result differs from its stored one
// (or that is not clean) is written: a pass over an unchanged base writes nothing, so its cost is reading, not
// locking every row it derived.
type objectWriter struct {
	snapshotID     int64
	ruleset, runID string
	stored         map[string]storedObject // the rows the pass may rewrite or retire
	changed        []ObjectCandidate       // derived, not yet written
	written        int64
}

// add queues a derived row for writing unless it equals its stored row.
func (w *objectWriter) add(o ObjectCandidate) {
	if was, ok := w.stored[o.Key]; ok && was.settled && was.evidence == o.Values.Evidence && was.reason == o.Reason &&
		was.groupKey == o.GroupKey && was.groupEvidence == o.GroupEvidence {
		return
	}
	w.changed = append(w.changed, o)
}

// flush writes the queued rows once at least min are queued. A statement writes its rows in candidate-key order;
// passes that could write the same rows do not overlap (a scan's pass holds its bases' locks, the audit's pass
// every candidate row's).
func (w *objectWriter) flush(ctx context.Context, tx pgx.Tx, min int) error {
	if len(w.changed) == 0 || len(w.changed) < min {
		return nil
	}
	slices.SortFunc(w.changed, func(a, b ObjectCandidate) int { return strings.Compare(a.Key, b.Key) })
	n, err := UpsertObjectRows(ctx, tx, w.snapshotID, w.ruleset, w.runID, w.changed)
	if err != nil {
		return err
	}
	w.written += n
	clear(w.changed)
	w.changed = w.changed[:0]
	return nil
}

// refreshHeldObjectsSQL re-qualifies rows an open finding holds ($2) as their raiser wrote them: clean, scanned now,
// for the time to live they were written with.
const refreshHeldObjectsSQL = `
UPDATE governance_candidate_object SET dirty = false, dirty_reason = NULL, recompute_status = 'ok', scan_time = now(),
    stale_after = now() + (stale_after - scan_time), source_snapshot_ref = $3, last_run_id = $4, updated_at = now()
WHERE ruleset_version = $1 AND lifecycle_status = 'active' AND candidate_key = ANY($2)`

// refreshHeld re-qualifies the held rows keys (refreshHeldObjectsSQL), in candidate-key order.
func (w *objectWriter) refreshHeld(ctx context.Context, tx pgx.Tx, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	slices.Sort(keys)
	tag, err := tx.Exec(ctx, refreshHeldObjectsSQL, w.ruleset, keys, w.snapshotID, w.runID)
	if err != nil {
		return fmt.Errorf("re-qualify objects held by their findings: %w", err)
	}
	w.written += tag.RowsAffected()
	return nil
}

// retireLapsed turns the active stored rows the pass did not select into tombstones: their reason lapsed.
func (w *objectWriter) retireLapsed(ctx context.Context, tx pgx.Tx, selected func(key string) bool) (int64, error) {
	var lapsed []string
	for k, o := range w.stored {
		if o.active && !selected(k) {
			lapsed = append(lapsed, k)
		}
	}
	if len(lapsed) == 0 {
		return 0, nil
	}
	slices.Sort(lapsed)
	ret, err := tx.Exec(ctx, tombstoneObjectsSQL, w.ruleset, lapsed, w.runID)
	if err != nil {
		return 0, fmt.Errorf("retire lapsed objects: %w", err)
	}
	return ret.RowsAffected(), nil
}

// UpsertObjectRows writes object rows (and the coverage of relevant ones) without retiring anything.
func UpsertObjectRows(ctx context.Context, tx pgx.Tx, snapshotID int64, ruleset, runID string, objs []ObjectCandidate) (int64, error) {
	n := len(objs)
	keys, otypes, orefs, reasons, gkeys, verdicts, quals, risks, evid := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	deps, required, owners, gevid := make([]string, n), make([]bool, n), make([]*string, n), make([]string, n)
	ttls := make([]time.Duration, n)
	var cov []postgres.CandidateValues
	for i, o := range objs {
		v := o.Values
		keys[i], otypes[i], orefs[i], reasons[i], gkeys[i] = o.Key, o.ObjectType, o.ObjectRef, o.Reason, o.GroupKey
		verdicts[i], quals[i], risks[i], evid[i], deps[i], required[i], owners[i] = string(v.Verdict), v.InputQuality, v.RiskClass, v.Evidence, string(v.DependsOn), v.CoverageRequired, v.OwnerScope
		ttls[i], gevid[i] = v.TTL, o.GroupEvidence
		cov = append(cov, v) // a relevant row's outcome is recorded, any other's cleared
	}
	if err := postgres.RecordVerdictChangesTx(ctx, tx, ruleset, runID, true, keys, cov); err != nil {
		return 0, err
	}
	tag, err := tx.Exec(ctx, upsertObjectsSQL, snapshotID, ruleset, runID, keys, otypes, orefs, reasons, gkeys, verdicts, quals, deps, ttls, risks, required, evid, owners, gevid)
	if err != nil {
		return 0, fmt.Errorf("materialize objects: %w", err)
	}
	if err := postgres.RecordCoverage(ctx, tx, ruleset, runID, cov); err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}
