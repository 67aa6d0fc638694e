package main

// The naive baselines: "re-derive everything every pass", as the seeds describe it, written as well as plain SQL
// allows (set-based, one statement per step) so that the comparison is against a fair opponent, not a strawman.

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// naiveSnapshotSQL is the seeds' snapshot: per (entity_type, collection_name, status), md5 of every row's text in
// id order, over the whole table in one statement.
const naiveSnapshotSQL = `
SELECT b.entity_type, b.collection_name, b.status, count(*), md5(string_agg(b::text, '' ORDER BY b.id))
FROM birth_registry b
GROUP BY 1, 2, 3`

// naiveRulesetSQL hashes the rule registries (the ruleset components) as text.
const naiveRulesetSQL = `
SELECT md5(string_agg(x, E'\n' ORDER BY x)) FROM (
    SELECT m::text AS x FROM measurement_registry m WHERE m.enabled
    UNION ALL SELECT p::text FROM governance_coverage_profile p
    UNION ALL SELECT d::text FROM pivot_definitions d
    UNION ALL SELECT j::text FROM law_jurisdiction j
    UNION ALL SELECT s::text FROM governance_responsibility_scope s
) y`

// naiveVerdictSQL is the verdict policy of SPEC §7 as a CASE over the registries, for an object whose (anchor's)
// class is a.cls, collection a.coll and status a.st.
const naiveVerdictSQL = `
CASE
    WHEN cr.collection_name IS NULL OR mc.entity_type IS NULL THEN 'needs_input'
    WHEN a.st IN ('retired', 'superseded', 'merged') THEN 'retired'
    WHEN cr.coverage_status LIKE 'BIRTH\_EXEMPT\_%' THEN 'retired'
    WHEN cp.privacy IN ('private', 'user', 'session') OR cr.scope_class = 'USER_EXCLUDED' THEN 'class_0'
    WHEN cr.scope_class IN ('FUTURE_SCOPE', 'ORPHAN_REGISTRY') OR cr.coverage_status = 'BIRTH_DEFERRED_NEEDS_REVIEW' THEN 'deferred_birth'
    WHEN cp.coverage_required = false THEN 'not_relevant'
    WHEN cr.coverage_status = 'BIRTH_REQUIRED' AND cr.scope_class = 'IN_SCOPE' AND cp.coverage_required THEN 'relevant'
    ELSE 'unknown'
END`

const naiveCandidateDDL = `
CREATE TEMP TABLE naive_candidate (
    id bigint, candidate_key text, object_class text, source_registry text, lifecycle_status text,
    verdict text, risk_class text, coverage_required boolean, scan_time timestamptz
)`

// naiveSeedSQL evaluates every birth one by one: one candidate row per object with the verdict logic applied to
// that object's (anchor's) registry rows.
const naiveSeedSQL = `
INSERT INTO naive_candidate
SELECT a.id, a.candidate_key, a.cls, a.coll, a.st, ` + naiveVerdictSQL + `, cp.risk_class, coalesce(cp.coverage_required, false), now()
FROM (
    SELECT b.id, coalesce(b.canonical_address, b.collection_name || ':' || b.entity_code) AS candidate_key,
           coalesce(p.entity_type, b.entity_type) AS cls, coalesce(p.collection_name, b.collection_name) AS coll,
           coalesce(p.status, b.status) AS st
    FROM birth_registry b
    LEFT JOIN birth_registry p ON b.parent_code IS NOT NULL AND p.collection_name = b.collection_name AND p.entity_code = b.parent_code
) a
LEFT JOIN collection_registry cr ON cr.collection_name = a.coll
LEFT JOIN meta_catalog mc ON mc.entity_type = a.cls
LEFT JOIN governance_coverage_profile cp ON cp.entity_type = a.cls`

// naiveResult is one naive backfill.
type naiveResult struct {
	Elapsed     time.Duration
	Groups      int   // groups the snapshot step hashed
	RowsWritten int64 // candidate rows written (one per object)
}

// naiveBackfill re-derives everything: the seeds' snapshot, the ruleset hash, and one evaluated candidate row per
// birth written to a temp table (dropped afterwards, not timed).
func naiveBackfill(ctx context.Context, p *pgxpool.Pool) (naiveResult, error) {
	var res naiveResult
	conn, err := p.Acquire(ctx)
	if err != nil {
		return res, err
	}
	defer conn.Release()
	t0 := time.Now()
	rows, err := conn.Query(ctx, naiveSnapshotSQL)
	if err != nil {
		return res, fmt.Errorf("naive snapshot: %w", err)
	}
	for rows.Next() {
		res.Groups++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return res, fmt.Errorf("naive snapshot: %w", err)
	}
	var h *string
	if err := conn.QueryRow(ctx, naiveRulesetSQL).Scan(&h); err != nil {
		return res, fmt.Errorf("naive ruleset: %w", err)
	}
	if _, err := conn.Exec(ctx, naiveCandidateDDL); err != nil {
		return res, fmt.Errorf("naive candidates: %w", err)
	}
	tag, err := conn.Exec(ctx, naiveSeedSQL)
	if err != nil {
		_, _ = conn.Exec(context.WithoutCancel(ctx), `DROP TABLE IF EXISTS naive_candidate`)
		return res, fmt.Errorf("naive seeding: %w", err)
	}
	res.Elapsed = time.Since(t0)
	res.RowsWritten = tag.RowsAffected()
	if _, err := conn.Exec(ctx, `DROP TABLE naive_candidate`); err != nil {
		return res, err
	}
	return res, nil
}

// naiveSnapshot runs the seeds' snapshot statement and returns its duration and the number of groups.
func naiveSnapshot(ctx context.Context, p *pgxpool.Pool) (time.Duration, int, error) {
	t0 := time.Now()
	rows, err := p.Query(ctx, naiveSnapshotSQL)
	if err != nil {
		return 0, 0, fmt.Errorf("naive snapshot: %w", err)
	}
	n := 0
	for rows.Next() {
		n++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, 0, fmt.Errorf("naive snapshot: %w", err)
	}
	return time.Since(t0), n, nil
}

// naiveGateSQL re-derives one object's group verdict from the registries on every call: it finds the object's
// (anchor's) base group, re-aggregates the group's members from birth_registry (the backfill evaluation of that one
// group) and evaluates the verdict policy per responsibility scope, with the owner lookup.
const naiveGateSQL = `
WITH a AS (
    SELECT coalesce(p.entity_type, b.entity_type) AS cls, coalesce(p.collection_name, b.collection_name) AS coll,
           coalesce(p.status, b.status) AS st
    FROM birth_registry b
    LEFT JOIN birth_registry p ON b.parent_code IS NOT NULL AND p.collection_name = b.collection_name AND p.entity_code = b.parent_code
    WHERE b.collection_name = $1 AND b.entity_code = $2
), m AS (
    SELECT count(*) AS members, max(x.born_at) AS max_born, max(x.id) AS max_id
    FROM birth_registry x, a
    WHERE x.collection_name = a.coll AND x.entity_type = a.cls AND x.status = a.st
)
SELECT s.scope_code, ` + naiveVerdictSQL + ` AS verdict, coalesce(cp.risk_class, 'unknown'), m.members,
       EXISTS (SELECT 1 FROM governance_object_ownership o WHERE o.scope_code = s.scope_code AND o.status = 'active'
               AND (o.collection_name = a.coll OR o.entity_type = a.cls)) AS owned
FROM a CROSS JOIN m CROSS JOIN governance_responsibility_scope s
LEFT JOIN collection_registry cr ON cr.collection_name = a.coll
LEFT JOIN meta_catalog mc ON mc.entity_type = a.cls
LEFT JOIN governance_coverage_profile cp ON cp.entity_type = a.cls`

// naiveGate answers allow/block by re-deriving the group verdict in every scope (fail closed: unknown or
// needs_input on a non-low-risk class blocks, as does a relevant one with no owner in a scope, and an unknown
// object).
func naiveGate(ctx context.Context, p *pgxpool.Pool, coll, code string) (bool, error) {
	rows, err := p.Query(ctx, naiveGateSQL, coll, code)
	if err != nil {
		return false, err
	}
	defer rows.Close()
	allow, n := true, 0
	for rows.Next() {
		var scope, verdict, risk string
		var members int64
		var owned bool
		if err := rows.Scan(&scope, &verdict, &risk, &members, &owned); err != nil {
			return false, err
		}
		n++
		if risk != "read_descriptive" && (verdict == "unknown" || verdict == "needs_input" || (verdict == "relevant" && !owned)) {
			allow = false
		}
	}
	return allow && n > 0, rows.Err()
}
