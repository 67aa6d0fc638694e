// Package preview is the impact preview stage: what a proposed governance change (an owner, an exception, a
// collection's coverage status) would flip, computed read-only by the evaluator and the gate's decision function on
// the groups the change routes to, at one instant.
package preview

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
	"gcos/evaluate"
	"gcos/postgres"
)

// Previewer answers previews over one store.
type Previewer struct {
	core *postgres.Store
	// lowRisk are the risk classes the gate treats as low risk (gate.low_risk_classes).
	lowRisk []string
}

// New builds a previewer over the store core.
func New(core *postgres.Store) *Previewer {
	return &Previewer{core: core, lowRisk: core.Config().Gate.LowRiskClasses}
}

// Preview judges the request's changes against the registries as they are, in one read-only REPEATABLE READ
// transaction (one instant, named by its token): nothing is written, and a bad request is an EINVALID error.
//
// How the affected set is found: each change is routed as the intake would route the registry row it edits
// (gcos.RouteChange, on the row before and after the change), the selectors are matched against the live groups
// of the group registry, and every base (class, registry, lifecycle) of a matched group is judged in every scope,
// under the registries as they are and as they would be. Objects are counted through their groups' member counts,
// never read, except the objects with rows of their own there (an exception or an open finding holds them; they
// are judged one by one) and the first few of each flipping base, named in the answer.
func (p *Previewer) Preview(ctx context.Context, req gcos.PreviewRequest) (gcos.PreviewReport, error) {
	if err := req.Validate(); err != nil {
		return gcos.PreviewReport{}, err
	}
	var rep gcos.PreviewReport
	err := pgx.BeginTxFunc(ctx, p.core.Pool(), pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		rep, err = p.preview(ctx, tx, req)
		return err
	})
	if err != nil {
		return gcos.PreviewReport{}, fmt.Errorf("preview: %w", err)
	}
	return rep, nil
}

// base is one (class, registry, lifecycle) base group the preview judges.
type base struct {
	postgres.BirthBase
	members int64
	keys    []string // its live groups' keys, every scope
}

// special is an object judged on its own: a row of its own holds it (an exception or an open finding), or a change
// names it.
type special struct {
	obj  [2]gcos.PreviewObject // before and after (a lifecycle change moves its base and changes its fingerprint)
	held bool                  // an open finding holds its row (needs_input) on both sides
	// children are its inherited children moving with it (an anchor's lifecycle change): represented by its groups.
	children int64
}

func baseOf(o gcos.PreviewObject) postgres.BirthBase {
	return postgres.BirthBase{Class: o.Base.ObjectClass, Coll: o.Base.SourceRegistry, Status: o.Base.LifecycleStatus}
}

// side is one side of the preview: the registries as they are (before) or as they would be (after).
type side struct {
	ev      *evaluate.Evaluator
	regs    gcos.Registries
	scopes  []string
	groups  map[postgres.BirthBase][]judged // per base, one per scope in scope order
	members map[postgres.BirthBase]int64    // per base, its members on this side
}

type judged struct {
	scope string
	v     postgres.CandidateValues
}

func (p *Previewer) preview(ctx context.Context, tx pgx.Tx, req gcos.PreviewRequest) (gcos.PreviewReport, error) {
	rep := gcos.PreviewReport{Changes: req.Changes, Action: req.Action, Assumed: []string{}, Groups: []gcos.PreviewGroup{},
		Ledgers: []gcos.PreviewLedger{}, Flips: gcos.PreviewFlips{FirstBlocked: []gcos.PreviewFlip{}, FirstAllowed: []gcos.PreviewFlip{}}}
	if _, err := tx.Exec(ctx, postgres.NoJIT); err != nil { // the ledger's read, compiled, costs seconds
		return rep, fmt.Errorf("preview: %w", err)
	}
	var version string
	if err := tx.QueryRow(ctx, `SELECT now(), pg_current_snapshot()::text, (SELECT ruleset_version FROM v_current_ruleset)`).Scan(
		&rep.AsOf, &rep.Token, &version); err != nil {
		return rep, postgres.MapError(err, "current ruleset (run gcos backfill first)")
	}
	rs, err := p.core.RulesetVersionVia(ctx, tx, version)
	if err != nil {
		return rep, err
	}
	var status string
	if err := tx.QueryRow(ctx, `SELECT status FROM governance_ruleset WHERE ruleset_version = $1`, version).Scan(&status); err != nil {
		return rep, fmt.Errorf("read ruleset status: %w", err)
	}
	rep.RulesetVersion = version
	snapshot, err := postgres.LatestFullSnapshotID(ctx, tx)
	if err != nil {
		return rep, err
	}
	ev, err := evaluate.New(ctx, p.core, tx, rs)
	if err != nil {
		return rep, err
	}
	in := [2]inputs{
		{action: req.Action, lowRisk: p.lowRisk, ruleset: version, status: status, snapshot: snapshot, now: rep.AsOf},
		{action: req.Action, lowRisk: p.lowRisk, ruleset: version, status: status, snapshot: snapshot, now: rep.AsOf},
	}
	// A ruleset activation judges the after side under the draft: its rule side, its policy, and the groups its
	// diff with the current ruleset dirties (the activation's own impact).
	afterEv, ruleSel := ev, []gcos.GroupSelector(nil)
	if i := slices.IndexFunc(req.Changes, func(c gcos.ProposedChange) bool { return c.Kind == gcos.PreviewRulesetActivate }); i >= 0 {
		v := *req.Changes[i].RulesetVersion
		var draftStatus string
		switch err := tx.QueryRow(ctx, `SELECT status FROM governance_ruleset WHERE ruleset_version = $1`, v).Scan(&draftStatus); {
		case errors.Is(err, pgx.ErrNoRows):
			return rep, gcos.Errorf(gcos.EINVALID, "changes[%d] (ruleset_activate): ruleset %s does not exist", i, gcos.Quote(v))
		case err != nil:
			return rep, fmt.Errorf("read ruleset %s: %w", v, err)
		case draftStatus != gcos.RulesetDraft:
			return rep, gcos.Errorf(gcos.EINVALID, "changes[%d] (ruleset_activate): ruleset %s is %s; only a draft can be activated", i, v, draftStatus)
		}
		draft, err := p.core.RulesetVersionVia(ctx, tx, v)
		if err != nil {
			return rep, err
		}
		if afterEv, err = evaluate.New(ctx, p.core, tx, draft); err != nil {
			return rep, err
		}
		ruleSel = gcos.DiffRulesets(rs.Components, draft.Components).Impact
		in[1].ruleset, in[1].status = v, gcos.RulesetActive
	}
	rep.RulesetAfter = in[1].ruleset
	before := ev.Registries()
	named, err := p.readObjects(ctx, tx, namedObjects(req.Changes, before))
	if err != nil {
		return rep, err
	}
	applied, err := gcos.ApplyChanges(afterEv.Registries(), req.Changes, ev.Now(), named)
	if err != nil {
		return rep, err
	}
	applied.Selectors = append(applied.Selectors, ruleSel...)
	rep.Selectors, rep.Assumed = applied.Selectors, append(rep.Assumed, applied.Assumed...)
	var extra []postgres.BirthBase
	for _, m := range applied.Moves {
		extra = append(extra, postgres.BirthBase{Class: m.To.ObjectClass, Coll: m.To.SourceRegistry, Status: m.To.LifecycleStatus})
	}
	bases, err := p.affectedBases(ctx, tx, applied.Selectors, named, extra)
	if err != nil {
		return rep, err
	}
	specials, err := p.specials(ctx, tx, version, bases, applied.Objects, named)
	if err != nil {
		return rep, err
	}
	if err := p.move(ctx, tx, specials, applied.Moves); err != nil {
		return rep, err
	}
	sides := [2]*side{
		{ev: ev, regs: before, scopes: before.ScopeCodes(), members: map[postgres.BirthBase]int64{}},
		{ev: afterEv.WithRegistries(applied.After), regs: applied.After, scopes: applied.After.ScopeCodes(), members: map[postgres.BirthBase]int64{}},
	}
	for _, b := range bases {
		sides[0].members[b.BirthBase], sides[1].members[b.BirthBase] = b.members, b.members
	}
	for _, m := range applied.Moves {
		sides[1].members[baseOf(gcos.PreviewObject{Base: m.From})] -= m.Members
		sides[1].members[baseOf(gcos.PreviewObject{Base: m.To})] += m.Members
	}
	for _, s := range sides {
		if s.groups, err = judgeBases(s, bases); err != nil {
			return rep, err
		}
	}
	// The ledger: each side counts its bases' members in their groups' buckets, the objects with rows of their own
	// in their rows' (before counts out, after counts in).
	delta := map[string]map[gcos.Bucket]int64{}
	add := func(scope string, b gcos.Bucket, n int64) {
		if n == 0 {
			return
		}
		if delta[scope] == nil {
			delta[scope] = map[gcos.Bucket]int64{}
		}
		delta[scope][b] += n
	}
	for i, s := range sides {
		sign := int64(2*i - 1)
		own := map[postgres.BirthBase]map[string]int64{}
		for _, sp := range specials {
			b := baseOf(sp.obj[i])
			if row, ok := objectRow(s, sp, i, s.groups[b]); ok {
				if own[b] == nil {
					own[b] = map[string]int64{}
				}
				own[b][row.scope]++
				add(row.scope, bucket(row), sign)
			}
		}
		for _, b := range bases {
			for _, j := range s.groups[b.BirthBase] {
				add(j.scope, bucket(j), sign*(s.members[b.BirthBase]-own[b.BirthBase][j.scope]))
			}
		}
	}
	// The flips: the members a base keeps are judged by its groups on both sides; the objects judged on their own
	// and the children that move with an anchor, one by one.
	for _, b := range bases {
		rep.AffectedGroups += len(b.keys)
		rep.AffectedObjects += b.members
		stay := b.members
		var skip []string
		for _, sp := range specials {
			if baseOf(sp.obj[0]) == b.BirthBase {
				stay -= 1 + sp.children
				skip = append(skip, sp.obj[0].Ref())
			}
		}
		decisions := [2]gcos.ObjectGateDecision{in[0].decide(sides[0].groups[b.BirthBase], nil), in[1].decide(sides[1].groups[b.BirthBase], nil)}
		rep.ChangedGroups += listChanged(&rep, b, sides, decisions)
		if flipped(decisions) && stay > 0 {
			var sample []string
			if need := req.Sample - len(firsts(&rep.Flips, decisions[1])); need > 0 {
				if sample, err = p.firstObjects(ctx, tx, b.BirthBase, skip, need); err != nil {
					return rep, err
				}
			}
			record(&rep.Flips, decisions, stay, sample, req.Sample)
		}
	}
	for _, sp := range specials {
		var d, children [2]gcos.ObjectGateDecision
		for i, s := range sides {
			groups := s.groups[baseOf(sp.obj[i])]
			row, ok := objectRow(s, sp, i, groups)
			var r *judged
			if ok {
				r = &row
			}
			d[i], children[i] = in[i].decide(groups, r), in[i].decide(groups, nil)
		}
		if flipped(d) {
			record(&rep.Flips, d, 1, []string{sp.obj[0].Ref()}, req.Sample)
		}
		if flipped(children) && sp.children > 0 {
			var sample []string
			if need := req.Sample - len(firsts(&rep.Flips, children[1])); need > 0 {
				if sample, err = p.children(ctx, tx, sp.obj[0], need); err != nil {
					return rep, err
				}
			}
			record(&rep.Flips, children, sp.children, sample, req.Sample)
		}
	}
	ledgers, err := postgres.ReadLedgers(ctx, tx, "")
	if err != nil {
		return rep, err
	}
	for _, l := range ledgers.Ledgers {
		d := delta[l.Scope]
		maps.DeleteFunc(d, func(_ gcos.Bucket, n int64) bool { return n == 0 }) // moved out and back in
		if len(d) == 0 {
			continue
		}
		after := l
		for _, b := range slices.Sorted(maps.Keys(d)) {
			after.Add(b, d[b])
		}
		rep.Ledgers = append(rep.Ledgers, gcos.PreviewLedger{Scope: l.Scope, Before: l, After: after, Delta: d})
	}
	return rep, nil
}

// namedObjects lists the objects the changes' exceptions name, as they are and as a change would make them.
func namedObjects(changes []gcos.ProposedChange, regs gcos.Registries) []string {
	var out []string
	for _, c := range changes {
		if c.EntityCode != nil && c.Collection != nil {
			out = append(out, *c.Collection+":"+*c.EntityCode)
		}
		if c.ExceptionID != nil {
			for _, x := range regs.Exceptions {
				if x.ExceptionID == *c.ExceptionID && x.EntityCode != nil && x.CollectionName != nil {
					out = append(out, *x.CollectionName+":"+*x.EntityCode)
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// readObjects reads the objects named by reference: each one's anchor base and its fingerprint now. An object with
// no birth is returned with Found false.
func (p *Previewer) readObjects(ctx context.Context, tx pgx.Tx, refs []string) (map[string]gcos.PreviewObject, error) {
	out := map[string]gcos.PreviewObject{}
	var colls, codes []string
	for _, ref := range refs {
		coll, code, _ := strings.Cut(ref, ":")
		colls, codes = append(colls, coll), append(codes, code)
		out[ref] = gcos.PreviewObject{Collection: coll, Code: code}
	}
	if len(refs) == 0 {
		return out, nil
	}
	rows, err := tx.Query(ctx, p.core.BirthBinding().SQL(`
		SELECT k.coll, k.code, coalesce(p.{type}, b.{type}), coalesce(p.{coll}, b.{coll}), coalesce(p.{status}, b.{status}),
		       b.{status}, b.{parent} IS NOT NULL,
		       (SELECT count(*) FROM {t} c WHERE c.{coll} = b.{coll} AND c.{parent} = b.{code}),
		       lpad(to_hex(hashint8extended(f.h, 1)), 16, '0') || lpad(to_hex(f.h), 16, '0')
		FROM unnest($1::text[], $2::text[]) AS k(coll, code)
		JOIN {t} b ON b.{coll} = k.coll AND b.{code} = k.code
		CROSS JOIN LATERAL (SELECT `+postgres.RowHashExpr+` AS h) f
		LEFT JOIN {t} p ON b.{parent} IS NOT NULL AND p.{coll} = b.{coll} AND p.{code} = b.{parent}`), colls, codes)
	if err != nil {
		return nil, fmt.Errorf("read named objects: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var o gcos.PreviewObject
		var fp string
		if err := rows.Scan(&o.Collection, &o.Code, &o.Base.ObjectClass, &o.Base.SourceRegistry, &o.Base.LifecycleStatus,
			&o.Status, &o.Child, &o.Children, &fp); err != nil {
			return nil, fmt.Errorf("read named objects: %w", err)
		}
		o.Fingerprint, o.Found = &fp, true
		out[o.Ref()] = o
	}
	return out, rows.Err()
}

// affectedBases finds the bases of the live groups the selectors match, plus the bases of the named objects, with
// each base's live group keys and member count.
func (p *Previewer) affectedBases(ctx context.Context, tx pgx.Tx, sels []gcos.GroupSelector, named map[string]gcos.PreviewObject, extra []postgres.BirthBase) ([]base, error) {
	all := slices.ContainsFunc(sels, func(s gcos.GroupSelector) bool { return s.All })
	var classes, colls, families, scopes []string
	for _, s := range sels {
		switch {
		case s.ObjectClass != nil:
			classes = append(classes, *s.ObjectClass)
		case s.SourceRegistry != nil:
			colls = append(colls, *s.SourceRegistry)
		case s.AxisFamily != nil:
			families = append(families, *s.AxisFamily)
		case s.Scope != nil:
			scopes = append(scopes, *s.Scope)
		}
	}
	want := map[postgres.BirthBase]bool{}
	for _, o := range named {
		if o.Found {
			want[baseOf(o)] = true
		}
	}
	for _, b := range extra {
		want[b] = true
	}
	var bc, bcoll, bst []string
	for b := range want {
		bc, bcoll, bst = append(bc, b.Class), append(bcoll, b.Coll), append(bst, b.Status)
	}
	// The candidates are read by the most selective dimension each selector names, and matched in Go. A selector
	// naming a scope alone (a ruleset's scope row) or every group (a policy change) reads every live group of the
	// group registry: the groups, never the objects.
	rows, err := tx.Query(ctx, `
		SELECT group_key, object_class, source_registry, axis_family, scope, lifecycle_status, owner_scope, coalesce(member_count, 0)
		FROM governance_group
		WHERE retired_at IS NULL AND ($1 OR object_class = ANY($2) OR source_registry = ANY($3) OR axis_family = ANY($7)
		      OR (cardinality($8::text[]) > 0 AND (scope = ANY($8) OR scope IS NULL OR scope = $9))
		      OR (object_class, source_registry, lifecycle_status) IN (SELECT * FROM unnest($4::text[], $5::text[], $6::text[])))
		ORDER BY group_key`, all, classes, colls, bc, bcoll, bst, families, scopes, gcos.UnscopedScope)
	if err != nil {
		return nil, fmt.Errorf("read affected groups: %w", err)
	}
	groups, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (gcos.Group, error) {
		var g gcos.Group
		err := r.Scan(&g.Key, &g.ObjectClass, &g.SourceRegistry, &g.AxisFamily, &g.Scope, &g.LifecycleStatus, &g.OwnerScope, &g.MemberCount)
		return g, err
	})
	if err != nil {
		return nil, fmt.Errorf("read affected groups: %w", err)
	}
	for _, g := range groups {
		if slices.ContainsFunc(sels, func(s gcos.GroupSelector) bool { return s.Matches(g.Dimensions) }) {
			want[postgres.BaseOf(g)] = true
		}
	}
	byBase := map[postgres.BirthBase]*base{}
	for _, g := range groups {
		b := postgres.BaseOf(g)
		if !want[b] {
			continue
		}
		if byBase[b] == nil {
			byBase[b] = &base{BirthBase: b}
		}
		byBase[b].keys = append(byBase[b].keys, g.Key)
		byBase[b].members = max(byBase[b].members, g.MemberCount)
	}
	for b := range want {
		if byBase[b] == nil {
			byBase[b] = &base{BirthBase: b} // a named object's base no group has counted yet
		}
	}
	out := make([]base, 0, len(byBase))
	for _, b := range byBase {
		out = append(out, *b)
	}
	slices.SortFunc(out, func(x, y base) int {
		return cmp.Or(cmp.Compare(x.Class, y.Class), cmp.Compare(x.Coll, y.Coll), cmp.Compare(x.Status, y.Status))
	})
	return out, nil
}

// specials reads the objects of the bases held by rows of their own (an exception or an open finding) and adds the
// objects the changes name: each is judged one by one.
func (p *Previewer) specials(ctx context.Context, tx pgx.Tx, ruleset string, bases []base, names []string, named map[string]gcos.PreviewObject) ([]special, error) {
	var keys []string
	for _, b := range bases {
		keys = append(keys, b.keys...)
	}
	rows, err := tx.Query(ctx, `
		SELECT object_ref, bool_or(materialization_reason = 'open_finding')
		FROM governance_candidate_object
		WHERE ruleset_version = $1 AND group_key = ANY($2) AND lifecycle_status = 'active'
		  AND materialization_reason IN ('exception', 'open_finding')
		GROUP BY object_ref ORDER BY object_ref`, ruleset, keys)
	if err != nil {
		return nil, fmt.Errorf("read held object rows: %w", err)
	}
	type heldRow struct {
		ref  string
		held bool
	}
	stored, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (heldRow, error) {
		var h heldRow
		err := r.Scan(&h.ref, &h.held)
		return h, err
	})
	if err != nil {
		return nil, fmt.Errorf("read held object rows: %w", err)
	}
	held := map[string]bool{}
	var missing []string
	for _, h := range stored {
		held[h.ref] = h.held
		if _, ok := named[h.ref]; !ok {
			missing = append(missing, h.ref)
		}
	}
	more, err := p.readObjects(ctx, tx, missing)
	if err != nil {
		return nil, err
	}
	var out []special
	seen := map[string]bool{}
	for _, ref := range append(slices.Sorted(maps.Keys(held)), names...) {
		o, ok := named[ref]
		if !ok {
			o = more[ref]
		}
		if seen[ref] || !o.Found {
			continue
		}
		seen[ref] = true
		out = append(out, special{obj: [2]gcos.PreviewObject{o, o}, held: held[ref]})
	}
	return out, nil
}

// judgeBases evaluates every base in every scope of the side's registries, as a scan would.
func judgeBases(s *side, bases []base) (map[postgres.BirthBase][]judged, error) {
	out := map[postgres.BirthBase][]judged{}
	for _, b := range bases {
		for _, d := range s.regs.Dimensions(gcos.BaseGroup{ObjectClass: b.Class, SourceRegistry: b.Coll, LifecycleStatus: b.Status}) {
			g := gcos.NewGroup(d, s.members[b.BirthBase])
			v, err := s.ev.Evaluate(g, "")
			if err != nil {
				return nil, fmt.Errorf("evaluate group %s: %w", g.Key, err)
			}
			out[b.BirthBase] = append(out[b.BirthBase], judged{scope: postgres.Deref(d.Scope), v: v})
		}
	}
	return out, nil
}

// objectRow is the row of its own a special object has on a side, as the object-row derivation would write it
// (evaluate.ObjectException): held by its finding (needs_input), or carrying the exception that holds in its scope;
// ok is false when nothing on that side gives it a row that differs from its group's.
func objectRow(s *side, sp special, i int, groups []judged) (judged, bool) {
	o := sp.obj[i]
	inScope := func(scope string) (judged, bool) {
		i := slices.IndexFunc(groups, func(j judged) bool { return j.scope == scope })
		if i < 0 {
			return judged{}, false
		}
		return groups[i], true
	}
	if sp.held {
		j, ok := inScope(s.scopes[0])
		if !ok {
			return j, false
		}
		hold := gcos.HoldForInput(gcos.ObjectRowOpenFinding)
		j.v.Verdict, j.v.Rule = hold.Verdict, hold.Rule
		j.v.CoverageRequired, j.v.Coverage, j.v.CoverageOwner, j.v.ExceptionID = s.regs.CoverageRequired(o.Base.ObjectClass), "", nil, nil
		return j, true
	}
	var xs []gcos.ExceptionRow
	for _, x := range s.regs.Exceptions {
		if x.EntityCode != nil && x.CollectionName != nil && *x.CollectionName == o.Collection && *x.EntityCode == o.Code &&
			x.Approved(s.ev.Now()) {
			xs = append(xs, x)
		}
	}
	chosen, holds, _ := evaluate.ObjectException(xs, s.scopes, s.ev.Now(), o.Fingerprint)
	if chosen == nil {
		return judged{}, false
	}
	j, ok := inScope(postgres.Deref(chosen.ScopeCode))
	if !ok {
		return j, false
	}
	if j.v.Verdict == gcos.VerdictRelevant && holds {
		j.v.Coverage, j.v.ExceptionID = gcos.CoverageApprovedException, &chosen.ExceptionID
	}
	return j, true
}

// bucket places a judged row in the ledger.
func bucket(j judged) gcos.Bucket { return gcos.BucketFor(j.v.Verdict, j.v.Coverage) }

// inputs turns judged rows into the gate's input as a settled system would hold them: freshly scanned under the
// current ruleset and the latest snapshot, clean.
type inputs struct {
	action, ruleset, status string
	lowRisk                 []string
	snapshot                int64
	now                     time.Time
}

func (in inputs) row(j judged, source string) gcos.GateInput {
	v := j.v
	row := gcos.CandidateRow{GroupKey: v.GroupKey, SnapshotRef: in.snapshot, RulesetVersion: in.ruleset, ScanTime: in.now,
		Verdict: v.Verdict, InputQualityState: &v.InputQuality, RecomputeStatus: gcos.RecomputeOK, RiskClass: v.RiskClass,
		CoverageRequired: v.CoverageRequired, OwnerScope: v.OwnerScope, LifecycleStatus: postgres.LifecycleActive, MemberCount: v.MemberCount}
	if v.Verdict == gcos.VerdictRelevant {
		row.CoverageScanRef = gcos.Str("preview") // a scan records coverage for every relevant row it writes
	}
	return gcos.GateInput{Action: in.action, Found: true, Source: source, Row: row, Scope: j.scope,
		Effective: gcos.EffectiveState{Verdict: v.Verdict, Clean: true, Reasons: []string{}},
		HighRisk:  gcos.IsHighRisk(v.RiskClass, in.lowRisk), RulesetStatus: in.status, SnapshotExists: true, Coverage: v.Coverage}
}

// decide is the gate's decision on an object its groups represent, and its own row when it has one.
func (in inputs) decide(groups []judged, own *judged) gcos.ObjectGateDecision {
	obj := gcos.ObjectGateInput{Action: in.action}
	if own != nil {
		obj.Rows = append(obj.Rows, in.row(*own, gcos.GateSourceObject))
	}
	for _, j := range groups {
		obj.Rows = append(obj.Rows, in.row(j, gcos.GateSourceGroup))
		obj.Scopes = append(obj.Scopes, j.scope)
	}
	return gcos.GateObject(obj)
}

func flipped(d [2]gcos.ObjectGateDecision) bool { return d[0].Decision != d[1].Decision }

// firsts is the list of named flips in the direction the after decision gives.
func firsts(f *gcos.PreviewFlips, after gcos.ObjectGateDecision) []gcos.PreviewFlip {
	if after.Allowed() {
		return f.FirstAllowed
	}
	return f.FirstBlocked
}

// record counts n flipped objects and names those of sample while the direction's list has room.
func record(f *gcos.PreviewFlips, d [2]gcos.ObjectGateDecision, n int64, sample []string, limit int) {
	list := &f.FirstBlocked
	if d[1].Allowed() {
		f.BlockToAllow += n
		list = &f.FirstAllowed
	} else {
		f.AllowToBlock += n
	}
	for _, o := range sample {
		if len(*list) >= limit {
			break
		}
		*list = append(*list, gcos.PreviewFlip{Object: o, Before: d[0].Reasons, After: d[1].Reasons})
	}
}

// firstObjects names the first n objects of a base that its groups represent (not the ones judged on their own).
func (p *Previewer) firstObjects(ctx context.Context, tx pgx.Tx, b postgres.BirthBase, skip []string, n int) ([]string, error) {
	rows, err := tx.Query(ctx, p.core.BirthBinding().SQL(`
		SELECT b.{coll} || ':' || b.{code} FROM {t} b
		WHERE b.{coll} = $1 AND b.{type} = $2 AND b.{status} = $3 AND b.{parent} IS NULL
		  AND NOT (b.{coll} || ':' || b.{code} = ANY(coalesce($4::text[], '{}')))
		ORDER BY b.{code} LIMIT $5`), b.Coll, b.Class, b.Status, skip, n)
	if err != nil {
		return nil, fmt.Errorf("name flipped objects: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// listChanged lists the base's groups whose verdict, risk class, coverage, owner, exception or member count changes, up to the
// answer's bound, and returns how many changed.
func listChanged(rep *gcos.PreviewReport, b base, sides [2]*side, d [2]gcos.ObjectGateDecision) int {
	n := 0
	after := sides[1].groups[b.BirthBase]
	for _, jb := range sides[0].groups[b.BirthBase] {
		i := slices.IndexFunc(after, func(j judged) bool { return j.scope == jb.scope })
		ja := judged{scope: jb.scope}
		if i >= 0 {
			ja = after[i]
		}
		g := gcos.PreviewGroup{Scope: jb.scope, ObjectClass: b.Class, SourceRegistry: b.Coll, Lifecycle: b.Status,
			Before: judgedGroup(jb, sides[0].members[b.BirthBase], d[0]), After: judgedGroup(ja, sides[1].members[b.BirthBase], d[1])}
		if g.Before.Verdict == g.After.Verdict && g.Before.Coverage == g.After.Coverage && g.Before.Members == g.After.Members &&
			g.Before.RiskClass == g.After.RiskClass &&
			postgres.Deref(g.Before.Owner) == postgres.Deref(g.After.Owner) && postgres.Deref(g.Before.Exception) == postgres.Deref(g.After.Exception) {
			continue
		}
		n++
		if len(rep.Groups) < gcos.PreviewGroupsMax {
			rep.Groups = append(rep.Groups, g)
		}
	}
	return n
}

func judgedGroup(j judged, members int64, d gcos.ObjectGateDecision) gcos.GroupJudged {
	return gcos.GroupJudged{GroupKey: j.v.GroupKey, Members: members, Verdict: j.v.Verdict, RiskClass: j.v.RiskClass, Coverage: j.v.Coverage, Owner: j.v.OwnerScope,
		Exception: j.v.ExceptionID, Decision: d.Decision}
}

// move applies the lifecycle changes to the objects they name: each one's after side sits in its new base, with
// its children, and its fingerprint is its birth row's hash with the new status (the status is a hashed column, so
// an exception pinned to the object as it was no longer holds).
func (p *Previewer) move(ctx context.Context, tx pgx.Tx, specials []special, moves []gcos.ObjectMove) error {
	hash := strings.Replace(postgres.RowHashExpr, "b.{status}", "$3::text", 1)
	for _, m := range moves {
		i := slices.IndexFunc(specials, func(sp special) bool { return sp.obj[0].Ref() == m.Object })
		if i < 0 {
			return fmt.Errorf("moved object %s was not read", m.Object)
		}
		sp := &specials[i]
		coll, code, _ := strings.Cut(m.Object, ":")
		var fp string
		if err := tx.QueryRow(ctx, p.core.BirthBinding().SQL(`
			SELECT lpad(to_hex(hashint8extended(f.h, 1)), 16, '0') || lpad(to_hex(f.h), 16, '0')
			FROM {t} b CROSS JOIN LATERAL (SELECT `+hash+` AS h) f
			WHERE b.{coll} = $1 AND b.{code} = $2`), coll, code, m.Status).Scan(&fp); err != nil {
			return fmt.Errorf("fingerprint of %s as %s: %w", m.Object, m.Status, err)
		}
		sp.obj[1].Base, sp.obj[1].Status, sp.obj[1].Fingerprint = m.To, m.Status, &fp
		sp.children = max(m.Members-1, 0)
	}
	return nil
}

// RulesetImpact is the impact a new draft's ruleset.proposed announcement carries (postgres.RulesetImpact): the
// preview of activating it (write decisions), judged in the transaction that records it, under a savepoint. A
// preview that fails never fails the proposal: the announcement then says preview_failed instead of the counts.
func (p *Previewer) RulesetImpact(ctx context.Context, tx pgx.Tx, draft postgres.RulesetRow) (map[string]any, error) {
	req := gcos.PreviewRequest{Changes: []gcos.ProposedChange{{Kind: gcos.PreviewRulesetActivate, RulesetVersion: &draft.Version}}}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	sp, err := tx.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("preview savepoint: %w", err)
	}
	rep, err := p.preview(ctx, sp, req)
	if err != nil {
		if rerr := sp.Rollback(ctx); rerr != nil {
			return nil, fmt.Errorf("preview of ruleset %s: %w (and its savepoint: %v)", draft.Version, err, rerr)
		}
		return map[string]any{"preview_failed": true}, nil
	}
	if err := sp.Commit(ctx); err != nil { // releases the savepoint: the preview wrote nothing
		return nil, fmt.Errorf("preview savepoint: %w", err)
	}
	// An announcement carries safe metadata only: flat counts (gcos.SafePayloadKeys), for the write action.
	return map[string]any{"affected_groups": rep.AffectedGroups, "changed_groups": rep.ChangedGroups,
		"allow_to_block": rep.Flips.AllowToBlock, "block_to_allow": rep.Flips.BlockToAllow}, nil
}

// children names the first n inherited children of an anchor.
func (p *Previewer) children(ctx context.Context, tx pgx.Tx, anchor gcos.PreviewObject, n int) ([]string, error) {
	rows, err := tx.Query(ctx, p.core.BirthBinding().SQL(`
		SELECT b.{coll} || ':' || b.{code} FROM {t} b WHERE b.{coll} = $1 AND b.{parent} = $2 ORDER BY b.{code} LIMIT $3`),
		anchor.Collection, anchor.Code, n)
	if err != nil {
		return nil, fmt.Errorf("name flipped children: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}
