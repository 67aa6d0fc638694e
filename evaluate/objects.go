package evaluate

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
	"gcos/postgres"
)

// Object rows are materialized only for the four reasons of doc 40 §40.6: an independently authoritative class,
// an open (input) finding on the object, an exception on the object, a high-risk write-path class. They follow
// their group: every scan that writes a group's verdict re-derives, in the same transaction, the object rows of
// that group's base (class, registry, lifecycle) in every scope (FollowObjects) — a new object of such a class gets
// its row, an exception granted, changed or broken re-judges its object, a row whose reason lapsed becomes a
// tombstone, and coverage, ownership and ruleset changes re-judge the rows of the groups they dirty. The backfill
// and the full audit derive every row (the safety net, not the mechanism). The intake also writes a quarantined
// birth's row at once (quarantineUntrusted), which a pass leaves as it is while its finding stays open.

// ObjectCandidate is one object row as a pass derives it, before it is compared with the stored row and written.
type ObjectCandidate struct {
	Key, ObjectType, ObjectRef, Reason, GroupKey string
	GroupEvidence                                string // the evidence of the group evaluation the row was judged from
	Values                                       postgres.CandidateValues
}

// objectCriteria returns the classes whose objects materialize (by reason) and the approved, unexpired exceptions
// naming one object, by object.
func (e *Evaluator) objectCriteria(objectRisk []string) (classes map[string]string, excepted map[[2]string][]gcos.ExceptionRow) {
	classes = map[string]string{}
	for class, p := range e.regs.Profile {
		if reason := gcos.ObjectRowClassReason(p, objectRisk); reason != "" {
			classes[class] = reason
		}
	}
	excepted = map[[2]string][]gcos.ExceptionRow{}
	for _, x := range e.regs.Exceptions {
		if x.EntityCode != nil && x.CollectionName != nil && x.Approved(e.now) {
			k := [2]string{*x.CollectionName, *x.EntityCode}
			excepted[k] = append(excepted[k], x)
		}
	}
	return classes, excepted
}

// ObjectException picks the exception an object's row carries among those naming it: the first (by scope, then
// id) that holds in a scope of the ruleset, else the first in a scope of the ruleset, lifted. The object row is one
// per object and links to one scope's group, so every other exception on the object is lifted too, each with a
// reason a person can act on: none of them suppresses without saying so.
func ObjectException(xs []gcos.ExceptionRow, scopes []string, now time.Time, fingerprint *string) (chosen *gcos.ExceptionRow, holds bool, lifts []gcos.ExceptionLift) {
	xs = slices.Clone(xs)
	slices.SortFunc(xs, func(a, b gcos.ExceptionRow) int {
		if c := strings.Compare(postgres.Deref(a.ScopeCode), postgres.Deref(b.ScopeCode)); c != 0 {
			return c
		}
		return strings.Compare(a.ExceptionID, b.ExceptionID)
	})
	why := make([]*gcos.ExceptionLift, len(xs))
	for i, x := range xs {
		why[i] = x.Holds(now, fingerprint)
		if why[i] == nil && !slices.Contains(scopes, postgres.Deref(x.ScopeCode)) {
			why[i] = &gcos.ExceptionLift{ExceptionID: x.ExceptionID, Reason: gcos.LiftNoScope, Detail: fmt.Sprintf(
				"exception %s names scope %q, which is not a responsibility scope of the ruleset", x.ExceptionID, postgres.Deref(x.ScopeCode))}
		}
		if chosen == nil && why[i] == nil {
			chosen, holds = &xs[i], true
		}
	}
	if chosen == nil {
		for i, x := range xs {
			if slices.Contains(scopes, postgres.Deref(x.ScopeCode)) {
				chosen = &xs[i]
				break
			}
		}
	}
	for i, x := range xs {
		switch {
		case why[i] != nil:
			lifts = append(lifts, *why[i])
		case &xs[i] != chosen:
			lifts = append(lifts, gcos.ExceptionLift{ExceptionID: x.ExceptionID, Reason: gcos.LiftShadowed, Detail: fmt.Sprintf(
				"exception %s (scope %s) is not counted: the object's row carries exception %s (scope %s), one per object",
				x.ExceptionID, postgres.Deref(x.ScopeCode), chosen.ExceptionID, postgres.Deref(chosen.ScopeCode))})
		}
	}
	return chosen, holds, lifts
}

// objectPass says which object rows one derivation covers and what they link to.
type objectPass struct {
	snapshotID int64
	groups     []gcos.Group                  // the groups an object row may link to (one per base and scope)
	bases      map[postgres.BirthBase]bool   // the bases whose rows are re-derived; nil: the whole estate
	baseKeys   []string                      // every group key of those bases, retired ones too (the rows a pass may retire)
	baseOf     map[string]postgres.BirthBase // the base of each of baseKeys
}

// MaterializeObjects derives every object row of the estate against snapshot snap (the backfill and the full audit).
func (ev *Evaluator) MaterializeObjects(ctx context.Context, tx pgx.Tx, snap postgres.Snapshot, runID string) (materialized, retired int64, err error) {
	if err := ev.core.RecordBindingStatements(ctx, tx); err != nil {
		return 0, 0, err
	}
	return ev.deriveObjects(ctx, tx, objectPass{snapshotID: snap.ID, groups: snap.Groups}, runID)
}

// followObjectsSQL reads the groups of the bases a scan judged: the live ones (an object row links to one) and the
// retired ones (a row still linked to one is re-derived or retired too).
const followObjectsSQL = `
SELECT g.group_key, g.object_class, g.source_registry, g.axis_family, g.scope, g.lifecycle_status, g.owner_scope,
       g.member_count, g.retired_at IS NOT NULL
FROM unnest($1::text[], $2::text[], $3::text[]) AS z(cls, coll, st)
JOIN governance_group g ON g.object_class = z.cls AND g.source_registry = z.coll AND g.lifecycle_status = z.st
ORDER BY g.group_key`

// FollowObjects re-derives, in the scan's transaction, the object rows of the bases of the groups it judged (in
// every scope: an object row links to one scope's group, and a change to any scope's group may move it). Passes
// over the same base are serialised by a transaction lock per base, taken in one order.
func (ev *Evaluator) FollowObjects(ctx context.Context, tx pgx.Tx, snapshotID int64, runID string, bases map[postgres.BirthBase]bool) error {
	if len(bases) == 0 {
		return nil
	}
	groups, err := readBaseGroups(ctx, tx, bases)
	if err != nil {
		return err
	}
	if bases, err = ev.basesWithObjectWork(ctx, tx, bases, groups); err != nil || len(bases) == 0 {
		return err
	}
	locks := make([]string, 0, len(bases))
	for b := range bases {
		locks = append(locks, lockKey(b))
	}
	slices.Sort(locks)
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended(k, 0))
		FROM (SELECT k FROM unnest($1::text[]) AS k ORDER BY k) ordered`, locks); err != nil {
		return fmt.Errorf("lock the object rows of %d bases: %w", len(locks), err)
	}
	// The groups again, now that no other pass over these bases is under way: one that committed while this one
	// waited may have retired or re-activated a group, and a row is never linked to a group as it was before.
	if groups, err = readBaseGroups(ctx, tx, bases); err != nil {
		return err
	}
	pass := objectPass{snapshotID: snapshotID, bases: bases, baseOf: map[string]postgres.BirthBase{}}
	for _, bg := range groups {
		if b := postgres.BaseOf(bg.Group); bases[b] {
			pass.baseKeys = append(pass.baseKeys, bg.Key)
			pass.baseOf[bg.Key] = b
			if !bg.retired {
				pass.groups = append(pass.groups, bg.Group)
			}
		}
	}
	_, _, err = ev.deriveObjects(ctx, tx, pass, runID)
	return err
}

// baseGroup is a group of a base a scan judged, live or retired.
type baseGroup struct {
	gcos.Group
	retired bool
}

// readBaseGroups reads every group of the bases (followObjectsSQL).
func readBaseGroups(ctx context.Context, tx pgx.Tx, bases map[postgres.BirthBase]bool) ([]baseGroup, error) {
	var cs, colls, sts []string
	for b := range bases {
		cs, colls, sts = append(cs, b.Class), append(colls, b.Coll), append(sts, b.Status)
	}
	rows, err := tx.Query(ctx, followObjectsSQL, cs, colls, sts)
	if err != nil {
		return nil, fmt.Errorf("read the groups of scanned bases: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (baseGroup, error) {
		var g baseGroup
		return g, r.Scan(&g.Key, &g.ObjectClass, &g.SourceRegistry, &g.AxisFamily, &g.Scope, &g.LifecycleStatus, &g.OwnerScope,
			&g.MemberCount, &g.retired)
	})
	if err != nil {
		return nil, fmt.Errorf("read the groups of scanned bases: %w", err)
	}
	return out, nil
}

// objectWorkSQL finds, among groups ($2) and bases ($3, $4, $5), the groups with an active object row under
// ruleset $1 and the bases with a queued object (the other column NULL).
const objectWorkSQL = `
SELECT DISTINCT o.group_key, NULL, NULL, NULL FROM governance_candidate_object o
WHERE o.group_key = ANY($2) AND o.ruleset_version = $1 AND o.lifecycle_status = 'active'
UNION ALL
SELECT DISTINCT NULL, p.object_class, p.source_registry, p.lifecycle_status
FROM unnest($3::text[], $4::text[], $5::text[]) AS z(cls, coll, st)
JOIN governance_object_pending p ON p.object_class = z.cls AND p.source_registry = z.coll AND p.lifecycle_status = z.st`

// basesWithObjectWork drops the bases a pass has nothing to do for, so a scan of groups no object row concerns
// pays one query: a base is kept when its class gives its objects rows, an approved exception names an object of
// its collection, an object of it is queued, or an object row is linked to one of its groups.
func (ev *Evaluator) basesWithObjectWork(ctx context.Context, tx pgx.Tx, bases map[postgres.BirthBase]bool, groups []baseGroup) (map[postgres.BirthBase]bool, error) {
	classes, excepted := ev.objectCriteria(ev.objectRisk)
	excColls := map[string]bool{}
	for k := range excepted {
		excColls[k[0]] = true
	}
	kept := map[postgres.BirthBase]bool{}
	var cs, colls, sts []string
	for b := range bases {
		if _, ok := classes[b.Class]; ok || excColls[b.Coll] {
			kept[b] = true
			continue
		}
		cs, colls, sts = append(cs, b.Class), append(colls, b.Coll), append(sts, b.Status)
	}
	if len(cs) == 0 {
		return kept, nil
	}
	var keys []string
	baseOfKey := map[string]postgres.BirthBase{}
	for _, g := range groups {
		if b := postgres.BaseOf(g.Group); !kept[b] {
			keys = append(keys, g.Key)
			baseOfKey[g.Key] = b
		}
	}
	rows, err := tx.Query(ctx, objectWorkSQL, ev.ruleset.Version, keys, cs, colls, sts)
	if err != nil {
		return nil, fmt.Errorf("find object work: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var key, cls, coll, st *string
		if err := rows.Scan(&key, &cls, &coll, &st); err != nil {
			return nil, fmt.Errorf("find object work: %w", err)
		}
		if key != nil {
			kept[baseOfKey[*key]] = true
		} else {
			kept[postgres.BirthBase{Class: postgres.Deref(cls), Coll: postgres.Deref(coll), Status: postgres.Deref(st)}] = true
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("find object work: %w", err)
	}
	return kept, nil
}

// lockKey names the base's object rows for a transaction lock.
func lockKey(b postgres.BirthBase) string {
	return "gcos.objects\x1f" + b.Class + "\x1f" + b.Coll + "\x1f" + b.Status
}

// deriveObjects upserts the object rows the criteria select under the Evaluator's ruleset within the pass and
// turns rows of the pass whose reason lapsed into tombstones (lifecycle retired). A tombstone whose reason returns
// is re-activated.
func (ev *Evaluator) deriveObjects(ctx context.Context, tx pgx.Tx, pass objectPass, runID string) (materialized, retired int64, err error) {
	classes, excepted := ev.objectCriteria(ev.objectRisk)
	classList := make([]string, 0, len(classes))
	for c := range classes {
		classList = append(classList, c)
	}
	// An object row links to its base group in the first scope, or in the scope of the exception it carries.
	byBase := map[[3]string]map[string]gcos.Group{}
	for _, g := range pass.groups {
		k := [3]string{postgres.Deref(g.ObjectClass), postgres.Deref(g.SourceRegistry), postgres.Deref(g.LifecycleStatus)}
		if byBase[k] == nil {
			byBase[k] = map[string]gcos.Group{}
		}
		byBase[k][postgres.Deref(g.Scope)] = g
	}
	scopes := ev.regs.ScopeCodes()
	// Objects share their group's verdict inputs: each group is evaluated once (as one member), and an object's
	// evidence is keyed by its candidate key.
	byGroup := map[string]postgres.CandidateValues{}
	judge := func(g gcos.Group) (postgres.CandidateValues, error) {
		gv, ok := byGroup[g.Key]
		if !ok {
			one := g
			one.MemberCount = 1
			var err error
			if gv, err = ev.Evaluate(one, ""); err != nil {
				return gv, err
			}
			byGroup[g.Key] = gv
		}
		return gv, nil
	}
	// The rows the pass may rewrite or retire: every row of the ruleset, or those linked to its bases' groups
	// that may need it — a row judged from another evaluation of its group than the one of now, a row that is
	// not clean, and every row an exception or a finding holds (their reason is judged one by one).
	var stored map[string]storedObject
	if pass.bases == nil {
		if stored, err = readStoredObjects(ctx, tx, storedObjectsSQL, ev.ruleset.Version); err != nil {
			return 0, 0, err
		}
	} else {
		var keys, evidence []string
		for _, inScope := range byBase {
			if g, ok := inScope[scopes[0]]; ok {
				gv, err := judge(g)
				if err != nil {
					return 0, 0, err
				}
				keys, evidence = append(keys, g.Key), append(evidence, gv.Evidence)
			}
		}
		if stored, err = readStoredObjects(ctx, tx, storedChangedObjectsSQL, ev.ruleset.Version, pass.baseKeys, keys, evidence); err != nil {
			return 0, 0, err
		}
	}
	// A scan's pass reads every birth of a base (through the (collection, code) index) only the first time it
	// derives that base under the ruleset; after that, the intake's queue names the objects to look at.
	var zClasses, zColls, zStatuses []string
	var pending [][2]string
	if pass.bases != nil {
		full, err := basesToDerive(ctx, tx, ev.ruleset.Version, pass.bases, classes)
		if err != nil {
			return 0, 0, err
		}
		for _, b := range full {
			zClasses, zColls, zStatuses = append(zClasses, b.Class), append(zColls, b.Coll), append(zStatuses, b.Status)
		}
		if pending, err = takePending(ctx, tx, pass.bases); err != nil {
			return 0, 0, err
		}
	}
	// Objects named one by one: under an exception, queued, not clean, or targeted by an open finding. A scan's
	// pass looks only at those of its bases' collections.
	named := map[[2]string]bool{}
	var namedColls, namedCodes []string
	addNamed := func(coll, code string) {
		if k := [2]string{coll, code}; !named[k] {
			named[k] = true
			namedColls, namedCodes = append(namedColls, coll), append(namedCodes, code)
		}
	}
	passColls := map[string]bool{}
	for b := range pass.bases {
		passColls[b.Coll] = true
	}
	for k := range excepted {
		if pass.bases == nil || passColls[k[0]] {
			addNamed(k[0], k[1])
		}
	}
	for _, k := range pending {
		addNamed(k[0], k[1]) // born or changed since the base was derived
	}
	held := map[string]heldFinding{}
	needFindings := pass.bases == nil || len(named) > 0 || len(zClasses) > 0
	live := map[string]bool{}
	for _, g := range pass.groups {
		live[g.Key] = true
	}
	for _, o := range stored {
		// Not clean (marked, failed or expired), or linked to a group that is retired now: judged from its birth
		// again, which says where its object is.
		if coll, code, ok := strings.Cut(o.objectRef, ":"); ok && o.active && (!o.settled || !live[o.groupKey]) && pass.bases != nil {
			addNamed(coll, code)
			needFindings = true
		}
		needFindings = needFindings || o.reason == gcos.ObjectRowOpenFinding
	}
	// The open input findings on objects: read whenever the pass judges an object from its birth or holds a row
	// for a finding (the issue store is read in full, so a pass with neither skips it).
	if needFindings {
		if held, err = openObjectFindings(ctx, tx); err != nil {
			return 0, 0, err
		}
	}
	// Rows an open finding already holds (an untrusted birth's quarantine) stay as their raiser wrote them.
	// (The pass has read them: every active open_finding row of the estate, or of its bases.)
	// Such a row that is no longer clean (carried dirty into a new ruleset, or expired) is still what its finding
	// says, so it is re-qualified as it is (refresh), or it would stay stale for as long as the finding is open.
	// A held row still follows its object: its birth is read, and a row whose object now sits in another base
	// group (its status changed) is derived again there, held by its finding as before (moved, in consider).
	kept := map[string]bool{}
	keptKey := map[string]string{} // the object reference of a kept row → its candidate key
	var refresh []string
	for key, o := range stored {
		if o.active && o.reason == gcos.ObjectRowOpenFinding {
			_, byKey := held[key]
			_, byRef := held[o.objectRef]
			if byKey || byRef {
				kept[key], kept[o.objectRef] = true, true
				keptKey[o.objectRef] = key
				if !o.settled {
					refresh = append(refresh, key)
				}
				if coll, code, ok := strings.Cut(o.objectRef, ":"); ok && (pass.bases == nil || passColls[coll]) {
					addNamed(coll, code)
				}
			}
		}
	}
	moved := map[string]bool{}
	for subject := range held {
		if coll, code, ok := strings.Cut(subject, ":"); ok && coll != "" && code != "" && !kept[subject] &&
			(pass.bases == nil || passColls[coll]) {
			addNamed(coll, code)
		}
	}
	b := ev.core.BirthBinding()
	// A class criterion never selects an inherited child: the child is represented by its anchor's group (doc 40
	// §40.6 criterion 1, M-DEF-7), so children added under a container of such a class add no row. A child named
	// by an exception or a finding is placed in its anchor's group.
	// An object named one by one also yields its own fingerprint, which an exception on it must pin.
	byClass := `FROM {t} b
		WHERE b.{type} = ANY($1) AND b.{parent} IS NULL`
	if pass.bases != nil {
		byClass = `FROM unnest($4::text[], $5::text[], $6::text[]) AS z(cls, coll, st)
		JOIN {t} b ON b.{coll} = z.coll AND b.{type} = z.cls AND b.{status} = z.st
		WHERE b.{type} = ANY($1) AND b.{parent} IS NULL`
	}
	args := []any{classList, namedColls, namedCodes}
	if pass.bases != nil {
		args = append(args, zClasses, zColls, zStatuses)
	}
	// The births are read through a cursor, objectChunk at a time, and the changed rows written between fetches:
	// the pass holds one chunk of derived rows, not every object row of the estate.
	if _, err := tx.Exec(ctx, `SET LOCAL cursor_tuple_fraction = 1`); err != nil {
		return 0, 0, fmt.Errorf("plan the object cursor: %w", err)
	}
	if _, err := tx.Exec(ctx, b.SQL(`DECLARE gcos_objects NO SCROLL CURSOR FOR
		SELECT b.{coll}, b.{code}, b.{type}, b.{status}, b.{coll}, b.{canon}, false, NULL::bigint, NULL::bigint
		`+byClass+`
		UNION ALL
		SELECT b.{coll}, b.{code}, coalesce(p.{type}, b.{type}), coalesce(p.{status}, b.{status}), coalesce(p.{coll}, b.{coll}), b.{canon},
		       b.{parent} IS NOT NULL, fh.h, hashint8extended(fh.h, 1)
		FROM unnest($2::text[], $3::text[]) AS k(coll, code)
		JOIN {t} b ON b.{coll} = k.coll AND b.{code} = k.code
		CROSS JOIN LATERAL (SELECT `+postgres.RowHashExpr+` AS h) fh
		LEFT JOIN {t} p ON b.{parent} IS NOT NULL AND p.{coll} = b.{coll} AND p.{code} = b.{parent}`),
		args...); err != nil {
		return 0, 0, fmt.Errorf("select objects to materialize: %w", err)
	}
	w := &objectWriter{snapshotID: pass.snapshotID, ruleset: ev.ruleset.Version, runID: runID, stored: stored}
	var lifts []objectLift
	seen := map[string]bool{}
	var requeue [][5]string      // objects of the pass's bases no live group holds: collection, code and base
	born := map[[2]string]bool{} // excepted objects that have a birth
	// Objects a pass over the estate cannot judge: their base (or its group in their scope) is not in the snapshot,
	// born or moved since its cut. A row a scan wrote for one since then is the scans' to keep: retired here as
	// lapsed, it would stay missing until the next audit.
	after := map[string]bool{}
	consider := func(coll, code, class, status, anchorColl string, canonical *string, child bool, h0, h1 *int64) error {
		ref := coll + ":" + code
		key := ref
		if canonical != nil && *canonical != "" {
			key = *canonical
		}
		if _, named := excepted[[2]string{coll, code}]; named {
			if h0 == nil {
				return nil // also selected by its class: judged from its named row, which carries its fingerprint
			}
			born[[2]string{coll, code}] = true
		}
		if seen[key] {
			return nil // selected twice (a class and a name)
		}
		if pass.bases != nil && !pass.bases[postgres.BirthBase{Class: class, Coll: anchorColl, Status: status}] {
			return nil // named, but in a base this pass does not cover: its own base's scan derives it
		}
		inScope, ok := byBase[[3]string{class, anchorColl, status}]
		if kept[key] || kept[ref] {
			row := stored[cmp.Or(keptKey[ref], key)]
			if g, here := inScope[scopes[0]]; !ok || !here || g.Key == row.groupKey {
				return nil // held by its finding as it is, in the group its object still sits in
			}
			moved[key] = true
		}
		if !ok {
			// Born after the snapshot (the next audit materializes it); or, in a scan's pass, in a base whose groups a
			// tick retired on a count that did not include it: queued again, for the pass of the tick that counts it.
			if pass.bases != nil {
				requeue = append(requeue, [5]string{coll, code, class, anchorColl, status})
			} else {
				after[key] = true
			}
			return nil
		}
		finding, hasFinding := held[key]
		if !hasFinding {
			finding, hasFinding = held[ref]
		}
		reason := classes[class]
		if child {
			reason = "" // a class criterion never selects an inherited child; only a name does
		}
		var exc *gcos.ExceptionRow
		var excHolds bool
		var fingerprint *string
		if xs, ok := excepted[[2]string{coll, code}]; ok {
			reason = gcos.ObjectRowException
			if h0 != nil && h1 != nil {
				fingerprint = gcos.Str(gcos.FingerprintFromRowHashes(*h0, *h1).String())
			}
			var objLifts []gcos.ExceptionLift
			exc, excHolds, objLifts = ObjectException(xs, scopes, ev.now, fingerprint)
			for _, l := range objLifts {
				lifts = append(lifts, objectLift{lift: l, object: ref})
			}
		}
		if hasFinding {
			reason = gcos.ObjectRowOpenFinding
		}
		if reason == "" {
			return nil
		}
		scope := scopes[0]
		if exc != nil && reason == gcos.ObjectRowException {
			scope = postgres.Deref(exc.ScopeCode)
		}
		g, ok := inScope[scope]
		if !ok {
			if pass.bases != nil && scope == scopes[0] {
				requeue = append(requeue, [5]string{coll, code, class, anchorColl, status}) // as above
			} else if pass.bases == nil {
				after[key] = true
			}
			return nil // no group in that scope in the snapshot: the next audit materializes it
		}
		seen[key] = true
		gv, err := judge(g)
		if err != nil {
			return err
		}
		v := gv
		evidence := gv.Evidence + "\x00" + key
		switch reason {
		case gcos.ObjectRowOpenFinding:
			// An open input finding on the object: needs_input until the finding closes (SPEC §7).
			hold := gcos.HoldForInput(gcos.ObjectRowOpenFinding)
			v.Verdict, v.Rule, v.InputQuality = hold.Verdict, hold.Rule, finding.state
			v.CoverageRequired, v.Coverage, v.CoverageOwner, v.ExceptionID = ev.regs.CoverageRequired(class), "", nil, nil
			evidence += fmt.Sprintf("\x00finding:%d:%s", finding.id, finding.state)
		case gcos.ObjectRowException:
			// Only an exception that holds suppresses, and only in its own scope (the scope of g); a lifted one
			// leaves the coverage the group resolves in that scope, and says why in a finding.
			evidence += "\x00fingerprint:" + postgres.Deref(fingerprint)
			if v.Verdict == gcos.VerdictRelevant && excHolds {
				v.Coverage, v.ExceptionID = gcos.CoverageApprovedException, &exc.ExceptionID
				v.ExceptionExpiresAt, v.ExceptionFingerprint = exc.ExpiresAt, exc.Fingerprint
				evidence += "\x00exception:" + exc.ExceptionID
			}
		}
		sum := sha256.Sum256([]byte(evidence))
		v.Evidence = hex.EncodeToString(sum[:16])
		v.GroupKey = "object:" + key
		w.add(ObjectCandidate{Key: key, ObjectType: class, ObjectRef: ref, Reason: reason, GroupKey: g.Key,
			GroupEvidence: gv.Evidence, Values: v})
		return nil
	}
	for {
		rows, err := tx.Query(ctx, fmt.Sprintf(`FETCH FORWARD %d FROM gcos_objects`, objectChunk))
		if err != nil {
			return 0, 0, fmt.Errorf("read objects: %w", err)
		}
		n := 0
		for rows.Next() {
			n++
			var coll, code, class, status, anchorColl string
			var canonical *string
			var child bool
			var h0, h1 *int64
			if err := rows.Scan(&coll, &code, &class, &status, &anchorColl, &canonical, &child, &h0, &h1); err != nil {
				rows.Close()
				return 0, 0, fmt.Errorf("read object: %w", err)
			}
			if err := consider(coll, code, class, status, anchorColl, canonical, child, h0, h1); err != nil {
				rows.Close()
				return 0, 0, err
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return 0, 0, fmt.Errorf("read objects: %w", err)
		}
		if err := w.flush(ctx, tx, objectChunk); err != nil {
			return 0, 0, err
		}
		if n < objectChunk {
			break
		}
	}
	if _, err := tx.Exec(ctx, `CLOSE gcos_objects`); err != nil {
		return 0, 0, fmt.Errorf("close the object cursor: %w", err)
	}
	// A scan's pass re-judges the clean rows of its bases it did not read a birth for: their object is where
	// their row says (a change to it would have queued it), so only their group's verdict inputs can have moved.
	if pass.bases != nil {
		for key, o := range stored {
			reason := classes[o.objectType]
			if seen[key] || kept[key] || kept[o.objectRef] || !o.active || !o.settled || reason == "" {
				continue
			}
			base, ok := pass.baseOf[o.groupKey]
			if !ok {
				continue
			}
			g, ok := byBase[[3]string{base.Class, base.Coll, base.Status}][scopes[0]]
			if !ok {
				continue // its base has no live group left: its object was named above, and placed or queued again
			}
			gv, err := judge(g)
			if err != nil {
				return 0, 0, err
			}
			v := gv
			sum := sha256.Sum256([]byte(gv.Evidence + "\x00" + key))
			v.Evidence = hex.EncodeToString(sum[:16])
			v.GroupKey = "object:" + key
			seen[key] = true
			w.add(ObjectCandidate{Key: key, ObjectType: o.objectType, ObjectRef: o.objectRef, Reason: reason, GroupKey: g.Key,
				GroupEvidence: gv.Evidence, Values: v})
			if err := w.flush(ctx, tx, objectChunk); err != nil {
				return 0, 0, err
			}
		}
		if err := recordDerivedBases(ctx, tx, ev.ruleset.Version, zClasses, zColls, zStatuses); err != nil {
			return 0, 0, err
		}
		if err := queueAgain(ctx, tx, requeue); err != nil {
			return 0, 0, err
		}
	} else {
		var cs, colls, sts []string
		for _, g := range pass.groups {
			b := postgres.BaseOf(g)
			cs, colls, sts = append(cs, b.Class), append(colls, b.Coll), append(sts, b.Status)
		}
		if err := recordDerivedBases(ctx, tx, ev.ruleset.Version, cs, colls, sts); err != nil {
			return 0, 0, err
		}
	}
	// An exception naming an object with no birth suppresses nothing, and says so (a pass over the estate: a
	// scan's pass does not see every named object).
	for k, xs := range excepted {
		if !born[k] && pass.bases == nil {
			for _, x := range xs {
				lifts = append(lifts, objectLift{object: k[0] + ":" + k[1], lift: *x.Holds(ev.now, nil)})
			}
		}
	}
	for _, l := range lifts {
		if err := postgres.RaiseExceptionLiftedTx(ctx, tx, l.lift, l.object, ev.ruleset.Version, runID, "scan"); err != nil {
			return 0, 0, err
		}
	}
	if err := w.flush(ctx, tx, 1); err != nil {
		return 0, 0, err
	}
	refresh = slices.DeleteFunc(refresh, func(key string) bool { return moved[key] }) // derived again above
	if err := w.refreshHeld(ctx, tx, refresh); err != nil {
		return 0, 0, err
	}
	retired, err = w.retireLapsed(ctx, tx, func(key string) bool { return seen[key] || kept[key] || after[key] })
	return w.written, retired, err
}

// basesToDerive returns the bases of classes with object rows that no pass derived from their births under ruleset.
func basesToDerive(ctx context.Context, tx pgx.Tx, ruleset string, bases map[postgres.BirthBase]bool, classes map[string]string) ([]postgres.BirthBase, error) {
	var cs, colls, sts []string
	for b := range bases {
		if _, ok := classes[b.Class]; ok {
			cs, colls, sts = append(cs, b.Class), append(colls, b.Coll), append(sts, b.Status)
		}
	}
	if len(cs) == 0 {
		return nil, nil
	}
	rows, err := tx.Query(ctx, `SELECT z.cls, z.coll, z.st FROM unnest($2::text[], $3::text[], $4::text[]) AS z(cls, coll, st)
		WHERE NOT EXISTS (SELECT 1 FROM governance_object_base d WHERE d.ruleset_version = $1
		                  AND d.object_class = z.cls AND d.source_registry = z.coll AND d.lifecycle_status = z.st)`, ruleset, cs, colls, sts)
	if err != nil {
		return nil, fmt.Errorf("read derived bases: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (postgres.BirthBase, error) {
		var b postgres.BirthBase
		return b, r.Scan(&b.Class, &b.Coll, &b.Status)
	})
}

// recordDerivedBases records that every object of these bases was derived from its births under ruleset.
func recordDerivedBases(ctx context.Context, tx pgx.Tx, ruleset string, classes, colls, statuses []string) error {
	if len(classes) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, `INSERT INTO governance_object_base (ruleset_version, object_class, source_registry, lifecycle_status)
		SELECT DISTINCT $1, z.cls, z.coll, z.st FROM unnest($2::text[], $3::text[], $4::text[]) AS z(cls, coll, st)
		ORDER BY 2, 3, 4
		ON CONFLICT DO NOTHING`, ruleset, classes, colls, statuses); err != nil {
		return fmt.Errorf("record derived bases: %w", err)
	}
	return nil
}

// queueAgain puts objects back in the intake's queue for the scan of their base (governance_object_pending); an
// object the intake queued again meanwhile keeps that newer entry.
func queueAgain(ctx context.Context, tx pgx.Tx, objects [][5]string) error {
	if len(objects) == 0 {
		return nil
	}
	slices.SortFunc(objects, func(a, b [5]string) int { return cmp.Compare(a[0]+"\x1f"+a[1], b[0]+"\x1f"+b[1]) })
	var colls, codes, classes, regs, statuses []string
	for _, o := range objects {
		colls, codes, classes, regs, statuses = append(colls, o[0]), append(codes, o[1]), append(classes, o[2]), append(regs, o[3]), append(statuses, o[4])
	}
	if _, err := tx.Exec(ctx, `INSERT INTO governance_object_pending (collection_name, entity_code, object_class, source_registry, lifecycle_status)
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[])
		ON CONFLICT (collection_name, entity_code) DO NOTHING`, colls, codes, classes, regs, statuses); err != nil {
		return fmt.Errorf("queue %d objects again: %w", len(objects), err)
	}
	return nil
}

// takePending takes the objects the intake queued for these bases (collection, code).
func takePending(ctx context.Context, tx pgx.Tx, bases map[postgres.BirthBase]bool) ([][2]string, error) {
	var cs, colls, sts []string
	for b := range bases {
		cs, colls, sts = append(cs, b.Class), append(colls, b.Coll), append(sts, b.Status)
	}
	rows, err := tx.Query(ctx, `DELETE FROM governance_object_pending p USING unnest($1::text[], $2::text[], $3::text[]) AS z(cls, coll, st)
		WHERE p.object_class = z.cls AND p.source_registry = z.coll AND p.lifecycle_status = z.st
		RETURNING p.collection_name, p.entity_code`, cs, colls, sts)
	if err != nil {
		return nil, fmt.Errorf("take queued objects: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) ([2]string, error) {
		var k [2]string
		return k, r.Scan(&k[0], &k[1])
	})
}

// objectLift is an exception on an object that does not count, found while materializing the object.
type objectLift struct {
	lift   gcos.ExceptionLift
	object string
}

// heldFinding is an open input finding on one object.
type heldFinding struct {
	id    int64
	state string
}

// openObjectFindings returns the open input findings (gov:input:<state>:<subject>) by subject: an object's
// candidate key or collection:code.
func openObjectFindings(ctx context.Context, tx pgx.Tx) (map[string]heldFinding, error) {
	const prefix = "gov:input:"
	rows, err := tx.Query(ctx, `SELECT id, coalesce_key FROM system_issues
		WHERE status = 'open' AND coalesce_key LIKE 'gov:input:%' ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("read open input findings: %w", err)
	}
	defer rows.Close()
	out := map[string]heldFinding{}
	for rows.Next() {
		var id int64
		var key string
		if err := rows.Scan(&id, &key); err != nil {
			return nil, fmt.Errorf("read open input findings: %w", err)
		}
		state, subject, ok := strings.Cut(strings.TrimPrefix(key, prefix), ":")
		if q, err := gcos.ParseInputQuality(state); !ok || subject == "" || err != nil || q == gcos.InputAccepted {
			continue
		}
		if _, dup := out[subject]; !dup {
			out[subject] = heldFinding{id: id, state: state}
		}
	}
	return out, rows.Err()
}

const upsertObjectsSQL = `
INSERT INTO governance_candidate_object AS o (candidate_key, object_type, object_ref, materialization_reason, group_key,
    source_snapshot_ref, ruleset_version, scan_time, candidate_verdict, input_quality_state, depends_on, stale_after,
    recompute_status, risk_class, coverage_required, coverage_scan_ref, last_run_id, evidence_fingerprint, owner_scope,
    group_evidence)
SELECT u.key, u.otype, u.oref, u.reason, u.gkey, $1, $2, now(), u.verdict, u.quality, u.deps, now() + u.ttl, 'ok',
       u.risk, u.required, CASE WHEN u.verdict = 'relevant' THEN $3 END, $3, u.evidence, u.owner, nullif(u.gevidence, '')
FROM unnest($4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], $11::jsonb[],
            $12::interval[], $13::text[], $14::boolean[], $15::text[], $16::text[], $17::text[])
     AS u(key, otype, oref, reason, gkey, verdict, quality, deps, ttl, risk, required, evidence, owner, gevidence)
ON CONFLICT (candidate_key, ruleset_version) DO UPDATE SET
    materialization_reason = EXCLUDED.materialization_reason, group_key = EXCLUDED.group_key,
    source_snapshot_ref = EXCLUDED.source_snapshot_ref, scan_time = EXCLUDED.scan_time,
    candidate_verdict = EXCLUDED.candidate_verdict, input_quality_state = EXCLUDED.input_quality_state,
    depends_on = EXCLUDED.depends_on, stale_after = EXCLUDED.stale_after, recompute_status = 'ok', dirty = false,
    dirty_reason = NULL, risk_class = EXCLUDED.risk_class, coverage_required = EXCLUDED.coverage_required,
    coverage_scan_ref = EXCLUDED.coverage_scan_ref, last_run_id = EXCLUDED.last_run_id,
    evidence_fingerprint = EXCLUDED.evidence_fingerprint, owner_scope = EXCLUDED.owner_scope,
    group_evidence = EXCLUDED.group_evidence, lifecycle_status = 'active', updated_at = now()
WHERE o.lifecycle_status <> 'active' OR o.evidence_fingerprint IS DISTINCT FROM EXCLUDED.evidence_fingerprint
   OR o.materialization_reason IS DISTINCT FROM EXCLUDED.materialization_reason
   OR o.group_key IS DISTINCT FROM EXCLUDED.group_key OR o.group_evidence IS DISTINCT FROM EXCLUDED.group_evidence
   -- a row that is no longer clean (expired, dirty, failed) is re-derived, or it would stay stale for good
   OR o.dirty OR o.recompute_status <> 'ok' OR o.stale_after <= now()`

// The rows ($2) a pass read and did not select become tombstones: their reason lapsed. A row held by an open
// finding lapses when the finding closes; the recheck keeps a row whose finding was raised (and the row written)
// after this run read the findings.
const tombstoneObjectsSQL = `
UPDATE governance_candidate_object o SET lifecycle_status = 'retired', updated_at = now(), last_run_id = $3
WHERE o.ruleset_version = $1 AND o.lifecycle_status = 'active' AND o.candidate_key = ANY($2)
  AND (o.materialization_reason <> 'open_finding' OR NOT EXISTS (
        SELECT 1 FROM system_issues i WHERE i.status = 'open'
          AND i.coalesce_key IN ('gov:input:' || o.input_quality_state || ':' || o.candidate_key,
                                 'gov:input:' || o.input_quality_state || ':' || o.object_ref)))`

// storedObjectsSQL reads every object row of the ruleset ($1), for a pass over the estate. settled: active and
// clean, so an equal result needs no write.
const storedObjectsSQL = `
SELECT candidate_key, object_type, object_ref, materialization_reason, group_key, coalesce(evidence_fingerprint, ''),
       coalesce(group_evidence, ''), lifecycle_status = 'active',
       lifecycle_status = 'active' AND NOT dirty AND recompute_status = 'ok' AND stale_after > now()
FROM governance_candidate_object
WHERE ruleset_version = $1`

// storedChangedObjectsSQL reads, for a scan's pass, the active rows linked to its bases' groups ($2) that may need
// work: not clean, held by an exception or a finding, or judged from another evaluation of their group than the
// one of now ($3 group keys, $4 the evaluation's evidence). A clean class row of an unchanged group is not read.
const storedChangedObjectsSQL = `
SELECT o.candidate_key, o.object_type, o.object_ref, o.materialization_reason, o.group_key,
       coalesce(o.evidence_fingerprint, ''), coalesce(o.group_evidence, ''), true,
       NOT o.dirty AND o.recompute_status = 'ok' AND o.stale_after > now()
FROM governance_candidate_object o
LEFT JOIN unnest($3::text[], $4::text[]) AS x(k, e) ON x.k = o.group_key
WHERE o.ruleset_version = $1 AND o.group_key = ANY($2) AND o.lifecycle_status = 'active'
  AND (o.materialization_reason IN ('exception', 'open_finding') OR o.dirty OR o.recompute_status <> 'ok'
       OR o.stale_after <= now() OR o.group_evidence IS DISTINCT FROM x.e)`
