package gate

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
	"gcos/postgres"
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
func (v *VerdictView) decide(ctx context.Context, ref postgres.ObjectRef, action string, atLeast *gcos.ConsistencyToken) (GateResult, gateFollowUps, bool) {
	q := viewQuestion{ref: ref, action: action, entry: v.entry(ref)}
	if !v.births(ctx, &q) {
		return GateResult{}, gateFollowUps{}, false
	}
	v.mu.RLock()
	at, ok := v.instantLocked(atLeast)
	if ok {
		q.readLocked(v, at)
	}
	v.mu.RUnlock()
	if !ok {
		return GateResult{}, gateFollowUps{}, false
	}
	return v.answer(ctx, &q, at)
}

// decideBatch answers every question from one instant of the view: one state, one clock, one token. ok is false
// when the view cannot answer one of them (an object with no birth, a birth it could not read, the bound): the
// batch then reads through whole.
func (v *VerdictView) decideBatch(ctx context.Context, refs []postgres.ObjectRef, actions []string, atLeast *gcos.ConsistencyToken) ([]GateResult, []gateFollowUps, viewInstant, bool) {
	qs := make([]viewQuestion, len(refs))
	for i := range qs {
		qs[i] = viewQuestion{ref: refs[i], action: actions[i], entry: v.entry(refs[i])}
	}
	v.prefetchBirths(ctx, qs)
	for i := range qs {
		if !v.births(ctx, &qs[i]) {
			return nil, nil, viewInstant{}, false
		}
	}
	v.mu.RLock()
	at, ok := v.instantLocked(atLeast)
	if ok {
		for i := range qs {
			qs[i].readLocked(v, at)
		}
	}
	v.mu.RUnlock()
	if !ok {
		return nil, nil, viewInstant{}, false
	}
	res, fus := make([]GateResult, len(qs)), make([]gateFollowUps, len(qs))
	for i := range qs {
		if res[i], fus[i], ok = v.answer(ctx, &qs[i], at); !ok {
			return nil, nil, viewInstant{}, false
		}
	}
	return res, fus, at, true
}

// viewInstant is the state a view answer is read from: the last catch-up's state, its database instant and
// token, and the database clock now.
type viewInstant struct {
	st    *viewState
	asOf  time.Time
	token string
	now   time.Time
}

// instantLocked is the view's present, under its read lock; false when the view is past its bound or has not
// caught up past atLeast.
func (v *VerdictView) instantLocked(atLeast *gcos.ConsistencyToken) (viewInstant, bool) {
	if !v.freshLocked() || (atLeast != nil && !v.token.Covers(*atLeast)) {
		return viewInstant{}, false
	}
	return viewInstant{st: v.state, asOf: v.dbAsOf, token: v.snapshot, now: time.Now().Add(v.offset)}, true
}

// viewQuestion is one question the view answers, as it goes: the births, then (under the lock) a remembered answer
// that still holds or the reads to judge.
type viewQuestion struct {
	ref         postgres.ObjectRef
	action      string
	entry       *objectEntry
	own, parent birthRaw
	stamp       answerStamp
	remembered  *rememberedAnswer
	o           *objectReads // nil while a remembered answer holds
	version     string
	fingerprint *string
}

func (q *viewQuestion) slot() int {
	if q.action == gcos.ActionRead {
		return 1
	}
	return 0
}

// births reads the object's birth and its parent's (cached, or read on a miss); false when the view cannot answer.
func (v *VerdictView) births(ctx context.Context, q *viewQuestion) bool {
	var ok bool
	if q.own, ok = v.birth(ctx, q.ref, q.entry); !ok {
		return false
	}
	if q.own.parent != nil {
		parent := postgres.ObjectRef{Collection: q.ref.Collection, Code: *q.own.parent}
		if q.parent, ok = v.birth(ctx, parent, v.entry(parent)); !ok {
			return false
		}
	}
	return true
}

// readLocked, under the view's read lock, takes the remembered answer when nothing it rests on has moved, else
// the reads at the instant.
func (q *viewQuestion) readLocked(v *VerdictView, at viewInstant) {
	base := q.own.base(q.parent)
	q.stamp = answerStamp{gen: at.st.gen, base: at.st.baseGen[base], object: at.st.objectGen[q.ref]}
	if a := q.entry.answers[q.slot()].Load(); a != nil {
		if a.stamp == q.stamp && at.now.Before(a.validUntil) && a.own.same(q.own) && a.parent.same(q.parent) {
			q.remembered = a
			return
		}
	}
	o, version, fingerprint := at.st.reads(q.ref, q.own, q.parent, base, at.now)
	q.o, q.version, q.fingerprint = &o, version, fingerprint
}

// answer judges a question read under the lock (or returns its remembered answer) and remembers the answer.
func (v *VerdictView) answer(ctx context.Context, q *viewQuestion, at viewInstant) (GateResult, gateFollowUps, bool) {
	if a := q.remembered; a != nil {
		v.answered.Add(1)
		res, fu := a.res, a.fu
		res.DecidedAt, res.AsOf, res.Token, fu.answer = at.now, at.asOf, at.token, a
		return res, fu, true
	}
	ctx, cancel := context.WithTimeout(ctx, v.g.cfg.Gate.Timeout.Duration())
	defer cancel()
	o, err := v.g.completeReads(ctx, v.g.gatePool, q.ref, *q.o, q.version, q.fingerprint)
	if err != nil {
		return GateResult{}, gateFollowUps{}, false
	}
	res := GateResult{Object: q.ref.String(), Action: q.action, Decision: gcos.GateBlock, Reasons: []string{}, Consulted: []ConsultedRow{},
		AsOf: at.asOf, Source: SourceView, Token: at.token}
	res, fu := v.g.judge(q.ref, q.action, o, res)
	res.Reasons, res.Consulted = slices.Clip(res.Reasons), slices.Clip(res.Consulted) // shared: an append copies
	a := &rememberedAnswer{stamp: q.stamp, own: q.own, parent: q.parent, validUntil: validUntil(o.reads, at.now), res: res, fu: fu}
	q.entry.answers[q.slot()].Store(a)
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
func (v *VerdictView) entry(ref postgres.ObjectRef) *objectEntry {
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
func (b birthRaw) base(parent birthRaw) postgres.BirthBase {
	if b.parent != nil {
		return postgres.BirthBase{Class: parent.class, Coll: parent.coll, Status: parent.status}
	}
	return postgres.BirthBase{Class: b.class, Coll: b.coll, Status: b.status}
}

// same reports whether two reads of a birth row hold the same values.
func (b birthRaw) same(c birthRaw) bool {
	return b.class == c.class && b.coll == c.coll && b.status == c.status && b.h0 == c.h0 && b.h1 == c.h1 &&
		(b.parent == nil) == (c.parent == nil) && (b.parent == nil || *b.parent == *c.parent)
}

// reads builds, from the state (under the view's lock), what the database's gate statement reads for the object:
// its object row under the current ruleset, then its base's groups by scope, with the clock now.
func (st *viewState) reads(ref postgres.ObjectRef, own, parent birthRaw, base postgres.BirthBase, now time.Time) (objectReads, string, *string) {
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
func (v *VerdictView) birth(ctx context.Context, ref postgres.ObjectRef, e *objectEntry) (birthRaw, bool) {
	if b := e.birth.Load(); b != nil && time.Since(b.readAt) <= v.birthMaxAge {
		return *b, true
	}
	gen, began := v.birthGen.Load(), time.Now()
	ctx, cancel := context.WithTimeout(ctx, v.g.cfg.Gate.Timeout.Duration())
	defer cancel()
	var b birthRaw
	err := v.g.gatePool.QueryRow(ctx, v.g.birthRawSQLText, ref.Collection, ref.Code).Scan(&b.class, &b.coll, &b.status, &b.parent, &b.h0, &b.h1)
	if err != nil {
		if !errors.Is(err, pgx.ErrNoRows) {
			v.g.logger.Debug("gate view: read birth", "object", ref, "err", err)
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

// prefetchBirths reads, in one round trip, the births of a batch's objects the view does not hold, then their
// parents': a batch's objects are often asked for the first time, and one read each would cost a round trip each.
// What cannot be read is left to birth, which reads (and fails) one by one.
func (v *VerdictView) prefetchBirths(ctx context.Context, qs []viewQuestion) {
	stale := func(e *objectEntry) bool {
		b := e.birth.Load()
		return b == nil || time.Since(b.readAt) > v.birthMaxAge
	}
	var missing []postgres.ObjectRef
	seen := map[postgres.ObjectRef]bool{}
	for i := range qs {
		if stale(qs[i].entry) && !seen[qs[i].ref] {
			seen[qs[i].ref] = true
			missing = append(missing, qs[i].ref)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, v.g.cfg.Gate.Timeout.Duration())
	defer cancel()
	parents := v.readBirths(ctx, missing)
	missing = missing[:0:0]
	for _, p := range parents {
		if stale(v.entry(p)) && !seen[p] {
			seen[p] = true
			missing = append(missing, p)
		}
	}
	v.readBirths(ctx, missing)
}

// readBirths reads refs' births in one round trip and caches those it finds; it returns the parents they name.
func (v *VerdictView) readBirths(ctx context.Context, refs []postgres.ObjectRef) []postgres.ObjectRef {
	if len(refs) < 2 {
		return nil // one is read by birth as it is
	}
	gen, began := v.birthGen.Load(), time.Now()
	b := &pgx.Batch{}
	births := make([]*birthRaw, len(refs))
	for i, ref := range refs {
		b.Queue(v.g.birthRawSQLText, ref.Collection, ref.Code).QueryRow(func(row pgx.Row) error {
			var r birthRaw
			if err := row.Scan(&r.class, &r.coll, &r.status, &r.parent, &r.h0, &r.h1); err != nil {
				if errors.Is(err, pgx.ErrNoRows) {
					return nil // no birth: birth says so when asked
				}
				return err
			}
			births[i] = &r
			return nil
		})
	}
	if err := v.g.gatePool.SendBatch(ctx, b).Close(); err != nil {
		v.g.logger.Debug("gate view: read births", "objects", len(refs), "err", err)
		return nil
	}
	if v.birthGen.Load() != gen {
		return nil // a catch-up dropped births while they were read: cache none (as birth does)
	}
	var parents []postgres.ObjectRef
	for i, r := range births {
		if r == nil {
			continue
		}
		r.readAt = began
		v.entry(refs[i]).birth.Store(r)
		if r.parent != nil {
			parents = append(parents, postgres.ObjectRef{Collection: refs[i].Collection, Code: *r.parent})
		}
	}
	return parents
}

// birthRawSQL reads one birth row as the source holds it, with its fingerprint lanes.
func birthRawSQL(b postgres.BirthBinding) string {
	return b.SQL(`SELECT b.{type}, b.{coll}, b.{status}, b.{parent}, fh.h, hashint8extended(fh.h, 1)
FROM {t} b CROSS JOIN LATERAL (SELECT ` + postgres.RowHashExpr + ` AS h) fh
WHERE b.{coll} = $1 AND b.{code} = $2`)
}

// Decide is the gate's decision as the view gives it (reading through when it must), with no follow-up: what a
// comparison of the view with the database reads.
func (v *VerdictView) Decide(ctx context.Context, object, action string) GateResult {
	if v.g.view.Load() != v {
		return GateResult{Object: object, Action: action, Decision: gcos.GateBlock, Reasons: []string{"gate view: not attached to its store"}}
	}
	res, _ := v.g.decide(ctx, object, action, GateOptions{})
	return res
}
