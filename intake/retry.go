package intake

// The retry lane of the intake: a row the apply step cannot handle waits in event_pending and is re-applied with
// back-off; after intake.max_attempts it is dead-lettered (handoff_dlq) and the tail goes on.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
	"gcos/postgres"
)

func tailTruncateError(err error) string {
	s := err.Error()
	if len(s) > tailErrorMax {
		s = s[:tailErrorMax] + "…"
	}
	return s
}

const tailRetryInsertSQL = `
INSERT INTO event_pending (event_domain, event_type_hint, entity_table, entity_ref, canonical_address, actor_ref,
                           capture_payload, error_count, last_error, next_attempt_at, dead_lettered_at)
SELECT $1, $2, $3, $4, $5, $6, $7, 1, $8, now() + $9::bigint * interval '1 microsecond', CASE WHEN $10 THEN now() END
WHERE NOT EXISTS (
    SELECT 1 FROM event_pending
    WHERE event_domain = $1 AND event_type_hint = $2 AND entity_table = $3 AND entity_ref = $4
      AND processed_at IS NULL AND dead_lettered_at IS NULL)
RETURNING id`

// tailEnqueueRetry puts a failed row on the retry lane (once: a replayed row already waiting there is not added
// again); with max_attempts ≤ 1 it is dead-lettered at once. It reports whether it was dead-lettered.
func (s *Stage) tailEnqueueRetry(ctx context.Context, tx pgx.Tx, src postgres.TailSource, cfg gcos.IntakeConfig, f RowFailure) (bool, error) {
	r := f.row
	payload := map[string]any{"source": src.Name, "object_ref": r.ObjectRef(),
		"occurred_at": r.TS.UTC().Format(time.RFC3339Nano)}
	if f.Kind != "" {
		payload["change_kind"] = string(f.Kind)
	}
	if err := gcos.ValidateSafePayload(payload); err != nil {
		return false, err
	}
	dead := cfg.MaxAttempts <= 1
	ref := strconv.FormatInt(r.ID, 10)
	lastErr := tailTruncateError(f.Err)
	var id int64
	err := tx.QueryRow(ctx, tailRetryInsertSQL, tailDomain, tailRetryHint, src.Name, ref, r.CanonicalRef(), r.Actor(),
		payload, lastErr, tailBackoff(cfg, 1).Microseconds(), dead).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil // already waiting on the retry lane
	}
	if err != nil {
		return false, fmt.Errorf("retry lane: %w", err)
	}
	if dead {
		if err := s.tailDeadLetter(ctx, tx, src, id, ref, r.CanonicalRef(), 1, lastErr); err != nil {
			return false, err
		}
	}
	return dead, nil
}

// tailDeadLetter raises handoff_dlq (one open finding per source; repeats escalate) and writes one audit row.
// The caller counts it on the cursor.
func (s *Stage) tailDeadLetter(ctx context.Context, tx pgx.Tx, src postgres.TailSource, pendingID int64, ref, address string, attempts int, lastErr string) error {
	evidence := map[string]any{"source": src.Name, "entity_ref": ref, "canonical_address": address,
		"pending_id": pendingID, "attempts": attempts, "last_error": lastErr}
	if _, err := postgres.RaiseFindingTx(ctx, tx, gcos.NewFinding(gcos.IssueHandoffDLQ, src.Name, "", "", evidence)); err != nil {
		return err
	}
	_, err := postgres.Audit(ctx, tx, postgres.AuditEntry{EntityType: "governance_dlq", EntityCode: src.Name + ":" + ref,
		Action: "dead_letter", AlertLevel: "warning", Actor: "intake", Detail: evidence})
	return err
}

// RetryResult reports one pass over the due retry entries of a source.
type RetryResult struct {
	Source       string `json:"source"`
	Busy         bool   `json:"busy,omitempty"`
	Attempted    int    `json:"attempted"`
	Succeeded    int    `json:"succeeded"`
	Failed       int    `json:"failed"`        // failed again, rescheduled
	DeadLettered int    `json:"dead_lettered"` // failed for the last time
}

const tailRetryDueSQL = `
SELECT id, entity_ref, error_count FROM event_pending
WHERE event_domain = $1 AND event_type_hint = $2 AND entity_table = $3
  AND processed_at IS NULL AND dead_lettered_at IS NULL AND next_attempt_at <= now()
ORDER BY next_attempt_at, id
LIMIT $4
FOR UPDATE SKIP LOCKED`

// RetryDue re-applies the source's retry entries that are due, each alone under a savepoint with the row read
// afresh. A success marks the entry processed; a failure reschedules it with backoff, or dead-letters it once it
// has failed max_attempts times (handoff_dlq, one audit row, the cursor's dead_lettered count). Retries never move
// the cursor.
func (s *Stage) RetryDue(ctx context.Context, src postgres.TailSource, cfg gcos.IntakeConfig, apply ApplyFunc) (RetryResult, error) {
	res := RetryResult{Source: src.Name}
	if err := src.Validate(); err != nil {
		return res, err
	}
	if apply == nil {
		return res, gcos.Errorf(gcos.EINVALID, "retry %s: no apply step", src.Name)
	}
	batch := min(max(cfg.PageSize, 1), 500)
	maxAttempts := max(cfg.MaxAttempts, 1)
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return res, fmt.Errorf("retry %s: begin: %w", src.Name, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	cur, err := tailScanCursor(tx.QueryRow(ctx, `SELECT `+tailCursorCols+` FROM gov_worker_cursor c WHERE c.source = $1
		FOR UPDATE OF c SKIP LOCKED`, src.Name))
	if errors.Is(err, pgx.ErrNoRows) {
		ok, err := tailCursorExists(ctx, tx, src.Name)
		if err != nil {
			return res, fmt.Errorf("retry %s: %w", src.Name, err)
		}
		if !ok {
			return res, tailErrNoCursor(src.Name)
		}
		res.Busy = true
		return res, nil
	}
	if err != nil {
		return res, fmt.Errorf("retry %s: lock cursor: %w", src.Name, err)
	}
	if err := cur.matches(src); err != nil {
		return res, err
	}
	type entry struct {
		id       int64
		ref      string
		attempts int
	}
	rows, err := tx.Query(ctx, tailRetryDueSQL, tailDomain, tailRetryHint, src.Name, batch)
	if err != nil {
		return res, fmt.Errorf("retry %s: due entries: %w", src.Name, err)
	}
	due, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (entry, error) {
		var e entry
		var ref *string
		err := r.Scan(&e.id, &ref, &e.attempts)
		e.ref = tailDeref(ref)
		return e, err
	})
	if err != nil {
		return res, fmt.Errorf("retry %s: due entries: %w", src.Name, err)
	}
	if len(due) == 0 {
		return res, nil
	}
	ids := make([]int64, 0, len(due))
	for _, e := range due {
		if id, err := strconv.ParseInt(e.ref, 10, 64); err == nil {
			ids = append(ids, id)
		}
	}
	args := []any{ids}
	if cur.noTZ {
		args = append(args, cur.zone)
	}
	fresh, err := tailReadRows(ctx, tx, src, cur.noTZ, len(ids), byIDSQL(src, cur.noTZ), args...)
	if err != nil {
		return res, fmt.Errorf("retry %s: re-read rows: %w", src.Name, err)
	}
	byRef := make(map[string]postgres.TailRow, len(fresh))
	for _, r := range fresh {
		byRef[strconv.FormatInt(r.ID, 10)] = r
	}
	for _, e := range due {
		res.Attempted++
		var failure error
		row, ok := byRef[e.ref]
		if !ok {
			failure = fmt.Errorf("source row %s %s no longer exists", src.Name, e.ref)
		} else {
			failure, err = tailApplyOne(ctx, tx, row, apply)
			if err != nil {
				return res, fmt.Errorf("retry %s: %w", src.Name, err)
			}
		}
		if failure == nil {
			if _, err := tx.Exec(ctx, `UPDATE event_pending SET processed_at = now() WHERE id = $1`, e.id); err != nil {
				return res, fmt.Errorf("retry %s: %w", src.Name, err)
			}
			res.Succeeded++
			continue
		}
		attempts, lastErr := e.attempts+1, tailTruncateError(failure)
		if attempts >= maxAttempts {
			if _, err := tx.Exec(ctx, `UPDATE event_pending SET error_count = $2, last_error = $3, dead_lettered_at = now()
				WHERE id = $1`, e.id, attempts, lastErr); err != nil {
				return res, fmt.Errorf("retry %s: %w", src.Name, err)
			}
			address := "unknown:" + e.ref
			if ok {
				address = row.CanonicalRef()
			}
			if err := s.tailDeadLetter(ctx, tx, src, e.id, e.ref, address, attempts, lastErr); err != nil {
				return res, fmt.Errorf("retry %s: %w", src.Name, err)
			}
			res.DeadLettered++
			continue
		}
		if _, err := tx.Exec(ctx, `UPDATE event_pending SET error_count = $2, last_error = $3,
			next_attempt_at = now() + $4::bigint * interval '1 microsecond' WHERE id = $1`,
			e.id, attempts, lastErr, tailBackoff(cfg, attempts).Microseconds()); err != nil {
			return res, fmt.Errorf("retry %s: %w", src.Name, err)
		}
		res.Failed++
	}
	summary, err := json.Marshal(res)
	if err != nil {
		return res, fmt.Errorf("retry %s: %w", src.Name, err)
	}
	if _, err := tx.Exec(ctx, `UPDATE gov_worker_cursor SET attempts_written = attempts_written + $2,
		dead_lettered = dead_lettered + $3, metadata = metadata || jsonb_build_object('last_retry', $4::jsonb, 'last_retry_at', now()),
		updated_at = now() WHERE source = $1`, src.Name, res.Succeeded, res.DeadLettered, string(summary)); err != nil {
		return res, fmt.Errorf("retry %s: count: %w", src.Name, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return res, fmt.Errorf("retry %s: commit: %w", src.Name, err)
	}
	return res, nil
}

// tailApplyOne applies a single row under a savepoint; the returned failure is the row's own problem (rolled back),
// the error a broken transaction or a cancelled context (the whole retry pass is abandoned).
func tailApplyOne(ctx context.Context, tx pgx.Tx, row postgres.TailRow, apply ApplyFunc) (failure, err error) {
	if _, err := tx.Exec(ctx, "SAVEPOINT gcos_tail_retry"); err != nil {
		return nil, err
	}
	fails, applyErr := apply(ctx, tx, []postgres.TailRow{row})
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	switch {
	case applyErr != nil:
		failure = applyErr
	case len(fails) > 0:
		failure = fails[0].Err
		if failure == nil {
			failure = errors.New("apply reported the row as failed without an error")
		}
	}
	if failure == nil {
		_, err = tx.Exec(ctx, "RELEASE SAVEPOINT gcos_tail_retry")
		return nil, err
	}
	if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT gcos_tail_retry"); err != nil {
		return nil, errors.Join(err, failure)
	}
	return failure, nil
}
