package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
)

// Object rows are materialized only for the four reasons of doc 40 §40.6. The backfill and the full audit own
// three of them (independently authoritative class, exception on the object, high-risk write-path class); the
// fourth (an open finding on the object) is owned by whoever raises the finding.

type objectCandidate struct {
	key, objectType, objectRef, reason, groupKey string
	values                                       candidateValues
}

// objectCriteria returns the classes whose objects materialize (by reason) and the objects under exception.
func (e *evaluator) objectCriteria(objectRisk []string) (classes map[string]string, excepted map[[2]string]gcos.ExceptionRow) {
	classes = map[string]string{}
	for class, p := range e.regs.Profile {
		switch {
		case p.IndependentlyAuthoritative:
			classes[class] = "independently_authoritative"
		case p.WritePath && slices.Contains(objectRisk, e.regs.RiskClass(class)):
			classes[class] = "high_risk_write_path"
		}
	}
	excepted = map[[2]string]gcos.ExceptionRow{}
	for _, x := range e.regs.Exceptions {
		if x.EntityCode != nil && x.CollectionName != nil && x.Approved(e.now) {
			excepted[[2]string{*x.CollectionName, *x.EntityCode}] = x
		}
	}
	return classes, excepted
}

// materializeObjects upserts the object rows the criteria select under the evaluator's ruleset and turns rows
// whose reason lapsed into tombstones (lifecycle retired). A tombstone whose reason returns is re-activated.
func (s *Store) materializeObjects(ctx context.Context, tx pgx.Tx, ev *evaluator, snap Snapshot, runID string) (materialized, retired int64, err error) {
	classes, excepted := ev.objectCriteria(s.cfg.Gate.ObjectRiskClasses)
	classList := make([]string, 0, len(classes))
	for c := range classes {
		classList = append(classList, c)
	}
	var excColls, excCodes []string
	for k := range excepted {
		excColls, excCodes = append(excColls, k[0]), append(excCodes, k[1])
	}
	b := s.birthBinding()
	rows, err := tx.Query(ctx, fmt.Sprintf(`
		SELECT b.%[2]s, b.%[3]s, coalesce(a.%[4]s, b.%[4]s), coalesce(a.%[5]s, b.%[5]s), coalesce(a.%[2]s, b.%[2]s), b.%[6]s
		FROM %[1]s b
		LEFT JOIN LATERAL (SELECT p.%[4]s, p.%[5]s, p.%[2]s FROM %[1]s p
		                   WHERE b.%[7]s IS NOT NULL AND p.%[2]s = b.%[2]s AND p.%[3]s = b.%[7]s OFFSET 0) a ON true
		WHERE b.%[4]s = ANY($1)
		   OR (b.%[2]s, b.%[3]s) IN (SELECT * FROM unnest($2::text[], $3::text[]))`,
		ident(b.Table), ident(b.Collection), ident(b.Code), ident(b.Type), ident(b.Status), ident(b.Canonical), ident(b.Parent)),
		classList, excColls, excCodes)
	if err != nil {
		return 0, 0, fmt.Errorf("select objects to materialize: %w", err)
	}
	byBase := map[[3]string]gcos.Group{}
	for _, g := range snap.Groups {
		k := [3]string{deref(g.ObjectClass), deref(g.SourceRegistry), deref(g.LifecycleStatus)}
		if cur, ok := byBase[k]; !ok || deref(g.Scope) < deref(cur.Scope) {
			byBase[k] = g // the object row links to its base group in the first scope
		}
	}
	var objs []objectCandidate
	byGroup := map[string]candidateValues{}
	for rows.Next() {
		var coll, code, class, status, anchorColl string
		var canonical *string
		if err := rows.Scan(&coll, &code, &class, &status, &anchorColl, &canonical); err != nil {
			rows.Close()
			return 0, 0, fmt.Errorf("read object: %w", err)
		}
		g, ok := byBase[[3]string{class, anchorColl, status}]
		if !ok {
			continue // born after the snapshot: the next audit materializes it
		}
		ref := coll + ":" + code
		key := ref
		if canonical != nil && *canonical != "" {
			key = *canonical
		}
		reason := classes[class]
		if _, ok := excepted[[2]string{coll, code}]; ok {
			reason = "exception"
		}
		// Objects share their group's verdict inputs: evaluate each group once, and key the object's evidence by
		// its candidate key.
		gv, ok := byGroup[g.Key]
		if !ok {
			one := g
			one.MemberCount = 1
			if gv, err = ev.evaluate(one, ""); err != nil {
				rows.Close()
				return 0, 0, err
			}
			byGroup[g.Key] = gv
		}
		v := gv
		sum := sha256.Sum256([]byte(gv.Evidence + "\x00" + key))
		v.Evidence = hex.EncodeToString(sum[:16])
		if reason == "exception" && v.Verdict == gcos.VerdictRelevant {
			x := excepted[[2]string{coll, code}]
			v.Coverage, v.ExceptionID = gcos.CoverageApprovedException, &x.ExceptionID
		}
		v.GroupKey = "object:" + key
		objs = append(objs, objectCandidate{key: key, objectType: class, objectRef: ref, reason: reason, groupKey: g.Key, values: v})
	}
	if err := rows.Err(); err != nil {
		return 0, 0, fmt.Errorf("read objects: %w", err)
	}
	return upsertObjects(ctx, tx, snap.ID, ev.ruleset.Version, runID, objs)
}

const upsertObjectsSQL = `
INSERT INTO governance_candidate_object AS o (candidate_key, object_type, object_ref, materialization_reason, group_key,
    source_snapshot_ref, ruleset_version, scan_time, candidate_verdict, input_quality_state, depends_on, stale_after,
    recompute_status, risk_class, coverage_required, coverage_scan_ref, last_run_id, evidence_fingerprint, owner_scope)
SELECT u.key, u.otype, u.oref, u.reason, u.gkey, $1, $2, now(), u.verdict, u.quality, u.deps, now() + u.ttl, 'ok',
       u.risk, u.required, CASE WHEN u.verdict = 'relevant' THEN $3 END, $3, u.evidence, u.owner
FROM unnest($4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], $11::jsonb[],
            $12::interval[], $13::text[], $14::boolean[], $15::text[], $16::text[])
     AS u(key, otype, oref, reason, gkey, verdict, quality, deps, ttl, risk, required, evidence, owner)
ON CONFLICT (candidate_key, ruleset_version) DO UPDATE SET
    materialization_reason = EXCLUDED.materialization_reason, group_key = EXCLUDED.group_key,
    source_snapshot_ref = EXCLUDED.source_snapshot_ref, scan_time = EXCLUDED.scan_time,
    candidate_verdict = EXCLUDED.candidate_verdict, input_quality_state = EXCLUDED.input_quality_state,
    depends_on = EXCLUDED.depends_on, stale_after = EXCLUDED.stale_after, recompute_status = 'ok', dirty = false,
    dirty_reason = NULL, risk_class = EXCLUDED.risk_class, coverage_required = EXCLUDED.coverage_required,
    coverage_scan_ref = EXCLUDED.coverage_scan_ref, last_run_id = EXCLUDED.last_run_id,
    evidence_fingerprint = EXCLUDED.evidence_fingerprint, owner_scope = EXCLUDED.owner_scope,
    lifecycle_status = 'active', updated_at = now()
WHERE o.lifecycle_status <> 'active' OR o.evidence_fingerprint IS DISTINCT FROM EXCLUDED.evidence_fingerprint
   OR o.materialization_reason IS DISTINCT FROM EXCLUDED.materialization_reason`

// Rows whose reason lapsed become tombstones; rows held by an open finding are released by the finding's owner.
const tombstoneObjectsSQL = `
UPDATE governance_candidate_object SET lifecycle_status = 'retired', updated_at = now(), last_run_id = $3
WHERE ruleset_version = $1 AND lifecycle_status = 'active' AND materialization_reason <> 'open_finding'
  AND candidate_key NOT IN (SELECT unnest($2::text[]))`

func upsertObjects(ctx context.Context, tx pgx.Tx, snapshotID int64, ruleset, runID string, objs []objectCandidate) (int64, int64, error) {
	n, err := upsertObjectRows(ctx, tx, snapshotID, ruleset, runID, objs)
	if err != nil {
		return 0, 0, err
	}
	keys := make([]string, len(objs))
	for i, o := range objs {
		keys[i] = o.key
	}
	slices.Sort(keys)
	ret, err := tx.Exec(ctx, tombstoneObjectsSQL, ruleset, keys, runID)
	if err != nil {
		return 0, 0, fmt.Errorf("retire lapsed objects: %w", err)
	}
	return n, ret.RowsAffected(), nil
}

// upsertObjectRows writes object rows (and the coverage of relevant ones) without retiring anything.
func upsertObjectRows(ctx context.Context, tx pgx.Tx, snapshotID int64, ruleset, runID string, objs []objectCandidate) (int64, error) {
	n := len(objs)
	keys, otypes, orefs, reasons, gkeys, verdicts, quals, risks, evid := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	deps, required, owners := make([]string, n), make([]bool, n), make([]*string, n)
	ttls := make([]time.Duration, n)
	var cov []candidateValues
	for i, o := range objs {
		v := o.values
		keys[i], otypes[i], orefs[i], reasons[i], gkeys[i] = o.key, o.objectType, o.objectRef, o.reason, o.groupKey
		verdicts[i], quals[i], risks[i], evid[i], deps[i], required[i], owners[i] = string(v.Verdict), v.InputQuality, v.RiskClass, v.Evidence, string(v.DependsOn), v.CoverageRequired, v.OwnerScope
		ttls[i] = v.TTL
		if v.Verdict == gcos.VerdictRelevant {
			cov = append(cov, v)
		}
	}
	tag, err := tx.Exec(ctx, upsertObjectsSQL, snapshotID, ruleset, runID, keys, otypes, orefs, reasons, gkeys, verdicts, quals, deps, ttls, risks, required, evid, owners)
	if err != nil {
		return 0, fmt.Errorf("materialize objects: %w", err)
	}
	if err := recordCoverage(ctx, tx, ruleset, runID, cov); err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
