package main

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos/daemon"
	"gcos/postgres"
	"gcos/world"
)

// countCandidates counts candidate rows of every ruleset: group rows and materialized object rows.
const countCandidatesSQL = `SELECT (SELECT count(*) FROM governance_candidate_state) + (SELECT count(*) FROM governance_candidate_object)`

func benchChildren(ctx context.Context, r *runner) ([]row, error) {
	ws, done, err := r.openWorld(ctx, "children", r.opts.births, 0)
	if err != nil {
		return nil, err
	}
	defer done()
	if _, err := prepare(ctx, ws.store); err != nil {
		return nil, err
	}
	// Births only: the children are births, and the changelog history is irrelevant to them (and slow to replay).
	d, err := daemon.New(daemon.Config{Store: ws.store, Logger: r.log,
		Sources: []postgres.TailSource{postgres.BirthTailSource(ws.store.Config().SourceBinding)}})
	if err != nil {
		return nil, err
	}
	w := d.Intake
	// The daemon's steady state before the children arrive: intake caught up, dirty set drained.
	if _, err := w.Once(ctx); err != nil {
		return nil, fmt.Errorf("intake catch-up: %w", err)
	}
	if _, err := drainScans(ctx, ws.store); err != nil {
		return nil, err
	}
	if err := drainDetections(ctx, ws.store); err != nil {
		return nil, err
	}
	if _, err := ws.store.CaptureSnapshot(ctx, postgres.CaptureOptions{Scope: postgres.SnapshotScan, RunID: postgres.NewRunID("bench-children")}); err != nil {
		return nil, err
	}
	before, err := countRows(ctx, ws.pool, countCandidatesSQL)
	if err != nil {
		return nil, err
	}
	birthsBefore, err := countRows(ctx, ws.pool, `SELECT count(*) FROM birth_registry`)
	if err != nil {
		return nil, err
	}
	groupsTotal, err := countRows(ctx, ws.pool, `SELECT count(*) FROM governance_group`)
	if err != nil {
		return nil, err
	}

	n := r.opts.children
	t0 := time.Now()
	cont, err := world.AddChildren(ctx, ws.pool, n, 1)
	if err != nil {
		return nil, err
	}
	addDur := time.Since(t0)
	r.log.Info("children added", "n", n, "container", cont.String(), "elapsed", addDur.Round(time.Millisecond))

	handedOff := w.Stage.HandoffTotals()
	t0 = time.Now()
	if _, err := w.Once(ctx); err != nil {
		return nil, fmt.Errorf("intake of the children: %w", err)
	}
	intakeDur := time.Since(t0)
	st := handoffSince(handedOff, w.Stage.HandoffTotals())
	dirtied, err := queryStrings(ctx, ws, `SELECT c.group_key FROM governance_candidate_state c JOIN v_current_ruleset cr USING (ruleset_version) WHERE c.dirty ORDER BY 1`)
	if err != nil {
		return nil, err
	}
	expected, err := queryStrings(ctx, ws, `SELECT group_key FROM governance_group WHERE object_class = $1 AND source_registry = $2 AND lifecycle_status = 'active' ORDER BY 1`,
		cont.EntityType, cont.Collection)
	if err != nil {
		return nil, err
	}
	t0 = time.Now()
	scanned, err := drainScans(ctx, ws.store)
	if err != nil {
		return nil, err
	}
	scanDur := time.Since(t0)
	after, err := countRows(ctx, ws.pool, countCandidatesSQL)
	if err != nil {
		return nil, err
	}
	snap, err := ws.store.CaptureSnapshot(ctx, postgres.CaptureOptions{Scope: postgres.SnapshotScan, RunID: postgres.NewRunID("bench-children")})
	if err != nil {
		return nil, err
	}
	var changed []string
	for k, d := range snap.Delta.Groups {
		if d.FingerprintChanged {
			changed = append(changed, k)
		}
	}
	sort.Strings(changed)

	nr, err := naiveBackfill(ctx, ws.pool)
	if err != nil {
		return nil, err
	}
	naiveDelta := nr.RowsWritten - birthsBefore

	expectText := fmt.Sprintf("= the container's base group (%d keys, 1 per scope)", len(expected))
	setRow := func(metric string, got []string, note string) row {
		rw := row{Bench: "children", Metric: metric, Unit: "groups", Better: lower, Ours: float64(len(got)),
			Naive: fptr(float64(groupsTotal)), Target: &target{Op: "==", Value: float64(len(expected)), Text: expectText}, Reps: 1, Note: note}
		rw.Status = statusPass
		if !slices.Equal(got, expected) || len(expected) == 0 {
			rw.Status = statusMiss
			rw.Note += fmt.Sprintf(" — got %v, expected %v", got, expected)
		}
		return rw
	}
	return []row{{
		Bench: "children", Metric: fmt.Sprintf("Δ candidate rows (+%s children)", thousands(int64(n))), Unit: "rows", Better: lower,
		Ours: float64(after - before), Naive: fptr(float64(naiveDelta)), Target: &target{Op: "==", Value: 0, Text: "= 0"}, Reps: 1,
		Note: fmt.Sprintf("container %s; group + object rows before %d, after %d; naive: one row per object", cont, before, after),
	},
		setRow("groups dirtied by intake", dirtied, fmt.Sprintf("%s rows handed off, %d signals; naive re-derives all %d groups", thousands(int64(st.Rows)), st.Signals, groupsTotal)),
		setRow("groups changed in next snapshot delta", changed, "CaptureSnapshot delta_previous, fingerprint_changed"),
		{
			Bench: "children", Metric: "absorb the children (intake + rescan)", Unit: "s", Better: lower,
			Ours: secs(intakeDur + scanDur), Naive: fptr(secs(nr.Elapsed)), Reps: 1,
			Note: fmt.Sprintf("intake %s (%s rows/s) + scan of %d dirty groups %s; naive: full re-derive; AddChildren (COPY) took %s. One run: the counts are exact, the times single samples",
				intakeDur.Round(time.Millisecond), thousands(int64(float64(st.Rows)/intakeDur.Seconds())), scanned, scanDur.Round(time.Millisecond), addDur.Round(time.Millisecond)),
		}}, nil
}

// queryStrings runs a query returning one text column.
func queryStrings(ctx context.Context, ws *worldStore, sql string, args ...any) ([]string, error) {
	rows, err := ws.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	return out, nil
}
