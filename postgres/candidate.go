package postgres

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
)

// LifecycleActive is a live candidate row's lifecycle_status.
const LifecycleActive = "active"

// RegistriesUnder loads the live registries under the rule side of a ruleset's components (underRuleset): what an
// evaluation under that ruleset judges groups with.
func (s *Store) RegistriesUnder(ctx context.Context, q Querier, c gcos.RulesetComponents) (gcos.Registries, error) {
	regs, err := loadRegistries(ctx, q, s.cfg.SourceBinding)
	if err != nil {
		return regs, err
	}
	return underRuleset(ctx, q, s.cfg.SourceBinding, regs, c)
}

// DimensionRegistries loads the registries group keys are derived from: the live ones under the rule side of
// ruleset version (the current ruleset when empty; the live rule registries before any ruleset exists), so the
// intake, snapshots and scans key a base group in a scope identically.
func (s *Store) DimensionRegistries(ctx context.Context, q Querier, version string) (gcos.Registries, error) {
	regs, err := loadRegistries(ctx, q, s.cfg.SourceBinding)
	if err != nil {
		return regs, err
	}
	var rs RulesetRow
	if version == "" {
		rs, err = s.currentRulesetVia(ctx, q)
	} else {
		rs, err = s.RulesetVersionVia(ctx, q, version)
	}
	switch {
	case gcos.ErrorCode(err) == gcos.ENOTFOUND:
		return regs, nil
	case err != nil:
		return regs, err
	}
	return underRuleset(ctx, q, s.cfg.SourceBinding, regs, rs.Components)
}

// underRuleset replaces the rule side of the live registries (coverage profile, axis, jurisdictions, scopes)
// with a ruleset's components, so a group's dimensions and verdict follow from its ruleset version; ownership,
// exceptions, collections and classes stay live.
func underRuleset(ctx context.Context, q Querier, sb gcos.SourceBinding, regs gcos.Registries, c gcos.RulesetComponents) (gcos.Registries, error) {
	regs.Profile = map[string]gcos.CoverageProfileRow{}
	for _, p := range c.CoverageProfile {
		regs.Profile[p.EntityType] = p
	}
	// The ruleset's components are shared (cached per version): Finish sorts what it is given, so give it copies.
	regs.Pivots, regs.Jurisdictions, regs.Scopes = slices.Clone(c.Pivots), slices.Clone(c.Jurisdictions), slices.Clone(c.Scopes)
	regs.Absent = nil
	for _, name := range []string{gcos.TableExceptions, gcos.TableOwnership} {
		if ok, err := registryExists(ctx, q, sb, name); err != nil {
			return regs, err
		} else if !ok {
			regs.Absent = append(regs.Absent, name)
		}
	}
	if c.IsAbsent(gcos.ComponentCoverageProfile) {
		regs.Absent = append(regs.Absent, gcos.TableCoverageProfile)
	}
	if c.IsAbsent(gcos.ComponentAxis) {
		regs.Absent = append(regs.Absent, gcos.TablePivots)
	}
	if c.IsAbsent(gcos.ComponentScopes) {
		regs.Absent = append(regs.Absent, gcos.TableScopes)
	}
	regs.Finish()
	return regs, nil
}

// CandidateValues are the evaluated columns of one candidate row.
type CandidateValues struct {
	GroupKey         string
	Verdict          gcos.Verdict
	Rule             string
	InputQuality     string
	RiskClass        string
	CoverageRequired bool
	OwnerScope       *string
	DependsOn        []byte
	TTL              time.Duration
	Evidence         string
	MemberCount      int64
	Lifecycle        string               // the row's lifecycle_status; "" is active
	Coverage         gcos.CoverageOutcome // set for relevant groups
	CoverageOwner    *string
	ExceptionID      *string
	// The terms the exception is counted under at read time (gcos.CoverageRecord.At).
	ExceptionExpiresAt   *time.Time
	ExceptionFingerprint *string
	// OwnerDispute lists the owners that equally specific ownership rows of the group's scope name: no owner
	// (fail closed), and an owner_dispute finding routed to the council.
	OwnerDispute []string
	// CountedAt is when a scan read MemberCount (postgres.CountGroups); nil when no count was read for the row.
	CountedAt *time.Time
	// CountedBirths are the births not handed off yet that MemberCount includes (GroupCounts.Births); nil: not
	// known, an empty list: none.
	CountedBirths []int64
	// CountedSnapshot is the snapshot the count's first statement read under (GroupCounts.Snapshot): a pending mark
	// whose transaction it saw is included. "": not known (counted_at decides).
	CountedSnapshot string
}

// RetireGroups marks groups retired in the registry (zero members); the gate no longer consults them. A group
// that gains members again is re-activated by UpsertGroups.
func RetireGroups(ctx context.Context, tx pgx.Tx, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, `UPDATE governance_group SET member_count = 0, retired_at = coalesce(retired_at, now())
		WHERE group_key = ANY($1) AND (member_count <> 0 OR retired_at IS NULL)`, keys); err != nil {
		return fmt.Errorf("retire groups: %w", err)
	}
	return nil
}

// UpsertGroups records groups in the group registry with their member counts, re-activating retired ones;
// unchanged groups are not written. New keys are inserted first, then known rows updated, both in group-key order
// and never with a key-changing lock (see LockOrder): a candidate row's foreign-key check on its group never waits.
func UpsertGroups(ctx context.Context, tx pgx.Tx, groups []gcos.Group) error {
	if len(groups) == 0 {
		return nil
	}
	groups = slices.Clone(groups)
	slices.SortFunc(groups, func(a, b gcos.Group) int { return strings.Compare(a.Key, b.Key) }) // one lock order
	n := len(groups)
	keys, classes, regs, axes, scopes, lifecycles, owners := make([]string, n), make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n)
	counts, deps := make([]int64, n), make([]string, n)
	for i, g := range groups {
		keys[i], classes[i], regs[i], axes[i], scopes[i], lifecycles[i], owners[i] = g.Key, g.ObjectClass, g.SourceRegistry, g.AxisFamily, g.Scope, g.LifecycleStatus, g.OwnerScope
		counts[i] = g.MemberCount
		d, err := json.Marshal(gcos.NewDependsOn(g.Dimensions))
		if err != nil {
			return err
		}
		deps[i] = string(d)
	}
	if _, err := tx.Exec(ctx, `
		INSERT INTO governance_group (group_key, object_class, source_registry, axis_family, scope, lifecycle_status, owner_scope, member_count, depends_on)
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::bigint[], $9::jsonb[])
		ON CONFLICT (group_key) DO NOTHING`,
		keys, classes, regs, axes, scopes, lifecycles, owners, counts, deps); err != nil {
		return fmt.Errorf("record groups: %w", err)
	}
	return UpdateGroupCounts(ctx, tx, groups)
}

// UpdateGroupCounts writes the member counts of groups the registry holds, re-activating retired ones; unchanged
// rows are not written. Rows are updated in group-key order with a lock that leaves their key alone (LockOrder).
func UpdateGroupCounts(ctx context.Context, tx pgx.Tx, groups []gcos.Group) error {
	if len(groups) == 0 {
		return nil
	}
	groups = slices.Clone(groups)
	slices.SortFunc(groups, func(a, b gcos.Group) int { return strings.Compare(a.Key, b.Key) })
	keys, counts := make([]string, len(groups)), make([]int64, len(groups))
	for i, g := range groups {
		keys[i], counts[i] = g.Key, g.MemberCount
	}
	if _, err := tx.Exec(ctx, `
		WITH u AS (SELECT * FROM unnest($1::text[], $2::bigint[]) AS u(k, n)),
		locked AS (
		    SELECT g.group_key, u.n FROM governance_group g JOIN u ON u.k = g.group_key
		    WHERE g.group_key = ANY($1) AND (g.member_count IS DISTINCT FROM u.n OR g.retired_at IS NOT NULL)
		    ORDER BY g.group_key FOR NO KEY UPDATE OF g
		)
		UPDATE governance_group g SET member_count = l.n, last_seen_at = now(), retired_at = NULL
		FROM locked l WHERE g.group_key = l.group_key`, keys, counts); err != nil {
		return fmt.Errorf("record group counts: %w", err)
	}
	return nil
}

// LockOrder is the order every transaction takes the locks of the candidate state in (SPEC §8), so that no two
// of them ever wait for each other in a cycle:
//
//  1. kept member counts (governance_collection_count), in collection order: the births handoff; a change's handoff
//     takes one only without waiting (RecountKept, SKIP LOCKED);
//  2. group rows (governance_group), in group-key order, FOR NO KEY UPDATE: never a key-changing lock, so the
//     foreign-key check of a candidate row's insert (KEY SHARE on its group) waits for no one; new group keys
//     are inserted in key order, in one statement, before any candidate row is locked;
//  3. candidate rows (governance_candidate_state), in group-key order (markDirtySQL, LockCandidates); pending
//     marks (governance_pending_mark) are only inserted by a marking transaction and taken with SKIP LOCKED by the
//     one settling them (ApplyPendingMarks), so nobody waits on one;
//  4. object rows: the advisory lock of each birth base in lock-key order (evaluate.Evaluator.FollowObjects), then the rows;
//  5. findings: the advisory lock of the coalesce key. The finding of a signal held for an inactive type is
//     raised from inside other raises (a finding's announcement), one key for many transactions, so it is taken
//     only when free (RaiseHeldSignalFindingTx) and the promoter makes a raise skipped there;
//  6. count locks: a scan tick's advisory lock of each collection and scope it wrote, in lock-key order, last of
//     all; the holder only reads until it commits (scan/collection.go).
//
// A scan tick is the exception that proves the rule: its claims come first, but with SKIP LOCKED, and every
// other group or candidate row it writes (its groups' rows, the groups its members moved to) it takes with SKIP
// LOCKED too; work whose rows another transaction holds stays dirty for a later tick, and a tick never inserts a
// group key (a group its members moved to that the registry lacks is recorded after the tick commits). So a tick
// never waits on level 2 or 3, and a waiter that follows the order can always finish.
const LockOrder = "kept counts, group rows, candidate rows, object rows, findings, count locks"

// LockGroups locks every group row in group-key order (the full audit's reconciliation, level 2 of LockOrder).
func LockGroups(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, `SELECT 1 FROM governance_group ORDER BY group_key FOR NO KEY UPDATE`); err != nil {
		return fmt.Errorf("lock the group rows: %w", err)
	}
	return nil
}

// candidateArrays turns evaluated rows into column arrays for unnest.
type candidateArrays struct {
	keys, verdicts, qualities, risks, evidence []string
	required                                   []bool
	owners                                     []*string
	deps                                       []string
	ttls                                       []time.Duration
	counts                                     []int64
	lifecycles                                 []string
	counted                                    []*time.Time
	births                                     []*string // counted births as bigint[] literals (birthsText)
	snapshots                                  []*string // counted snapshots as pg_snapshot text; nil: not known
}

// birthsText is ids as a bigint[] literal; nil (not known) is NULL.
func birthsText(ids []int64) *string {
	if ids == nil {
		return nil
	}
	b := make([]byte, 0, 2+8*len(ids))
	b = append(b, '{')
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, id, 10)
	}
	out := string(append(b, '}'))
	return &out
}

// groupKeys are the group keys of vs, in vs's order.
func groupKeys(vs []CandidateValues) []string {
	keys := make([]string, len(vs))
	for i, v := range vs {
		keys[i] = v.GroupKey
	}
	return keys
}

func toArrays(vs []CandidateValues) candidateArrays {
	var a candidateArrays
	// Rows are written in group-key order, the order every marking transaction locks them in (markDirtySQL).
	vs = slices.Clone(vs)
	slices.SortFunc(vs, func(x, y CandidateValues) int { return strings.Compare(x.GroupKey, y.GroupKey) })
	for _, v := range vs {
		a.keys = append(a.keys, v.GroupKey)
		a.verdicts = append(a.verdicts, string(v.Verdict))
		a.qualities = append(a.qualities, v.InputQuality)
		a.risks = append(a.risks, v.RiskClass)
		a.evidence = append(a.evidence, v.Evidence)
		a.required = append(a.required, v.CoverageRequired)
		a.owners = append(a.owners, v.OwnerScope)
		a.deps = append(a.deps, string(v.DependsOn))
		a.ttls = append(a.ttls, v.TTL)
		a.counts = append(a.counts, v.MemberCount)
		a.lifecycles = append(a.lifecycles, cmp.Or(v.Lifecycle, LifecycleActive))
		a.counted = append(a.counted, v.CountedAt)
		a.births = append(a.births, birthsText(v.CountedBirths))
		var snap *string
		if v.CountedSnapshot != "" {
			snap = &v.CountedSnapshot
		}
		a.snapshots = append(a.snapshots, snap)
	}
	return a
}

// seedCandidatesSQL seeds one row per group. On a re-run a row is rewritten only when its evidence changed, so
// seeding twice under the same snapshot and ruleset touches nothing (updated_at included).
const seedCandidatesSQL = `
INSERT INTO governance_candidate_state AS c (group_key, source_snapshot_ref, ruleset_version, scan_time, candidate_verdict,
    input_quality_state, depends_on, stale_after, recompute_status, risk_class, coverage_required, coverage_scan_ref,
    last_run_id, evidence_fingerprint, owner_scope, member_count, lifecycle_status, counted_at, counted_births, counted_snapshot)
SELECT u.key, $1, $2, now(), u.verdict, u.quality, u.deps, now() + u.ttl, 'ok', u.risk, u.required,
       CASE WHEN u.verdict = 'relevant' THEN $3 END, $3, u.evidence, u.owner, u.members, u.lifecycle, u.counted, u.births::bigint[], u.snap::pg_snapshot
FROM unnest($4::text[], $5::text[], $6::text[], $7::jsonb[], $8::interval[], $9::text[], $10::boolean[], $11::text[], $12::text[], $13::bigint[], $14::text[], $15::timestamptz[], $16::text[], $17::text[])
     AS u(key, verdict, quality, deps, ttl, risk, required, evidence, owner, members, lifecycle, counted, births, snap)
ON CONFLICT (group_key, ruleset_version) DO UPDATE SET
    source_snapshot_ref = EXCLUDED.source_snapshot_ref, scan_time = EXCLUDED.scan_time,
    candidate_verdict = EXCLUDED.candidate_verdict, input_quality_state = EXCLUDED.input_quality_state,
    depends_on = EXCLUDED.depends_on, stale_after = EXCLUDED.stale_after, recompute_status = 'ok',
    dirty = false, dirty_reason = NULL, risk_class = EXCLUDED.risk_class,
    coverage_required = EXCLUDED.coverage_required, coverage_scan_ref = EXCLUDED.coverage_scan_ref,
    last_run_id = EXCLUDED.last_run_id, evidence_fingerprint = EXCLUDED.evidence_fingerprint,
    owner_scope = EXCLUDED.owner_scope, member_count = EXCLUDED.member_count, lifecycle_status = EXCLUDED.lifecycle_status,
    counted_at = EXCLUDED.counted_at, counted_births = EXCLUDED.counted_births, counted_snapshot = EXCLUDED.counted_snapshot,
    updated_at = now()
WHERE (c.evidence_fingerprint, c.lifecycle_status) IS DISTINCT FROM (EXCLUDED.evidence_fingerprint, EXCLUDED.lifecycle_status)
  AND NOT c.dirty`

// SeedCandidates writes a candidate row per evaluated group (a new group, or every group of a seed).
func SeedCandidates(ctx context.Context, tx pgx.Tx, snapshotID int64, ruleset, runID string, vs []CandidateValues) (int64, error) {
	a := toArrays(vs)
	tag, err := tx.Exec(ctx, seedCandidatesSQL, snapshotID, ruleset, runID, a.keys, a.verdicts, a.qualities, a.deps, a.ttls,
		a.risks, a.required, a.evidence, a.owners, a.counts, a.lifecycles, a.counted, a.births, a.snapshots)
	if err != nil {
		return 0, fmt.Errorf("seed candidates: %w", err)
	}
	if err := RecordCoverage(ctx, tx, ruleset, runID, vs); err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// RecordCoverage stores the coverage outcome of relevant groups (unchanged outcomes are not rewritten).
func RecordCoverage(ctx context.Context, tx pgx.Tx, ruleset, runID string, vs []CandidateValues) error {
	var refs, outcomes, settled []string
	var owners, exceptions, pins []*string
	var expiries []*time.Time
	for _, v := range vs {
		if v.Verdict != gcos.VerdictRelevant {
			settled = append(settled, v.GroupKey)
			continue
		}
		refs = append(refs, v.GroupKey)
		outcomes = append(outcomes, string(v.Coverage))
		owners = append(owners, v.CoverageOwner)
		exceptions = append(exceptions, v.ExceptionID)
		expiries = append(expiries, v.ExceptionExpiresAt)
		pins = append(pins, v.ExceptionFingerprint)
	}
	// A row that is no longer relevant needs no owner: an outcome recorded while it was is gone with it.
	if len(settled) > 0 {
		if _, err := tx.Exec(ctx, `DELETE FROM governance_candidate_coverage WHERE ruleset_version = $1 AND candidate_ref = ANY($2)`,
			ruleset, settled); err != nil {
			return fmt.Errorf("clear coverage: %w", err)
		}
	}
	if len(refs) == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, `
		INSERT INTO governance_candidate_coverage AS c (candidate_ref, ruleset_version, outcome, owner_ref, exception_id,
		    exception_expires_at, exception_fingerprint, coverage_scan_ref)
		SELECT u.ref, $1, u.outcome, u.owner, u.exc, u.expires, u.pin, $2
		FROM unnest($3::text[], $4::text[], $5::text[], $6::text[], $7::timestamptz[], $8::text[]) AS u(ref, outcome, owner, exc, expires, pin)
		ON CONFLICT (candidate_ref, ruleset_version) DO UPDATE SET outcome = EXCLUDED.outcome, owner_ref = EXCLUDED.owner_ref,
		    exception_id = EXCLUDED.exception_id, exception_expires_at = EXCLUDED.exception_expires_at,
		    exception_fingerprint = EXCLUDED.exception_fingerprint, coverage_scan_ref = EXCLUDED.coverage_scan_ref, computed_at = now()
		WHERE (c.outcome, c.owner_ref, c.exception_id, c.exception_expires_at, c.exception_fingerprint)
		      IS DISTINCT FROM (EXCLUDED.outcome, EXCLUDED.owner_ref, EXCLUDED.exception_id, EXCLUDED.exception_expires_at, EXCLUDED.exception_fingerprint)`,
		ruleset, runID, refs, outcomes, owners, exceptions, expiries, pins)
	if err != nil {
		return fmt.Errorf("record coverage: %w", err)
	}
	return nil
}

// MarkDirty is the one dirty-mark API every trigger uses (SPEC §8). It is an idempotent upsert on the group's
// row under the current ruleset: a group already dirty keeps its first mark (many changes inside the window
// collapse into one); a group a scan is re-evaluating is marked once the scan commits (markDirtySQL), so the scan
// cannot clear it. It returns how many groups became dirty.
func (s *Store) MarkDirty(ctx context.Context, groupKeys []string, reason string) (int64, error) {
	var n int64
	err := s.InTx(ctx, func(tx pgx.Tx) error {
		var err error
		n, err = MarkKeysDirtyTx(ctx, tx, groupKeys, reason)
		return err
	})
	return n, err
}

// markDirtySQL marks groups ($1) dirty, each with its reason ($2, the same length): an idempotent upsert on the
// group's row under the current ruleset ($3). A group already dirty keeps its first mark (many changes inside the
// window collapse into one), except when its mark is for membership alone ($4, gcos.MembershipDirtyReasons) and the
// new one is not: the gate trusts a verdict dirty for membership alone, so such a mark must never hide another. A
// group named with several reasons takes a reason other than membership first, then the first in sort order.
//
// A dirty row may be held by a scan that read the source before the change: judging the mark on the row as it was
// would drop it while the scan clears the dirty flag over a result that predates the change. So:
//   - a row that is clean, or whose mark is for another reason than membership, is locked in group-key order
//     (level 3 of LockOrder) and judged on what a scan holding it committed (clean: marked again). A scan never
//     waits on a candidate row, so the wait always ends;
//   - a membership mark that finds its row dirty is not written onto it (it waits for no one and holds no row a
//     scan would skip): the statement returns the rows it locked, and MarkDirtyTx keeps the other membership marks
//     as a pending mark (pendingMarkSQL), committed with the marking transaction, that the next scan tick settles
//     (ApplyPendingMarks). Under a births load nearly every handoff finds its groups dirty, and this is what keeps
//     the handoff from waiting behind every scan and the scans from skipping the handoff's rows.
//
// dirtied_at is the clock at the mark, after the change it signals was read: a full audit credits a change to a
// mark no older than its cut (scan.FullAudit).
const markDirtySQL = `
WITH marks AS (
    SELECT DISTINCT ON (k) k, r FROM unnest($1::text[], $2::text[]) AS m(k, r) ORDER BY k, r = ANY($4), r
), locked AS (
    SELECT c.group_key, c.ruleset_version, m.r, c.dirty, c.dirty_reason
    FROM governance_candidate_state c JOIN marks m ON m.k = c.group_key
    WHERE c.group_key = ANY($1) AND c.ruleset_version = $3 AND (NOT c.dirty OR NOT m.r = ANY($4))
    ORDER BY c.group_key FOR UPDATE OF c
), due AS (
    SELECT group_key, ruleset_version, r, (dirty AND dirty_reason = ANY($4) AND NOT r = ANY($4)) AS upgrade
    FROM locked WHERE NOT dirty OR (dirty_reason = ANY($4) AND NOT r = ANY($4))
), marked AS (
    UPDATE governance_candidate_state c
    SET dirty = true, dirty_reason = CASE WHEN c.dirty AND NOT l.upgrade THEN c.dirty_reason ELSE l.r END,
        dirtied_at = clock_timestamp(),
        recompute_status = CASE WHEN c.recompute_status = 'ok' THEN 'dirty' ELSE c.recompute_status END, updated_at = now()
    FROM due l
    WHERE c.group_key = l.group_key AND c.ruleset_version = l.ruleset_version
    RETURNING c.group_key
)
SELECT coalesce((SELECT array_agg(group_key) FROM marked), '{}'), coalesce((SELECT array_agg(group_key) FROM locked), '{}')`

// pendingMarkSQL keeps the membership marks ($2 keys, $3 reasons, $4 the births behind each) whose rows
// markDirtySQL did not take (dirty, or made dirty by a transaction it waited for) as one pending mark under ruleset
// $1, stamped with the clock now, after the changes were read.
const pendingMarkSQL = `
INSERT INTO governance_pending_mark (ruleset_version, group_keys, reasons, marked_at, births)
VALUES ($1, $2, $3, array_fill(clock_timestamp(), ARRAY[cardinality($2::text[])]), $4)`

// pendingMarks are the membership marks among keys (reasons, the same length) that markDirtySQL did not lock, once
// per key, in key order; a key named with another reason too takes that one (and was locked).
func pendingMarks(keys, reasons, locked []string) (pending, pendingReasons []string) {
	taken := make(map[string]bool, len(locked))
	for _, k := range locked {
		taken[k] = true
	}
	reasonOf := map[string]string{}
	for i, k := range keys {
		was, seen := reasonOf[k]
		switch {
		case !seen:
			reasonOf[k] = reasons[i]
		case gcos.MembershipOnly(&was) && (!gcos.MembershipOnly(&reasons[i]) || reasons[i] < was):
			reasonOf[k] = reasons[i]
		}
	}
	for _, k := range slices.Sorted(maps.Keys(reasonOf)) {
		if r := reasonOf[k]; !taken[k] && gcos.MembershipOnly(&r) {
			pending, pendingReasons = append(pending, k), append(pendingReasons, r)
		}
	}
	return pending, pendingReasons
}

// pendingBirths are the births behind each pending key (in pending's order), as bigint[] literals: NULL for a key
// some other change marked too (a retirement: no birth settles it) or with more than MarkBirthsMax births.
func pendingBirths(pending, keys, reasons []string, births map[string][]int64) []*string {
	born := "handoff:" + string(gcos.ChangeObjectBorn)
	other := map[string]bool{}
	for i, k := range keys {
		if reasons[i] != born {
			other[k] = true
		}
	}
	// The groups of one base in every scope share one list of births (the same slice): it is written out once.
	type list struct {
		first *int64
		n     int
	}
	texts := map[list]*string{}
	out := make([]*string, len(pending))
	for i, k := range pending {
		if ids := births[k]; len(ids) > 0 && len(ids) <= MarkBirthsMax && !other[k] {
			l := list{&ids[0], len(ids)}
			if texts[l] == nil {
				texts[l] = birthsText(ids)
			}
			out[i] = texts[l]
		}
	}
	return out
}

// LockCandidates locks every candidate row under ruleset in group-key order (level 3 of LockOrder). A transaction
// that writes the whole estate (the backfill, the full audit's reconciliation) takes it after the group rows: no
// scan runs beside it, so its object rows and counts are derived from candidate rows nobody moves.
func LockCandidates(ctx context.Context, tx pgx.Tx, ruleset string) error {
	if _, err := tx.Exec(ctx, `SELECT 1 FROM governance_candidate_state WHERE ruleset_version = $1 ORDER BY group_key FOR UPDATE`, ruleset); err != nil {
		return fmt.Errorf("lock the candidate rows: %w", err)
	}
	return nil
}

// MarkKeysDirtyTx marks the groups with these keys dirty, all for one reason, inside tx.
func MarkKeysDirtyTx(ctx context.Context, tx pgx.Tx, groupKeys []string, reason string) (int64, error) {
	return MarkDirtyTx(ctx, tx, map[string][]string{reason: groupKeys})
}

// MarkDirtyTx marks groups dirty with a reason each (SPEC §8) in one statement (markDirtySQL). It returns how
// many groups became dirty.
func MarkDirtyTx(ctx context.Context, tx pgx.Tx, byReason map[string][]string) (int64, error) {
	marked, err := MarkChangesTx(ctx, tx, byReason, nil)
	return int64(len(marked)), err
}

// MarkBirthsMax is how many births a pending mark carries for one group: beyond it, the mark is settled by time.
const MarkBirthsMax = CountedBirthsMax

// MarkChangesTx is MarkDirtyTx for a handoff: births names, per group key, the births (ids) whose handoff marks it.
// A membership mark kept pending carries them, so a scan whose count read those births before their handoff
// settles it (ApplyPendingMarks); a mark without them waits for a count begun after it. It returns the keys of the
// groups it marked.
func MarkChangesTx(ctx context.Context, tx pgx.Tx, byReason map[string][]string, births map[string][]int64) ([]string, error) {
	var keys, reasons []string
	for reason, ks := range byReason {
		if !gcos.ValidDirtyReason(reason) {
			return nil, gcos.Errorf(gcos.EINVALID, "dirty reason %s is not one of handoff:<kind>, axis, ruleset_bump, authority, snapshot_drift, ttl, input", gcos.Quote(reason))
		}
		for _, k := range ks {
			keys, reasons = append(keys, k), append(reasons, reason)
		}
	}
	if len(keys) == 0 {
		return nil, nil
	}
	// The current ruleset as a value, so the rows are found through the (group_key, ruleset_version) key.
	var ruleset string
	if err := tx.QueryRow(ctx, `SELECT ruleset_version FROM v_current_ruleset`).Scan(&ruleset); errors.Is(err, pgx.ErrNoRows) {
		return nil, nil // no ruleset: no candidate row to mark
	} else if err != nil {
		return nil, fmt.Errorf("mark dirty: current ruleset: %w", err)
	}
	var marked, locked []string
	if err := tx.QueryRow(ctx, markDirtySQL, keys, reasons, ruleset, gcos.MembershipDirtyReasons).Scan(&marked, &locked); err != nil {
		return nil, fmt.Errorf("mark %d groups dirty: %w", len(keys), err)
	}
	pending, pendingReasons := pendingMarks(keys, reasons, locked)
	if len(pending) > 0 {
		if _, err := tx.Exec(ctx, pendingMarkSQL, ruleset, pending, pendingReasons, pendingBirths(pending, keys, reasons, births)); err != nil {
			return nil, fmt.Errorf("keep %d membership marks pending: %w", len(pending), err)
		}
	}
	if len(marked) > 0 || len(pending) > 0 {
		// Delivered at commit: wakes event-driven scanners (a pending mark is settled by their next tick); polling
		// stays the source of truth.
		if _, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, NotifyChannel, "dirty"); err != nil {
			return nil, fmt.Errorf("notify scanners: %w", err)
		}
	}
	return marked, nil
}

// rebaseCandidates moves verdicts from the previous active ruleset to the newly activated one: groups the diff
// selects get a dirty row (ruleset_bump), every other group's row is carried over unchanged (the old row is left
// as it was, as history). Groups that already have a row under the new version keep it.
func (s *Store) rebaseCandidates(ctx context.Context, tx pgx.Tx, from, to string, impact []gcos.GroupSelector, res *ActivationResult) error {
	groups, err := s.groupDimensions(ctx, tx)
	if err != nil {
		return err
	}
	dirty := selectedKeys(impact, groups)
	tag, err := tx.Exec(ctx, `
		INSERT INTO governance_candidate_state (group_key, source_snapshot_ref, ruleset_version, scan_time, candidate_verdict,
		    input_quality_state, input_quality_ref, dirty, dirty_reason, dirtied_at, depends_on, stale_after, recompute_status,
		    risk_class, coverage_required, coverage_scan_ref, issue_ref, last_run_id, evidence_fingerprint, lifecycle_status,
		    audit_ref, owner_scope, member_count, counted_at, counted_births, counted_snapshot)
		SELECT c.group_key, c.source_snapshot_ref, $2, c.scan_time, c.candidate_verdict,
		    c.input_quality_state, c.input_quality_ref,
		    c.dirty OR c.group_key = ANY($3), 
		    CASE WHEN c.dirty THEN c.dirty_reason WHEN c.group_key = ANY($3) THEN 'ruleset_bump' ELSE c.dirty_reason END,
		    CASE WHEN c.dirty THEN c.dirtied_at WHEN c.group_key = ANY($3) THEN now() ELSE c.dirtied_at END,
		    c.depends_on, c.stale_after,
		    CASE WHEN c.group_key = ANY($3) AND c.recompute_status = 'ok' THEN 'dirty' ELSE c.recompute_status END,
		    c.risk_class, c.coverage_required, c.coverage_scan_ref, c.issue_ref, c.last_run_id, c.evidence_fingerprint,
		    c.lifecycle_status, 'carried:' || $1, c.owner_scope, c.member_count, c.counted_at, c.counted_births, c.counted_snapshot
		FROM governance_candidate_state c
		WHERE c.ruleset_version = $1
		ON CONFLICT (group_key, ruleset_version) DO NOTHING`, from, to, dirty)
	if err != nil {
		return fmt.Errorf("rebase candidates %s → %s: %w", from, to, err)
	}
	// Pending marks follow their rows: a carried row keeps when it was counted, so a mark it is owed is owed under
	// the new ruleset too (ApplyPendingMarks drops the marks of a ruleset no longer current).
	if _, err := tx.Exec(ctx, `UPDATE governance_pending_mark SET ruleset_version = $2 WHERE ruleset_version = $1`, from, to); err != nil {
		return fmt.Errorf("rebase pending marks %s → %s: %w", from, to, err)
	}
	if _, err := tx.Exec(ctx, `
		INSERT INTO governance_candidate_coverage (candidate_ref, ruleset_version, outcome, owner_ref, exception_id,
		    exception_expires_at, exception_fingerprint, coverage_scan_ref, computed_at)
		SELECT candidate_ref, $2, outcome, owner_ref, exception_id, exception_expires_at, exception_fingerprint,
		    coverage_scan_ref, computed_at
		FROM governance_candidate_coverage WHERE ruleset_version = $1
		ON CONFLICT DO NOTHING`, from, to); err != nil {
		return fmt.Errorf("rebase coverage %s → %s: %w", from, to, err)
	}
	// Materialized objects follow their group: carried unchanged, or dirty when the group is in the impact set.
	if _, err := tx.Exec(ctx, `
		INSERT INTO governance_candidate_object (candidate_key, object_type, object_ref, materialization_reason, group_key,
		    source_snapshot_ref, ruleset_version, scan_time, candidate_verdict, input_quality_state, input_quality_ref, dirty,
		    dirty_reason, dirtied_at, depends_on, stale_after, recompute_status, risk_class, coverage_required,
		    coverage_scan_ref, issue_ref, last_run_id, evidence_fingerprint, lifecycle_status, audit_ref, owner_scope)
		SELECT o.candidate_key, o.object_type, o.object_ref, o.materialization_reason, o.group_key, o.source_snapshot_ref, $2,
		    o.scan_time, o.candidate_verdict, o.input_quality_state, o.input_quality_ref, o.dirty OR o.group_key = ANY($3),
		    CASE WHEN o.dirty THEN o.dirty_reason WHEN o.group_key = ANY($3) THEN 'ruleset_bump' ELSE o.dirty_reason END,
		    CASE WHEN o.dirty THEN o.dirtied_at WHEN o.group_key = ANY($3) THEN now() ELSE o.dirtied_at END,
		    o.depends_on, o.stale_after,
		    CASE WHEN o.group_key = ANY($3) AND o.recompute_status = 'ok' THEN 'dirty' ELSE o.recompute_status END,
		    o.risk_class, o.coverage_required, o.coverage_scan_ref, o.issue_ref, o.last_run_id, o.evidence_fingerprint,
		    o.lifecycle_status, 'carried:' || $1, o.owner_scope
		FROM governance_candidate_object o WHERE o.ruleset_version = $1
		ON CONFLICT (candidate_key, ruleset_version) DO NOTHING`, from, to, dirty); err != nil {
		return fmt.Errorf("rebase objects %s → %s: %w", from, to, err)
	}
	res.DirtiedGroups = len(dirty)
	res.CarriedGroups = int(tag.RowsAffected()) - len(dirty)
	return nil
}

// scanWriteSQL writes a scan's verdicts onto claimed candidate rows, clearing their dirty marks.
const scanWriteSQL = `
UPDATE governance_candidate_state c SET
    source_snapshot_ref = $2, scan_time = now(), candidate_verdict = u.verdict, input_quality_state = u.quality,
    depends_on = u.deps, stale_after = now() + u.ttl, recompute_status = 'ok', dirty = false, dirty_reason = NULL,
    risk_class = u.risk, coverage_required = u.required,
    coverage_scan_ref = CASE WHEN u.verdict = 'relevant' THEN $3 END, last_run_id = $3,
    evidence_fingerprint = u.evidence, owner_scope = u.owner, member_count = u.members, lifecycle_status = u.lifecycle,
    counted_at = u.counted, counted_births = u.births::bigint[], counted_snapshot = u.snap::pg_snapshot,
    -- early cutoff: a result equal to the stored one moves only the qualification
    updated_at = CASE WHEN (c.evidence_fingerprint, c.lifecycle_status) IS DISTINCT FROM (u.evidence, u.lifecycle)
                      THEN now() ELSE c.updated_at END
FROM unnest($4::text[], $5::text[], $6::text[], $7::jsonb[], $8::interval[], $9::text[], $10::boolean[], $11::text[], $12::text[], $13::bigint[], $14::text[], $15::timestamptz[], $16::text[], $17::text[])
     AS u(key, verdict, quality, deps, ttl, risk, required, evidence, owner, members, lifecycle, counted, births, snap)
WHERE c.group_key = u.key AND c.ruleset_version = $1`

// WriteVerdicts writes a scan's evaluated groups onto their candidate rows (verdict, evidence, qualification,
// cleared dirty mark), records the coverage of the relevant ones and clears their failed attempts. The caller holds
// the rows' claim in tx.
func WriteVerdicts(ctx context.Context, tx pgx.Tx, ruleset string, snapshotID int64, runID string, vs []CandidateValues) error {
	if len(vs) == 0 {
		return nil
	}
	a := toArrays(vs)
	if err := RecordVerdictChangesTx(ctx, tx, ruleset, runID, false, groupKeys(vs), vs); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, scanWriteSQL, ruleset, snapshotID, runID, a.keys, a.verdicts, a.qualities, a.deps, a.ttls,
		a.risks, a.required, a.evidence, a.owners, a.counts, a.lifecycles, a.counted, a.births, a.snapshots); err != nil {
		return fmt.Errorf("write verdicts: %w", err)
	}
	if err := RecordCoverage(ctx, tx, ruleset, runID, vs); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `DELETE FROM candidate_scan_attempt WHERE ruleset_version = $1 AND group_key = ANY($2)`, ruleset, a.keys); err != nil {
		return fmt.Errorf("clear scan attempts: %w", err)
	}
	return nil
}

// RecordPlaceholderGroups records groups the registry does not hold yet as retired with no member, in a
// transaction of their own (a scan tick never inserts a group key, LockOrder): the tick that next moves members
// there finds the row, seeds the group and re-activates it with its count, in the transaction that retires the
// group the members came from, so the ledger never counts them twice.
func RecordPlaceholderGroups(ctx context.Context, tx pgx.Tx, groups []gcos.Group) error {
	if len(groups) == 0 {
		return nil
	}
	placeholders := make([]gcos.Group, len(groups))
	for i, g := range groups {
		g.MemberCount = 0
		placeholders[i] = g
	}
	slices.SortFunc(placeholders, func(a, b gcos.Group) int { return strings.Compare(a.Key, b.Key) })
	n := len(placeholders)
	keys, classes, regs, axes, scopes, lifecycles, owners, deps := make([]string, n), make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n), make([]string, n)
	for i, g := range placeholders {
		keys[i], classes[i], regs[i], axes[i], scopes[i], lifecycles[i], owners[i] = g.Key, g.ObjectClass, g.SourceRegistry, g.AxisFamily, g.Scope, g.LifecycleStatus, g.OwnerScope
		d, err := json.Marshal(gcos.NewDependsOn(g.Dimensions))
		if err != nil {
			return err
		}
		deps[i] = string(d)
	}
	if _, err := tx.Exec(ctx, `
		INSERT INTO governance_group (group_key, object_class, source_registry, axis_family, scope, lifecycle_status, owner_scope, member_count, depends_on, retired_at, first_seen_at)
		SELECT u.k, u.c, u.r, u.a, u.s, u.l, u.o, 0, u.d, now(), clock_timestamp()
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::jsonb[]) AS u(k, c, r, a, s, l, o, d)
		ON CONFLICT (group_key) DO NOTHING`, keys, classes, regs, axes, scopes, lifecycles, owners, deps); err != nil {
		return fmt.Errorf("record placeholder groups: %w", err)
	}
	return nil
}

// WithoutLiveSiblings drops the groups (of a snapshot) that the registry does not hold live while another group of
// the same base and scope is live there: their members are counted by that group until a scan moves them (the scan
// finds the stale group and retires it in the transaction that records the new one), so recording them now would
// count the members twice.
func WithoutLiveSiblings(ctx context.Context, tx pgx.Tx, groups []gcos.Group) ([]gcos.Group, error) {
	if len(groups) == 0 {
		return groups, nil
	}
	keys := make([]string, len(groups))
	classes, regs, statuses := make([]*string, len(groups)), make([]*string, len(groups)), make([]*string, len(groups))
	scopes := make([]*string, len(groups))
	for i, g := range groups {
		keys[i], classes[i], regs[i], statuses[i], scopes[i] = g.Key, g.ObjectClass, g.SourceRegistry, g.LifecycleStatus, g.Scope
	}
	rows, err := tx.Query(ctx, `
		SELECT u.k FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[]) AS u(k, cls, reg, st, scope)
		WHERE NOT EXISTS (SELECT 1 FROM governance_group g WHERE g.group_key = u.k AND g.retired_at IS NULL)
		  AND EXISTS (SELECT 1 FROM governance_group s
		              WHERE s.object_class = u.cls AND s.source_registry = u.reg AND s.lifecycle_status = u.st
		                AND s.scope IS NOT DISTINCT FROM u.scope AND s.retired_at IS NULL AND s.group_key <> u.k)`,
		keys, classes, regs, statuses, scopes)
	if err != nil {
		return nil, fmt.Errorf("find groups with a live sibling: %w", err)
	}
	drop, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("find groups with a live sibling: %w", err)
	}
	if len(drop) == 0 {
		return groups, nil
	}
	skip := make(map[string]bool, len(drop))
	for _, k := range drop {
		skip[k] = true
	}
	return slices.DeleteFunc(slices.Clone(groups), func(g gcos.Group) bool { return skip[g.Key] }), nil
}

// RegistryRetired says, for each of keys the group registry holds, whether the group is retired.
func RegistryRetired(ctx context.Context, q Querier, keys []string) (map[string]bool, error) {
	rows, err := q.Query(ctx, `SELECT group_key, retired_at IS NOT NULL FROM governance_group WHERE group_key = ANY($1)`, keys)
	if err != nil {
		return nil, fmt.Errorf("read the group registry: %w", err)
	}
	out := map[string]bool{}
	var k string
	var retired bool
	if _, err := pgx.ForEachRow(rows, []any{&k, &retired}, func() error { out[k] = retired; return nil }); err != nil {
		return nil, fmt.Errorf("read the group registry: %w", err)
	}
	return out, nil
}
