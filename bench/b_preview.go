package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
	"gcos/evaluate"
	"gcos/postgres"
	"gcos/preview"
)

// benchPreview times the impact preview of an owner revocation covering about 10 % of one scope's objects (several
// ownership rows revoked together, the largest that fit), beside the naive preview of the same change: every live
// group of the estate re-evaluated under the registries as they are and as they would be, each base's members
// judged by the gate's decision on both sides, and the stored ledgers read (the answer's "before").
func benchPreview(ctx context.Context, r *runner) ([]row, error) {
	ws, done, err := r.openWorld(ctx, "preview", r.opts.births, 0)
	if err != nil {
		return nil, err
	}
	defer done()
	if _, err := prepare(ctx, ws.store); err != nil {
		return nil, err
	}
	changes, covered, scope, err := revocationOf(ctx, ws.pool, int64(r.opts.births)/10)
	if err != nil {
		return nil, err
	}
	req := gcos.PreviewRequest{Changes: changes}
	p := preview.New(ws.store)
	var ours, naive []float64
	var rep gcos.PreviewReport
	var naiveFlips int64
	for i := 0; i < r.opts.reps; i++ {
		t0 := time.Now()
		if rep, err = p.Preview(ctx, req); err != nil {
			return nil, err
		}
		ours = append(ours, time.Since(t0).Seconds())
		t0 = time.Now()
		if naiveFlips, err = naivePreview(ctx, ws.store, changes); err != nil {
			return nil, err
		}
		naive = append(naive, time.Since(t0).Seconds())
		r.log.Info("preview", "rep", i, "ours_s", ours[i], "naive_s", naive[i], "flips", rep.Flips.AllowToBlock+rep.Flips.BlockToAllow,
			"naive_flips", naiveFlips, "groups", rep.AffectedGroups)
	}
	if got := rep.Flips.AllowToBlock + rep.Flips.BlockToAllow; got != naiveFlips {
		return nil, fmt.Errorf("the preview flips %d objects, the naive re-evaluation of every group %d", got, naiveFlips)
	}
	return []row{{
		Bench: "preview", Metric: fmt.Sprintf("owner revocation covering %.1f %% of scope %s (%d ownership rows)", 100*float64(covered)/float64(r.opts.births), scope, len(changes)),
		Unit: "s", Better: lower, Ours: median(ours), Naive: fptr(median(naive)), Reps: r.opts.reps, OursSamples: ours, NaiveSamples: naive,
		Target: &target{Op: "<=", Value: 1, Text: "≤ 1 s"},
		Note: fmt.Sprintf("%d of the estate's groups judged, %d allow→block, %d block→allow (the naive agrees); naive: every live group re-evaluated on both sides",
			rep.AffectedGroups, rep.Flips.AllowToBlock, rep.Flips.BlockToAllow),
	}}, nil
}

// revocationOf picks the scope whose owners cover the most objects and, in it, active ownership rows that together
// cover at most budget objects (at most gcos.PreviewMaxChanges rows), those covering objects a write is allowed on
// now first: a revocation that flips decisions, not only one of owners of objects blocked anyway.
func revocationOf(ctx context.Context, pool interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, budget int64) ([]gcos.ProposedChange, int64, string, error) {
	rows, err := pool.Query(ctx, `
		WITH allowed AS (
		    SELECT object_class, source_registry, lifecycle_status FROM v_candidate_effective
		    GROUP BY 1, 2, 3
		    HAVING bool_and(coalesce(coverage_outcome, 'covered') <> 'orphan' AND effective_verdict NOT IN ('unknown', 'needs_input', 'stale'))
		)
		SELECT o.id, o.scope_code, sum(g.member_count)::bigint AS n,
		       sum(sum(g.member_count)) OVER (PARTITION BY o.scope_code) AS scope_n,
		       coalesce(sum(g.member_count) FILTER (WHERE a.object_class IS NOT NULL), 0) AS flippable
		FROM governance_object_ownership o
		JOIN governance_group g ON g.scope = o.scope_code AND g.owner_scope = o.owner_ref AND g.retired_at IS NULL
		     AND (o.entity_type IS NULL OR g.object_class = o.entity_type) AND (o.collection_name IS NULL OR g.source_registry = o.collection_name)
		JOIN v_candidate_effective c ON c.group_key = g.group_key AND c.coverage_outcome = 'covered'
		LEFT JOIN allowed a ON (a.object_class, a.source_registry, a.lifecycle_status) = (g.object_class, g.source_registry, g.lifecycle_status)
		WHERE o.status = 'active'
		GROUP BY o.id, o.scope_code
		ORDER BY scope_n DESC, o.scope_code, flippable DESC, n DESC, o.id`)
	if err != nil {
		return nil, 0, "", fmt.Errorf("ownership coverage: %w", err)
	}
	defer rows.Close()
	var out []gcos.ProposedChange
	var covered int64
	var scope string
	for rows.Next() {
		var id, n, scopeN, flippable int64
		var s string
		if err := rows.Scan(&id, &s, &n, &scopeN, &flippable); err != nil {
			return nil, 0, "", err
		}
		if scope == "" {
			scope = s
		}
		if s != scope || len(out) == gcos.PreviewMaxChanges || covered+n > budget {
			continue
		}
		out = append(out, gcos.ProposedChange{Kind: gcos.PreviewOwnerRevoke, OwnershipID: &id})
		covered += n
	}
	if len(out) == 0 {
		return nil, 0, "", fmt.Errorf("no ownership row covers at most %d objects", budget)
	}
	return out, covered, scope, rows.Err()
}

// naivePreview is the preview without routing: every live group re-evaluated under the registries as they are and
// as the changes make them, and each base's members counted when the gate's decision on them flips.
func naivePreview(ctx context.Context, store *postgres.Store, changes []gcos.ProposedChange) (int64, error) {
	tx, err := store.Pool().BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read-only
	if _, err := tx.Exec(ctx, postgres.NoJIT); err != nil {
		return 0, err
	}
	// The same answer has the ledgers before and after: the naive reads them as the preview does.
	if _, err := postgres.ReadLedgers(ctx, tx, ""); err != nil {
		return 0, err
	}
	var version string
	if err := tx.QueryRow(ctx, `SELECT ruleset_version FROM v_current_ruleset`).Scan(&version); err != nil {
		return 0, err
	}
	rs, err := store.RulesetVersionVia(ctx, tx, version)
	if err != nil {
		return 0, err
	}
	ev, err := evaluate.New(ctx, store, tx, rs)
	if err != nil {
		return 0, err
	}
	applied, err := gcos.ApplyChanges(ev.Registries(), changes, ev.Now(), nil)
	if err != nil {
		return 0, err
	}
	rows, err := tx.Query(ctx, `SELECT object_class, source_registry, lifecycle_status, max(member_count)
		FROM governance_group WHERE retired_at IS NULL GROUP BY 1, 2, 3`)
	if err != nil {
		return 0, err
	}
	type base struct {
		b       gcos.BaseGroup
		members int64
	}
	bases, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (base, error) {
		var b base
		err := r.Scan(&b.b.ObjectClass, &b.b.SourceRegistry, &b.b.LifecycleStatus, &b.members)
		return b, err
	})
	if err != nil {
		return 0, err
	}
	low := store.Config().Gate.LowRiskClasses
	decide := func(e *evaluate.Evaluator, regs gcos.Registries, b base) (string, error) {
		in := gcos.ObjectGateInput{Action: gcos.ActionWrite}
		for _, d := range regs.Dimensions(b.b) {
			v, err := e.Evaluate(gcos.NewGroup(d, b.members), "")
			if err != nil {
				return "", err
			}
			row := gcos.CandidateRow{GroupKey: v.GroupKey, RulesetVersion: version, Verdict: v.Verdict, InputQualityState: &v.InputQuality,
				RecomputeStatus: gcos.RecomputeOK, RiskClass: v.RiskClass, CoverageRequired: v.CoverageRequired, OwnerScope: v.OwnerScope}
			if v.Verdict == gcos.VerdictRelevant {
				row.CoverageScanRef = gcos.Str("naive")
			}
			in.Rows = append(in.Rows, gcos.GateInput{Action: gcos.ActionWrite, Found: true, Source: gcos.GateSourceGroup, Row: row,
				Scope: *d.Scope, Effective: gcos.EffectiveState{Verdict: v.Verdict, Clean: true}, HighRisk: gcos.IsHighRisk(v.RiskClass, low),
				RulesetStatus: gcos.RulesetActive, SnapshotExists: true, Coverage: v.Coverage})
			in.Scopes = append(in.Scopes, *d.Scope)
		}
		return gcos.GateObject(in).Decision, nil
	}
	after := ev.WithRegistries(applied.After)
	var flips int64
	for _, b := range bases {
		d0, err := decide(ev, ev.Registries(), b)
		if err != nil {
			return 0, err
		}
		d1, err := decide(after, applied.After, b)
		if err != nil {
			return 0, err
		}
		if d0 != d1 {
			flips += b.members
		}
	}
	return flips, nil
}
