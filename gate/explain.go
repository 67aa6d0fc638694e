package gate

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
	"gcos/postgres"
)

// Explanation is the reproducible statement for an object or a group, with the stored values it is built from.
type Explanation struct {
	Subject    string         `json:"subject"`
	Statements []string       `json:"statements"`
	Rows       []ExplainedRow `json:"rows"`
	// MissingScopes are scopes of the current ruleset in which no group represents the object (the gate blocks).
	MissingScopes []string `json:"missing_scopes,omitempty"`
	// ObjectFingerprint is the object's fingerprint now: the value an exception on the object pins.
	ObjectFingerprint string `json:"object_fingerprint,omitempty"`
	// InputProblems are the object's input values no verdict can rest on (the gate blocks, naming each).
	InputProblems []gcos.InputProblem `json:"input_problems,omitempty"`
}

// ExplainedRow is one candidate row behind an explanation.
type ExplainedRow struct {
	Source    string               `json:"source"`
	Key       string               `json:"key"`
	Scope     string               `json:"scope,omitempty"`
	Row       *gcos.CandidateRow   `json:"row"`
	Effective gcos.EffectiveState  `json:"effective"`
	Ruleset   string               `json:"ruleset_status"`
	Snapshot  *time.Time           `json:"snapshot_at"`
	Coverage  gcos.CoverageOutcome `json:"coverage_outcome,omitempty"` // of a relevant row, in force now
	// RecordedCoverage is the outcome its scan recorded, when an exception it rested on has since been lifted.
	RecordedCoverage gcos.CoverageOutcome `json:"recorded_coverage_outcome,omitempty"`
	ExceptionLifted  *gcos.ExceptionLift  `json:"exception_lifted,omitempty"`
	// OwnerDispute lists the owners equally specific ownership rows of the row's scope name: no owner resolves.
	OwnerDispute []string `json:"owner_dispute,omitempty"`
	Age          string   `json:"age,omitempty"` // since the row's scan, as of the explanation
}

// ExplainObject explains an object's verdict(s) from stored values only.
func (g *Gate) ExplainObject(ctx context.Context, object string) (Explanation, error) {
	ref, err := postgres.ParseObjectRef(object)
	if err != nil {
		return Explanation{}, err
	}
	o, err := g.gateInputs(ctx, g.pool, ref)
	if err != nil {
		return Explanation{}, fmt.Errorf("explain %s: %w", object, err)
	}
	if len(o.reads) == 0 {
		return Explanation{}, gcos.Errorf(gcos.ENOTFOUND, "object %s has no birth", object)
	}
	ex := g.explain(ref.String(), o.reads, o.now)
	if err := g.explainDisputes(ctx, &ex); err != nil {
		return Explanation{}, fmt.Errorf("explain %s: %w", object, err)
	}
	ex.ObjectFingerprint = postgres.Deref(o.fingerprint)
	ex.InputProblems = o.problems
	for _, p := range o.problems {
		ex.Statements = append(ex.Statements, fmt.Sprintf("object %s cannot be judged: %s (input quality %s)", ref, p.Reason, p.State))
	}
	for _, scope := range o.scopes {
		if !slices.ContainsFunc(o.reads, func(r candidateRead) bool { return r.source == gcos.GateSourceGroup && r.scope == scope }) {
			ex.MissingScopes = append(ex.MissingScopes, scope)
			ex.Statements = append(ex.Statements, fmt.Sprintf("object %s has no group in scope %s: unknown", ref, scope))
		}
	}
	return ex, nil
}

// ExplainGroup explains a group's verdict from stored values only.
func (g *Gate) ExplainGroup(ctx context.Context, key string) (Explanation, error) {
	if !gcos.IsGroupKey(key) {
		return Explanation{}, gcos.Errorf(gcos.EINVALID, "group key %s: want 32 lowercase hex digits", gcos.Quote(key))
	}
	var reads []candidateRead
	var now time.Time
	err := pgx.BeginTxFunc(ctx, g.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `
			SELECT g.group_key, coalesce(g.scope, ''), c.source_snapshot_ref, c.ruleset_version, c.scan_time, c.candidate_verdict,
			       c.input_quality_state, c.dirty, c.dirty_reason, c.stale_after, c.recompute_status, c.risk_class,
			       c.coverage_required, c.coverage_scan_ref, c.owner_scope, c.lifecycle_status, c.member_count,
			       r.status, coalesce((SELECT ruleset_version FROM governance_ruleset WHERE status = 'active'), ''),
			       s.id IS NOT NULL, s.snapshot_at,
			       cov.outcome, cov.owner_ref, cov.exception_id, cov.exception_expires_at, cov.exception_fingerprint,
			       gcos_exception_row(cov.exception_id), coalesce(g.object_class, ''), coalesce(g.source_registry, '')
			FROM governance_group g
			LEFT JOIN v_current_ruleset cr ON true
			LEFT JOIN governance_candidate_state c ON c.group_key = g.group_key AND c.ruleset_version = cr.ruleset_version
			LEFT JOIN governance_ruleset r ON r.ruleset_version = c.ruleset_version
			LEFT JOIN evolution_snapshots s ON s.id = c.source_snapshot_ref
			LEFT JOIN governance_candidate_coverage cov ON cov.candidate_ref = g.group_key AND cov.ruleset_version = c.ruleset_version
			WHERE g.group_key = $1`, key)
		if err != nil {
			return err
		}
		for rows.Next() {
			var class, registry string
			r, _, err := scanCandidate(rows, gcos.GateSourceGroup, &class, &registry)
			if err != nil {
				rows.Close()
				return err
			}
			r.coverageAt(now, class, registry, "", nil)
			reads = append(reads, r)
		}
		return rows.Err()
	})
	if err != nil {
		return Explanation{}, fmt.Errorf("explain group %s: %w", key, err)
	}
	if len(reads) == 0 {
		return Explanation{}, gcos.Errorf(gcos.ENOTFOUND, "group %s is not in the group registry", key)
	}
	ex := g.explain("group "+key, reads, now)
	if err := g.explainDisputes(ctx, &ex); err != nil {
		return Explanation{}, fmt.Errorf("explain group %s: %w", key, err)
	}
	return ex, nil
}

// explainDisputes names the ownership disputes of the explained groups (their open owner_dispute findings).
func (g *Gate) explainDisputes(ctx context.Context, ex *Explanation) error {
	var keys []string
	for _, r := range ex.Rows {
		if r.Source == gcos.GateSourceGroup {
			keys = append(keys, gcos.CoalesceKey(gcos.IssueOwnerDispute, r.Key))
		}
	}
	if len(keys) == 0 {
		return nil
	}
	rows, err := g.pool.Query(ctx, `SELECT DISTINCT ON (coalesce_key) evidence_snapshot ->> 'group_key',
		       coalesce(ARRAY(SELECT jsonb_array_elements_text(evidence_snapshot::jsonb -> 'claimants')), '{}')
		FROM system_issues WHERE coalesce_key = ANY($1) AND status = 'open' ORDER BY coalesce_key, id`, keys)
	if err != nil {
		return fmt.Errorf("read owner disputes: %w", err)
	}
	disputes := map[string][]string{}
	for rows.Next() {
		var key string
		var claimants []string
		if err := rows.Scan(&key, &claimants); err != nil {
			rows.Close()
			return fmt.Errorf("read owner disputes: %w", err)
		}
		disputes[key] = claimants
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read owner disputes: %w", err)
	}
	for i, r := range ex.Rows {
		if c, ok := disputes[r.Key]; ok && r.Source == gcos.GateSourceGroup {
			ex.Rows[i].OwnerDispute = c
			ex.Statements = append(ex.Statements, fmt.Sprintf("group %s (scope %s): ownership dispute between %s: no owner resolves (fail closed); routed to %s",
				r.Key, r.Scope, strings.Join(c, ", "), gcos.CouncilOwner))
		}
	}
	return nil
}

func (g *Gate) explain(subject string, reads []candidateRead, now time.Time) Explanation {
	ex := Explanation{Subject: subject}
	for _, r := range reads {
		er := ExplainedRow{Source: r.source, Key: r.key, Scope: r.scope, Ruleset: r.rulesetStatus, Snapshot: r.snapshotAt,
			Coverage: r.coverage, ExceptionLifted: r.lift}
		if r.lift != nil {
			er.RecordedCoverage = r.recorded.Outcome
		}
		var eff gcos.EffectiveState
		if r.found() {
			row := r.row
			er.Row = &row
			eff = g.gateInput(gcos.ActionWrite, r, now).Effective
			er.Effective = eff
			er.Age = now.Sub(row.ScanTime).Round(time.Second).String()
		} else {
			er.Effective = gcos.EffectiveState{Verdict: gcos.VerdictUnknown, Reasons: []string{"never_seeded"}}
		}
		ex.Rows = append(ex.Rows, er)
		ex.Statements = append(ex.Statements, g.statement(subject, r, eff))
	}
	return ex
}
