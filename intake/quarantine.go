package intake

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"gcos"
	"gcos/evaluate"
	"gcos/postgres"
)

// Births from untrusted source systems: each is held in a needs_input object row behind an open finding, and a group
// only untrusted births name is recorded with a needs_input row of its own.

// quarantined is one birth from an untrusted source.
type quarantined struct {
	row    *postgres.TailRow
	base   postgres.BirthBase
	key    string   // the finding's coalesce key
	groups []string // its base's group keys, one per scope, once it is quarantined now (counted at once)
}

// quarantineUntrusted materializes an object row (needs_input, untrusted_source, held by an open finding) and raises
// an input.untrusted_source finding for every birth from an untrusted source system: the gate consults that row
// before the group's, so the object is blocked until its source is trusted. The birth dirties no group. A group
// the registry has never seen and that only untrusted births name is recorded (the object row refers to it) with a
// needs_input row of its own, so no scan can seed it into a verdict off an untrusted signal; a trusted birth or
// the full audit re-evaluates it like any group. The finding is raised once per birth: a replayed row finds it
// and leaves it alone. Before the first backfill there is no candidate store to write into: the finding alone
// records the birth.
func (s *Stage) quarantineUntrusted(ctx context.Context, tx pgx.Tx, regs gcos.Registries, rows []*postgres.TailRow,
	anchors map[[2]string]postgres.BirthBase, trusted map[postgres.BirthBase]int64) error {
	if len(rows) == 0 {
		return nil
	}
	// The cursor row before any finding: the one lock order (cursor, then finding keys) a poll also follows.
	if err := countRows(ctx, tx, rows[0].Source, "untrusted_rows", len(rows)); err != nil {
		return err
	}
	var qs []quarantined
	var keys []string
	for _, r := range rows {
		b := postgres.BirthBase{Class: r.EntityType, Coll: r.CollectionName, Status: r.Status}
		if a, ok := anchors[[2]string{r.CollectionName, r.ParentCode}]; ok && r.ParentCode != "" {
			b = a
		}
		k := gcos.CoalesceKey(gcos.InputIssue(gcos.InputUntrustedSource), r.ObjectRef())
		qs = append(qs, quarantined{row: r, base: b, key: k})
		keys = append(keys, k)
	}
	rows2, err := tx.Query(ctx, `SELECT DISTINCT coalesce_key FROM system_issues WHERE coalesce_key = ANY($1)`, keys)
	if err != nil {
		return fmt.Errorf("quarantine: %w", err)
	}
	known, err := pgx.CollectRows(rows2, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("quarantine: %w", err)
	}
	seen := map[string]bool{}
	for _, k := range known {
		seen[k] = true
	}
	rs, err := s.core.CurrentRuleset(ctx)
	noStore := gcos.ErrorCode(err) == gcos.ENOTFOUND
	if err != nil && !noStore {
		return err
	}
	var snapshotID int64
	if !noStore {
		snapshotID, err = postgres.LatestFullSnapshotID(ctx, tx)
		if noStore = gcos.ErrorCode(err) == gcos.ENOTFOUND; err != nil && !noStore {
			return err
		}
	}
	var objs []evaluate.ObjectCandidate
	var findings []gcos.Finding
	newBases := map[postgres.BirthBase]int64{}
	var baseOrder []postgres.BirthBase
	for i, q := range qs {
		if seen[q.key] {
			continue // already quarantined (a replay of the same birth)
		}
		seen[q.key] = true
		r := q.row
		ref := r.ObjectRef()
		evidence := map[string]any{"object_ref": ref, "source_system": r.SourceSystem, "source": r.Source, "id": r.ID,
			"trusted_sources": s.cfg.Intake.TrustedSources}
		if noStore {
			evidence["candidate_store"] = "none yet (no backfill): the finding alone records the birth"
		}
		f := gcos.Finding{Type: gcos.InputIssue(gcos.InputUntrustedSource), Subject: ref, RulesetVersion: rs.Version, Evidence: evidence}
		if noStore {
			if _, err := postgres.RaiseFindingTx(ctx, tx, f); err != nil {
				return err
			}
			continue
		}
		f.Object = r.CanonicalRef() // raised once its row exists, which then refers to it (input_quality_ref)
		findings = append(findings, f)
		if _, ok := trusted[q.base]; !ok {
			if _, ok := newBases[q.base]; !ok {
				baseOrder = append(baseOrder, q.base)
			}
			newBases[q.base]++
		}
		class := q.base.Class
		dims := regs.Dimensions(gcos.BaseGroup{ObjectClass: class, SourceRegistry: q.base.Coll, LifecycleStatus: q.base.Status})
		for _, d := range dims {
			qs[i].groups = append(qs[i].groups, gcos.GroupKey(d))
		}
		g := gcos.NewGroup(dims[0], 1)
		held := gcos.HoldForInput("untrusted_source")
		objs = append(objs, evaluate.ObjectCandidate{Key: r.CanonicalRef(), ObjectType: class, ObjectRef: ref, Reason: gcos.ObjectRowOpenFinding, GroupKey: g.Key,
			Values: postgres.CandidateValues{GroupKey: "object:" + r.CanonicalRef(), Verdict: held.Verdict, Rule: held.Rule,
				InputQuality: string(gcos.InputUntrustedSource), RiskClass: regs.RiskClass(class), CoverageRequired: regs.CoverageRequired(class),
				DependsOn: []byte(`{}`), TTL: s.cfg.TTL.TTLFor(regs.RiskClass(class)), Evidence: "untrusted:" + r.SourceSystem, MemberCount: 1}})
	}
	if len(objs) == 0 {
		return nil
	}
	fresh, err := s.holdUntrustedGroups(ctx, tx, regs, snapshotID, rs.Version, baseOrder, newBases)
	if err != nil {
		return err
	}
	if err := countQuarantined(ctx, tx, rs.Version, qs, fresh); err != nil {
		return err
	}
	if _, err = evaluate.UpsertObjectRows(ctx, tx, snapshotID, rs.Version, "intake", objs); err != nil {
		return err
	}
	for _, f := range findings {
		if _, err := postgres.RaiseFindingTx(ctx, tx, f); err != nil {
			return err
		}
	}
	return nil
}

// lockGroupsSQL locks group rows ($1) in group-key order, without a key-changing lock (postgres.LockOrder).
const lockGroupsSQL = `SELECT 1 FROM governance_group WHERE group_key = ANY($1) ORDER BY group_key FOR NO KEY UPDATE`

// countQuarantinedSQL adds quarantined births to the member counts of their groups' rows under the current
// ruleset ($1), one birth per occurrence of a group key in $2: the kept counts already hold them, so the count a
// scan writes next is the same. The caller has locked the group rows (lockGroupsSQL); the candidate rows are locked
// next, in group-key order (postgres.LockOrder).
const countQuarantinedSQL = `
WITH adds AS (
    SELECT k, count(*) AS n FROM unnest($2::text[]) AS a(k) GROUP BY k
), locked AS (
    SELECT c.group_key, a.n FROM governance_candidate_state c JOIN adds a ON a.k = c.group_key
    WHERE c.ruleset_version = $1 ORDER BY c.group_key FOR UPDATE OF c
), counted AS (
    UPDATE governance_candidate_state c SET member_count = c.member_count + l.n
    FROM locked l WHERE c.group_key = l.group_key AND c.ruleset_version = $1
    RETURNING c.group_key, l.n
)
UPDATE governance_group g SET member_count = g.member_count + c.n FROM counted c WHERE g.group_key = c.group_key`

// countQuarantined counts newly quarantined births in their base's groups (fresh: the groups recorded for untrusted
// births alone, holdUntrustedGroups, were recorded with their count): a quarantined birth is counted
// at once where it belongs — its object row, needs_input (untrusted_source), takes it out of its group's bucket in
// the ledger — instead of showing as unplaced until its group's next scan. Nothing is dirtied: an untrusted source
// cannot make work. Only births quarantined now carry their groups: a replayed birth (its finding seen before)
// is not counted again.
func countQuarantined(ctx context.Context, tx pgx.Tx, ruleset string, qs []quarantined, fresh map[string]bool) error {
	var keys []string
	for _, q := range qs {
		for _, k := range q.groups {
			if !fresh[k] {
				keys = append(keys, k)
			}
		}
	}
	if len(keys) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, lockGroupsSQL, keys); err != nil {
		return fmt.Errorf("count quarantined births in their groups: lock the groups: %w", err)
	}
	if _, err := tx.Exec(ctx, countQuarantinedSQL, ruleset, keys); err != nil {
		return fmt.Errorf("count quarantined births in their groups: %w", err)
	}
	return nil
}

// holdUntrustedGroups records the groups of bases only untrusted births name that the registry does not know yet,
// each with a needs_input (untrusted_source) row under the current ruleset, and returns their keys. Known groups are
// left as they are.
func (s *Stage) holdUntrustedGroups(ctx context.Context, tx pgx.Tx, regs gcos.Registries, snapshotID int64, ruleset string,
	bases []postgres.BirthBase, counts map[postgres.BirthBase]int64) (fresh map[string]bool, err error) {
	if len(bases) == 0 {
		return nil, nil
	}
	var all []gcos.Group
	var keys []string
	for _, b := range bases {
		for _, d := range regs.Dimensions(gcos.BaseGroup{ObjectClass: b.Class, SourceRegistry: b.Coll, LifecycleStatus: b.Status}) {
			g := gcos.NewGroup(d, counts[b])
			all, keys = append(all, g), append(keys, g.Key)
		}
	}
	rows, err := tx.Query(ctx, `SELECT group_key FROM governance_group WHERE group_key = ANY($1)`, keys)
	if err != nil {
		return nil, fmt.Errorf("quarantine groups: %w", err)
	}
	existing, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("quarantine groups: %w", err)
	}
	var recorded []gcos.Group
	var held []postgres.CandidateValues
	for _, g := range all {
		if slices.Contains(existing, g.Key) {
			continue
		}
		recorded = append(recorded, g)
		class := postgres.Deref(g.ObjectClass)
		deps, err := json.Marshal(gcos.NewDependsOn(g.Dimensions))
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256([]byte("untrusted:" + g.Key + ":" + ruleset))
		hold := gcos.HoldForInput("untrusted_source")
		held = append(held, postgres.CandidateValues{GroupKey: g.Key, Verdict: hold.Verdict, Rule: hold.Rule,
			InputQuality: string(gcos.InputUntrustedSource), RiskClass: regs.RiskClass(class),
			CoverageRequired: regs.CoverageRequired(class), OwnerScope: g.OwnerScope, DependsOn: deps,
			TTL: s.cfg.TTL.TTLFor(regs.RiskClass(class)), Evidence: hex.EncodeToString(sum[:16]), MemberCount: g.MemberCount})
	}
	if len(recorded) == 0 {
		return nil, nil
	}
	if err := s.recordNewGroups(ctx, tx, recorded); err != nil {
		return nil, err
	}
	if _, err = postgres.SeedCandidates(ctx, tx, snapshotID, ruleset, "intake", held); err != nil {
		return nil, err
	}
	fresh = map[string]bool{}
	for _, g := range recorded {
		fresh[g.Key] = true
	}
	return fresh, nil
}
