package postgres

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
)

// The view's answers: the same reads as the database's gate statement, from memory, remembered while nothing
// they rest on moves.

// birthRaw is one birth row as the source holds it, with its fingerprint lanes and when it was read.
type birthRaw struct {
	class, coll, status string
	parent              *string
	h0, h1              int64
	readAt              time.Time
}

// decide answers from the view: a remembered answer while nothing it rests on has moved, else the same reads as
// the database's statement (gateReads), in the same order, as of the view's last catch-up with the database clock
// carried forward, judged as the database's are. ok is false when the view cannot answer within its bound.
func (v *VerdictView) decide(ctx context.Context, ref ObjectRef, action string, atLeast *gcos.ConsistencyToken) (GateResult, gateFollowUps, bool) {
	own, ok := v.birth(ctx, ref)
	if !ok {
		return GateResult{}, gateFollowUps{}, false
	}
	var parent birthRaw
	if own.parent != nil {
		if parent, ok = v.birth(ctx, ObjectRef{Collection: ref.Collection, Code: *own.parent}); !ok {
			return GateResult{}, gateFollowUps{}, false
		}
	}
	slot := 0
	if action == gcos.ActionRead {
		slot = 1
	}
	v.mu.RLock()
	if !v.freshLocked() || (atLeast != nil && !v.token.Covers(*atLeast)) {
		v.mu.RUnlock()
		return GateResult{}, gateFollowUps{}, false
	}
	st, asOf, token, now := v.state, v.dbAsOf, v.snapshot, time.Now().Add(v.offset)
	base := own.base(parent)
	stamp := answerStamp{gen: st.gen, base: st.baseGen[base], object: st.objectGen[ref]}
	if a := v.entry(ref).answers[slot].Load(); a != nil {
		if a.stamp == stamp && now.Before(a.validUntil) && a.own.same(own) && a.parent.same(parent) {
			v.mu.RUnlock()
			v.answered.Add(1)
			res, fu := a.res, a.fu
			res.DecidedAt, res.AsOf, res.Token, fu.answer = now, asOf, token, a
			return res, fu, true
		}
	}
	o, version, fingerprint := st.reads(ref, own, parent, base, now)
	v.mu.RUnlock()
	ctx, cancel := context.WithTimeout(ctx, v.s.cfg.Gate.Timeout.Duration())
	defer cancel()
	o, err := v.s.completeReads(ctx, v.s.gatePool, ref, o, version, fingerprint)
	if err != nil {
		return GateResult{}, gateFollowUps{}, false
	}
	res := GateResult{Object: ref.String(), Action: action, Decision: gcos.GateBlock, Reasons: []string{}, Consulted: []ConsultedRow{},
		AsOf: asOf, Source: SourceView, Token: token}
	res, fu := v.s.judge(ref, action, o, res)
	res.Reasons, res.Consulted = slices.Clip(res.Reasons), slices.Clip(res.Consulted) // shared: an append copies
	a := &rememberedAnswer{stamp: stamp, own: own, parent: parent, validUntil: validUntil(o.reads, now), res: res, fu: fu}
	v.entry(ref).answers[slot].Store(a)
	v.answered.Add(1)
	fu.answer = a
	return res, fu, true
}

// objectEntry is what the view remembers of one object: its birth row and its last answer per action.
type objectEntry struct {
	birth   atomic.Pointer[birthRaw]
	answers [2]atomic.Pointer[rememberedAnswer] // write, read
}

// entry is the object's entry, made when first asked for; past gate.view_objects entries all are forgotten
// (forgetting only costs reads).
func (v *VerdictView) entry(ref ObjectRef) *objectEntry {
	if x, ok := v.objects.Load(ref); ok {
		return x.(*objectEntry)
	}
	x, loaded := v.objects.LoadOrStore(ref, &objectEntry{})
	if !loaded && v.objectCount.Add(1) > int64(v.maxObjects) {
		v.objects.Clear()
		v.objectCount.Store(0)
	}
	return x.(*objectEntry)
}

// answerStamp is what a remembered answer rests on: the view's generation (rulesets, snapshots, exceptions,
// registries), its base's and its object row's.
type answerStamp struct{ gen, base, object uint64 }

// rememberedAnswer is an answer the view gave, valid while its stamp and the births it read are unchanged and the
// clock has not reached the first instant at which a read-time comparison could turn.
type rememberedAnswer struct {
	stamp       answerStamp
	own, parent birthRaw
	validUntil  time.Time
	res         GateResult
	fu          gateFollowUps
	quiet       atomic.Int64 // unix ns until which every follow-up of the answer is done (GateWith)
}

// validUntil is the first instant after now at which the time decay could change the answer: a row's stale_after
// or the expiry of an exception its coverage rests on (gcos.Effective, gcos.ExceptionRow.Holds).
func validUntil(reads []candidateRead, now time.Time) time.Time {
	until := now.Add(24 * time.Hour)
	earlier := func(t *time.Time) {
		if t != nil && now.Before(*t) && t.Before(until) {
			until = *t
		}
	}
	for _, r := range reads {
		earlier(r.row.StaleAfter)
		if r.exception != nil {
			earlier(r.exception.ExpiresAt)
		}
	}
	return until
}

// base is the base group an object with this birth (and its parent's, for an inherited child) belongs to.
func (b birthRaw) base(parent birthRaw) BirthBase {
	if b.parent != nil {
		return BirthBase{Class: parent.class, Coll: parent.coll, Status: parent.status}
	}
	return BirthBase{Class: b.class, Coll: b.coll, Status: b.status}
}

// same reports whether two reads of a birth row hold the same values.
func (b birthRaw) same(c birthRaw) bool {
	return b.class == c.class && b.coll == c.coll && b.status == c.status && b.h0 == c.h0 && b.h1 == c.h1 &&
		(b.parent == nil) == (c.parent == nil) && (b.parent == nil || *b.parent == *c.parent)
}

// reads builds, from the state (under the view's lock), what the database's gate statement reads for the object:
// its object row under the current ruleset, then its base's groups by scope, with the clock now.
func (st *viewState) reads(ref ObjectRef, own, parent birthRaw, base BirthBase, now time.Time) (objectReads, string, *string) {
	o := objectReads{now: now}
	b := &o.birth
	b.Object, b.Class, b.Collection, b.LifecycleStatus = ref.String(), base.Class, base.Coll, base.Status
	b.OwnLifecycleStatus, b.ParentCode, b.ParentFound = own.status, own.parent, own.parent != nil
	b.CollectionRegistered, b.ClassRegistered = st.collections[b.Collection], st.classes[b.Class]
	read := func(source, key, scope, coverageRef string, row gcos.CandidateRow, found bool) candidateRead {
		r := candidateRead{source: source, key: key, scope: scope, activeVersion: st.active}
		if !found {
			return r
		}
		r.row, r.rulesetStatus = row, st.versionStatus
		if at, ok := st.snapshots[row.SnapshotRef]; ok {
			r.snapshotExists, r.snapshotAt = true, &at
		}
		if c, ok := st.coverage[coverageRef]; ok {
			r.recorded, r.coverage = c, c.Outcome
			if c.ExceptionID != nil {
				r.exception = st.exceptions[*c.ExceptionID]
			}
		}
		return r
	}
	if st.version != "" {
		if obj, ok := st.objects[ref.String()]; ok {
			if g, ok := st.groups[obj.group]; ok {
				o.reads = append(o.reads, read(gcos.GateSourceObject, obj.row.GroupKey, g.scope, "object:"+obj.row.GroupKey, obj.row, true))
			}
		}
	}
	keys := st.byBase[base]
	if len(keys) == 0 {
		o.reads = append(o.reads, read(gcos.GateSourceGroup, "", "", "", gcos.CandidateRow{}, false))
	}
	for _, k := range keys {
		row, found := st.states[k]
		o.reads = append(o.reads, read(gcos.GateSourceGroup, k, st.groups[k].scope, k, row, found && st.version != ""))
	}
	return o, st.version, gcos.Str(gcos.FingerprintFromRowHashes(own.h0, own.h1).String())
}

// birth is an object's cached birth row, read (and cached) on a miss. ok is false when it has none, or it could
// not be read, or a catch-up dropped births while it was read (it is then used for no answer).
func (v *VerdictView) birth(ctx context.Context, ref ObjectRef) (birthRaw, bool) {
	e := v.entry(ref)
	if b := e.birth.Load(); b != nil && time.Since(b.readAt) <= v.birthMaxAge {
		return *b, true
	}
	gen, began := v.birthGen.Load(), time.Now()
	ctx, cancel := context.WithTimeout(ctx, v.s.cfg.Gate.Timeout.Duration())
	defer cancel()
	var b birthRaw
	err := v.s.gatePool.QueryRow(ctx, v.s.birthRawSQLText, ref.Collection, ref.Code).Scan(&b.class, &b.coll, &b.status, &b.parent, &b.h0, &b.h1)
	if err != nil {
		if !errors.Is(err, pgx.ErrNoRows) {
			v.s.logger.Debug("gate view: read birth", "object", ref, "err", err)
		}
		return b, false
	}
	b.readAt = began
	if v.birthGen.Load() != gen {
		return b, false
	}
	e.birth.Store(&b)
	return b, true
}

// birthRawSQL reads one birth row as the source holds it, with its fingerprint lanes.
func (b BirthBinding) birthRawSQL() string {
	return b.SQL(`SELECT b.{type}, b.{coll}, b.{status}, b.{parent}, fh.h, hashint8extended(fh.h, 1)
FROM {t} b CROSS JOIN LATERAL (SELECT ` + rowHashExpr + ` AS h) fh
WHERE b.{coll} = $1 AND b.{code} = $2`)
}

// Decide is the gate's decision as the view gives it (reading through when it must), with no follow-up: what a
// comparison of the view with the database reads.
func (v *VerdictView) Decide(ctx context.Context, object, action string) GateResult {
	if v.s.view.Load() != v {
		return GateResult{Object: object, Action: action, Decision: gcos.GateBlock, Reasons: []string{"gate view: not attached to its store"}}
	}
	res, _ := v.s.decide(ctx, object, action, GateOptions{})
	return res
}
