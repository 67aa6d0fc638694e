package gate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
	"gcos/postgres"
)

// GateResult is the gate's full answer for one object and action.
type GateResult struct {
	Object           string         `json:"object"`
	Action           string         `json:"action"`
	Decision         string         `json:"decision"`
	EffectiveVerdict gcos.Verdict   `json:"effective_verdict"`
	RiskClass        string         `json:"risk_class"`
	Reasons          []string       `json:"reasons"`
	RescanScheduled  bool           `json:"rescan_scheduled"`
	Statement        string         `json:"statement"`
	Consulted        []ConsultedRow `json:"consulted"`
	DecidedAt        time.Time      `json:"decided_at,omitzero"` // zero (omitted) when nothing was decided
	// AsOf is the instant of the database state the decision was read from (the view's last catch-up, or the
	// read-through's own read); Source says which: view or database (empty when nothing could be read).
	AsOf   time.Time `json:"as_of,omitzero"`
	Source string    `json:"source"`
	// Token is the consistency token of the state the decision was read from: pass it as at_least to a later
	// question that must see at least that state.
	Token string `json:"token,omitempty"`
	// Rescanned says the decision was taken on verdicts the gate had re-scanned for it, synchronously: the first
	// read found them stale (SPEC §12).
	Rescanned bool `json:"rescanned,omitempty"`
	// Refused is set when the question itself is bad input (EINVALID: a token the database has not issued): the
	// answer blocks, and a caller reports the error as bad input (HTTP 400, exit 2).
	Refused error `json:"-"`
}

// Consistency levels a caller may ask the gate for (SPEC §12 freshness).
const (
	// ConsistencyMinimizeLatency answers from the view while it is within gate.max_staleness, else reads through.
	ConsistencyMinimizeLatency = "minimize_latency"
	// ConsistencyFull always reads the database.
	ConsistencyFull = "full"
)

// Consistencies are the consistency levels the gate accepts.
var Consistencies = []string{ConsistencyMinimizeLatency, ConsistencyFull}

// GateOptions qualify one gate question.
type GateOptions struct {
	Consistency string // "" is ConsistencyMinimizeLatency
	// AtLeast is a consistency token (a write's, or an earlier answer's): the decision reads at least the state it
	// names and every source write committed before the question (settle), from the view when the view has caught
	// up past that, else from the database.
	AtLeast string
	// settled: the question was settled already (a second decision after a synchronous re-scan), or must not wait
	// (Decide, which compares the state as it is).
	settled bool
}

// fresh reports whether the question must first wait for the intake (settle).
func (opt GateOptions) fresh() bool {
	return !opt.settled && (opt.AtLeast != "" || opt.Consistency == ConsistencyFull)
}

// parse checks the options and parses the token a caller demands (nil when none).
func (opt GateOptions) parse() (*gcos.ConsistencyToken, error) {
	if opt.Consistency != "" && opt.Consistency != ConsistencyMinimizeLatency && opt.Consistency != ConsistencyFull {
		return nil, gcos.Errorf(gcos.EINVALID, "consistency %s is not one of %s", gcos.Quote(opt.Consistency), strings.Join(Consistencies, ", "))
	}
	if opt.AtLeast == "" {
		return nil, nil
	}
	t, err := gcos.ParseConsistencyToken(opt.AtLeast)
	if err != nil {
		return nil, err
	}
	return &t, nil
}

// ConsultedRow is one candidate row the gate read (an object row, or the object's group in each scope).
type ConsultedRow struct {
	Source    string `json:"source"` // object | group
	Key       string `json:"key"`
	Scope     string `json:"scope,omitempty"`
	Decision  string `json:"decision"`
	Statement string `json:"statement"`
}

// candidateRead is one row read for the gate or explain, with what decay needs.
type candidateRead struct {
	source         string
	key, scope     string
	row            gcos.CandidateRow
	rulesetStatus  string
	activeVersion  string
	snapshotExists bool
	snapshotAt     *time.Time
	recorded       gcos.CoverageRecord  // the coverage its scan recorded, with the exception's terms
	exception      *gcos.ExceptionRow   // the recorded exception's row in the registry now (nil: gone or none)
	coverage       gcos.CoverageOutcome // the coverage in force when read ("" when no outcome is recorded)
	lift           *gcos.ExceptionLift  // the exception recorded but no longer counted, if any
}

// coverageAt sets the coverage in force at now: a recorded exception counts only while the registry's current row
// holds on this row (gcos.CoverageRecord.At). class and registry are the row's group's; object is the object of an
// object row ("" for a group row) and fingerprint its fingerprint now.
func (r *candidateRead) coverageAt(now time.Time, class, registry, object string, fingerprint *string) {
	t := gcos.ExceptionTarget{Scope: r.scope, Class: class, Registry: registry}
	if r.source == gcos.GateSourceObject {
		t.Object = object
	} else {
		fingerprint = nil // a group's exception pins no object
	}
	r.coverage, r.lift = r.recorded.At(now, r.exception, t, fingerprint)
}

// gateSQL reads, in one statement (one round trip, one consistent snapshot), everything the gate judges an object
// on: its materialized row under the current ruleset when there is one, and its base group (its anchor's, for an
// inherited child) in every scope, each with its row and coverage record under the current ruleset when there is
// one; the current ruleset's version (whose scopes say which groups must be there); and the object's own birth
// values (status, parent, whether its collection and class are registered) and fingerprint, which exceptions and
// the input checks are judged on now. An object with no birth yields no row.
func gateSQL(b postgres.BirthBinding) string {
	return b.SQL(`
WITH cr AS (SELECT ruleset_version FROM v_current_ruleset),
active AS (SELECT coalesce((SELECT ruleset_version FROM governance_ruleset WHERE status = 'active'), '') AS v),
objrow AS (
    SELECT 'object'::text AS source, o.candidate_key AS key, 'object:' || o.candidate_key AS coverage_ref,
           coalesce(g.scope, '') AS scope, o.source_snapshot_ref,
           o.ruleset_version, o.scan_time, o.candidate_verdict, o.input_quality_state, o.dirty, o.dirty_reason,
           o.stale_after, o.recompute_status, o.risk_class, o.coverage_required, o.coverage_scan_ref, o.owner_scope,
           o.lifecycle_status, 1::bigint AS member_count
    FROM governance_candidate_object o
    JOIN cr ON cr.ruleset_version = o.ruleset_version
    JOIN governance_group g ON g.group_key = o.group_key
    WHERE o.object_ref = $1 || ':' || $2 AND o.lifecycle_status = 'active'
),
obj AS (
    SELECT coalesce(p.{type}, b.{type}) AS cls, coalesce(p.{coll}, b.{coll}) AS reg, coalesce(p.{status}, b.{status}) AS st,
           b.{status} AS own_st, b.{parent} AS parent_code, p.{code} IS NOT NULL AS parent_found,
           fh.h, hashint8extended(fh.h, 1) AS h1,
           EXISTS (SELECT 1 FROM collection_registry c WHERE c.collection_name = coalesce(p.{coll}, b.{coll})) AS coll_known,
           EXISTS (SELECT 1 FROM meta_catalog m WHERE m.entity_type = coalesce(p.{type}, b.{type})) AS class_known
    FROM {t} b
    CROSS JOIN LATERAL (SELECT ` + postgres.RowHashExpr + ` AS h) fh
    LEFT JOIN {t} p ON b.{parent} IS NOT NULL AND p.{coll} = b.{coll} AND p.{code} = b.{parent}
    WHERE b.{coll} = $1 AND b.{code} = $2
),
grprow AS (
    SELECT 'group'::text AS source, g.group_key AS key, g.group_key AS coverage_ref, coalesce(g.scope, '') AS scope,
           c.source_snapshot_ref,
           c.ruleset_version, c.scan_time, c.candidate_verdict, c.input_quality_state, c.dirty, c.dirty_reason,
           c.stale_after, c.recompute_status, c.risk_class, c.coverage_required, c.coverage_scan_ref, c.owner_scope,
           c.lifecycle_status, c.member_count
    FROM obj
    LEFT JOIN governance_group g ON g.object_class = obj.cls AND g.source_registry = obj.reg AND g.lifecycle_status = obj.st
                                 AND g.retired_at IS NULL -- a retired group's members are in its successor
    LEFT JOIN governance_candidate_state c ON c.group_key = g.group_key AND c.ruleset_version = (SELECT ruleset_version FROM cr)
)
SELECT x.source, now(), pg_current_snapshot()::text, coalesce((SELECT ruleset_version FROM cr), ''),
       obj.cls, obj.reg, obj.st, obj.own_st, obj.parent_code, obj.parent_found, obj.coll_known,
       obj.class_known, obj.h, obj.h1,
       x.key, x.scope, x.source_snapshot_ref,
       x.ruleset_version, x.scan_time, x.candidate_verdict,
       x.input_quality_state, x.dirty, x.dirty_reason, x.stale_after, x.recompute_status, x.risk_class,
       x.coverage_required, x.coverage_scan_ref, x.owner_scope, x.lifecycle_status, x.member_count,
       r.status, (SELECT v FROM active), s.id IS NOT NULL, s.snapshot_at,
       cov.outcome, cov.owner_ref, cov.exception_id, cov.exception_expires_at, cov.exception_fingerprint,
       gcos_exception_row(cov.exception_id) -- the registry's current terms decide, not the recorded ones
FROM obj
CROSS JOIN (SELECT * FROM objrow UNION ALL SELECT * FROM grprow) x
LEFT JOIN governance_ruleset r ON r.ruleset_version = x.ruleset_version
LEFT JOIN evolution_snapshots s ON s.id = x.source_snapshot_ref
LEFT JOIN governance_candidate_coverage cov ON cov.candidate_ref = x.coverage_ref AND cov.ruleset_version = x.ruleset_version
ORDER BY x.source <> 'object', x.scope, x.key -- the object row first, then the groups by scope`)
}

// scanCandidateFrom reads a row that starts with the given leading columns, then the common ones.
func scanCandidateFrom(rows pgx.Rows, lead ...any) (candidateRead, bool, error) {
	return scanCandidateLead(rows, "", lead, nil)
}

// scanCandidate reads the common columns; found is false when the LEFT JOIN produced no candidate row.
func scanCandidate(rows pgx.Rows, source string, extra ...any) (candidateRead, bool, error) {
	return scanCandidateLead(rows, source, nil, extra)
}

func scanCandidateLead(rows pgx.Rows, source string, lead, extra []any) (candidateRead, bool, error) {
	var cr candidateRead
	var snapRef *int64
	var ruleset, verdict, recompute, risk, lifecycle, rsStatus *string
	var scanTime *time.Time
	var dirty, required *bool
	var members *int64
	var key, coverage *string
	var exception []byte
	rec := &cr.recorded
	dest := []any{&key, &cr.scope, &snapRef, &ruleset, &scanTime, &verdict, &cr.row.InputQualityState, &dirty,
		&cr.row.DirtyReason, &cr.row.StaleAfter, &recompute, &risk, &required, &cr.row.CoverageScanRef,
		&cr.row.OwnerScope, &lifecycle, &members, &rsStatus, &cr.activeVersion, &cr.snapshotExists, &cr.snapshotAt,
		&coverage, &rec.Owner, &rec.ExceptionID, &rec.ExceptionExpiresAt, &rec.ExceptionFingerprint, &exception}
	if err := rows.Scan(append(append(lead, dest...), extra...)...); err != nil {
		return cr, false, err
	}
	cr.source = source
	if exception != nil {
		var x gcos.ExceptionRow
		if err := json.Unmarshal(exception, &x); err != nil {
			return cr, false, fmt.Errorf("read exception %s: %w", postgres.Deref(rec.ExceptionID), err)
		}
		cr.exception = &x
	}
	if key != nil {
		cr.key = *key
	}
	if coverage != nil {
		rec.Outcome = gcos.CoverageOutcome(*coverage)
		cr.coverage = rec.Outcome
	}
	if verdict == nil {
		return cr, false, nil
	}
	cr.row = gcos.CandidateRow{GroupKey: cr.key, SnapshotRef: *snapRef, RulesetVersion: *ruleset, ScanTime: *scanTime,
		Verdict: gcos.Verdict(*verdict), InputQualityState: cr.row.InputQualityState, Dirty: *dirty,
		DirtyReason: cr.row.DirtyReason, StaleAfter: cr.row.StaleAfter, RecomputeStatus: *recompute, RiskClass: *risk,
		CoverageRequired: *required, CoverageScanRef: cr.row.CoverageScanRef, OwnerScope: cr.row.OwnerScope,
		LifecycleStatus: *lifecycle, MemberCount: *members}
	cr.rulesetStatus = *rsStatus
	return cr, true, nil
}

// Gate answers "may this action proceed on this object?" (SPEC §12). It fails closed: an unknown object, a group
// never seeded, a scope with no group, a stale or unknown high-risk verdict, a high-risk orphan, an internal error,
// a timeout or an unreachable database all block. The object is judged on the worst of its materialized row (if
// any) and its group in every scope (gcos.GateObject). A low-risk stale verdict allows and dirties the row for a
// re-scan; a blocked orphan raises coverage_orphan naming its group.
func (g *Gate) Gate(ctx context.Context, object, action string) GateResult {
	return g.GateWith(ctx, object, action, GateOptions{})
}

// GateWith is Gate at the consistency the caller asks for.
func (g *Gate) GateWith(ctx context.Context, object, action string, opt GateOptions) GateResult {
	res, fu := g.decide(ctx, object, action, opt)
	if len(fu.sync) > 0 && g.rescanNow(ctx, fu.sync) {
		// The re-scan committed: the database has its verdicts (the view catches up a moment later).
		res, fu = g.decide(ctx, object, action, GateOptions{Consistency: ConsistencyFull, settled: true})
		res.Rescanned = true
	}
	if fu.empty() {
		return res
	}
	// A remembered answer knows until when its follow-ups were all done: no need to ask the log again.
	if a := fu.answer; a != nil && time.Now().UnixNano() < a.quiet.Load() {
		res.RescanScheduled = res.RescanScheduled || len(fu.rescan) > 0
		return res
	}
	// Follow-ups are best effort and never change the decision already taken.
	if err := g.gateFollowUp(context.WithoutCancel(ctx), fu); err != nil {
		g.logger.Warn("gate: follow up", "object", object, "err", err)
		return res
	}
	res.RescanScheduled = res.RescanScheduled || len(fu.rescan) > 0
	if a := fu.answer; a != nil {
		if u := g.followUps.quietUntil(fu); !u.IsZero() {
			a.quiet.Store(u.UnixNano())
		}
	}
	return res
}

// Decide is the gate's decision with no follow-up: it schedules no re-scan and raises no finding, so a reader
// that compares decisions (gcos verify) leaves the state it compares as it found it.
func (g *Gate) Decide(ctx context.Context, object, action string) GateResult {
	res, _ := g.decide(ctx, object, action, GateOptions{Consistency: ConsistencyFull, settled: true})
	return res
}

// View is the gate's verdict view (nil when gate.view is off).
func (g *Gate) View() *VerdictView { return g.view.Load() }

// decide takes the gate's decision and lists its follow-ups, every database read within gate.timeout.
func (g *Gate) decide(ctx context.Context, object, action string, opt GateOptions) (GateResult, gateFollowUps) {
	var fu gateFollowUps
	res := GateResult{Object: object, Action: action, Decision: gcos.GateBlock, Reasons: []string{}, Consulted: []ConsultedRow{}}
	ref, err := postgres.ParseObjectRef(object)
	if err != nil {
		res.Reasons = append(res.Reasons, gcos.ErrorMessage(err))
		return res, fu
	}
	if action != gcos.ActionWrite && action != gcos.ActionRead {
		res.Reasons = append(res.Reasons, fmt.Sprintf("action %q is not one of write, read", action))
		return res, fu
	}
	atLeast, err := opt.parse()
	if err != nil {
		res.Reasons = append(res.Reasons, gcos.ErrorMessage(err))
		res.Refused = err
		return res, fu
	}
	if opt.fresh() {
		if atLeast, err = g.settle(ctx, atLeast); err != nil {
			return settleFailed(res, err), fu
		}
	}
	if v := g.view.Load(); v != nil && opt.Consistency != ConsistencyFull {
		if res, fu, ok := v.decide(ctx, ref, action, atLeast); ok {
			return res, fu
		}
		v.readThrough.Add(1)
	}
	ctx, cancel := context.WithTimeout(ctx, g.cfg.Gate.Timeout.Duration())
	defer cancel()
	pool, source := g.gateReadPool(opt.Consistency == ConsistencyFull)
	o, err := g.gateInputs(ctx, pool, ref)
	if err != nil && source == SourceReplica && ctx.Err() == nil {
		g.replicaFailed(err)
		source = SourceDatabase
		o, err = g.gateInputs(ctx, g.gatePool, ref)
	}
	if err != nil {
		d := gcos.GateObject(gcos.ObjectGateInput{Action: action, Err: g.gateReadFailed("object "+object, err)})
		res.Reasons = d.Reasons
		return res, fu
	}
	g.gateOutage.succeeded()
	res.AsOf, res.Source, res.Token = o.now, source, o.token
	return g.judge(ref, action, o, res)
}

// gateReadFailed is what a failed gate read says (what names the read, for the log): a timeout is the gate's own,
// and a driver error is logged once per outage and shown as unreadable state, never in its own words.
func (g *Gate) gateReadFailed(what string, err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return gcos.Errorf(gcos.EUNAVAILABLE, "no answer within %s", g.cfg.Gate.Timeout.Duration())
	}
	if gcos.ErrorCode(err) == gcos.EINTERNAL {
		g.gateOutage.failed(fmt.Errorf("%s: %w", what, err))
		return gcos.Errorf(gcos.EUNAVAILABLE, "candidate state unreadable")
	}
	return err
}

// gateOutage logs the gate's failed reads once per outage, with a reminder now and then, and the recovery: a
// pipeline asking hundreds of times a second through an outage must not write a line per answer.
type gateOutage struct {
	mu   sync.Mutex
	log  *gcos.OutageLog
	down atomic.Bool
}

func (g *gateOutage) failed(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.down.Store(true)
	g.log.Failed(err)
}

func (g *gateOutage) succeeded() {
	if !g.down.Load() {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.down.Store(false)
	g.log.Succeeded()
}

// objectReads is everything read for one object's gate decision or explanation.
type objectReads struct {
	reads       []candidateRead // the object row first, then its groups by scope; none when the object has no birth
	now         time.Time       // the database clock of the read
	token       string          // the read's snapshot, as a consistency token
	scopes      []string        // the current ruleset's scopes (nil before anything was backfilled)
	birth       gcos.ObjectBirth
	fingerprint *string             // the object's fingerprint now (what an exception on it pins)
	problems    []gcos.InputProblem // input values no verdict can rest on (VerdictPolicy.CheckObject)
}

// gateInputs reads, in one statement, the object's birth, its materialized row and its group in every scope, and
// derives the coverage in force now, the current ruleset's scopes (decoded once per version) and the object's
// input problems under that ruleset's policy.
func (g *Gate) gateInputs(ctx context.Context, q postgres.Querier, ref postgres.ObjectRef) (objectReads, error) {
	o, version, fingerprint, err := g.gateReads(ctx, q, ref)
	if err != nil || len(o.reads) == 0 {
		return o, err
	}
	return g.completeReads(ctx, q, ref, o, version, fingerprint)
}

// completeReads derives, from an object's reads, the coverage in force now, the current ruleset's scopes and the
// object's input problems: the same for the database's reads and the view's.
func (g *Gate) completeReads(ctx context.Context, q postgres.Querier, ref postgres.ObjectRef, o objectReads, version string, fingerprint *string) (objectReads, error) {
	o.fingerprint = fingerprint
	for i := range o.reads {
		o.reads[i].coverageAt(o.now, o.birth.Class, o.birth.Collection, ref.String(), fingerprint)
	}
	if version == "" {
		return o, nil // nothing was ever backfilled: every row reads as never seeded and blocks
	}
	rs, err := g.core.RulesetVersionVia(ctx, q, version)
	if err != nil {
		return o, err
	}
	o.scopes = rs.Components.ScopeCodes()
	var risks []string
	for _, r := range o.reads {
		if r.found() {
			risks = append(risks, r.row.RiskClass)
		}
	}
	o.problems = rs.Components.Policy.CheckObject(o.birth, risks)
	return o, nil
}

// gateReads reads the object's birth, its materialized row and its groups in one statement, with the clock, the
// current ruleset version and the object's fingerprint.
func (g *Gate) gateReads(ctx context.Context, q postgres.Querier, ref postgres.ObjectRef) (objectReads, string, *string, error) {
	rows, err := q.Query(ctx, g.gateSQLText, ref.Collection, ref.Code)
	if err != nil {
		return objectReads{}, "", nil, err
	}
	o, version, fingerprint, err := gateReadsFrom(rows, ref)
	if err != nil || len(o.reads) > 0 {
		return o, version, fingerprint, err
	}
	// No row: the object has no birth. Read the clock for the decision time.
	if err := q.QueryRow(ctx, `SELECT now(), pg_current_snapshot()::text`).Scan(&o.now, &o.token); err != nil {
		return o, "", nil, err
	}
	return o, "", nil, nil
}

// gateReadsFrom reads the gate statement's rows (and closes them). An object with no birth has no row: its reads
// are empty, with no clock.
func gateReadsFrom(rows pgx.Rows, ref postgres.ObjectRef) (objectReads, string, *string, error) {
	var o objectReads
	defer rows.Close()
	var version string
	var h0, h1 int64
	b := &o.birth
	b.Object = ref.String()
	for rows.Next() {
		var source string
		r, _, err := scanCandidateFrom(rows, &source, &o.now, &o.token, &version, &b.Class, &b.Collection, &b.LifecycleStatus,
			&b.OwnLifecycleStatus, &b.ParentCode, &b.ParentFound, &b.CollectionRegistered, &b.ClassRegistered,
			&h0, &h1)
		if err != nil {
			return o, "", nil, err
		}
		r.source = source
		o.reads = append(o.reads, r)
	}
	if err := rows.Err(); err != nil {
		return o, "", nil, err
	}
	if len(o.reads) == 0 {
		return o, "", nil, nil
	}
	return o, version, gcos.Str(gcos.FingerprintFromRowHashes(h0, h1).String()), nil
}

// gateFollowUps is what a gate answer leaves to do: groups to re-scan, and findings to raise.
type gateFollowUps struct {
	rescan, unknown []string
	sync            []string // groups to re-scan before answering, when a re-scan could turn the block (syncRescan)
	orphans         []orphanFollowUp
	lifts           []liftFollowUp
	inputs          []inputFollowUp
	answer          *rememberedAnswer // the view's remembered answer they came with (nil: none)
}

// liftFollowUp is an exception a row's coverage was recorded under that no longer counts.
type liftFollowUp struct {
	lift                 gcos.ExceptionLift
	object, ruleset, log string // log: what the follow-up log knows it by
}

// inputFollowUp is an input value of the object no verdict can rest on.
type inputFollowUp struct {
	problem     gcos.InputProblem
	object, log string // log: what the follow-up log knows it by
}

// subject is what the input finding is coalesced on: the object for its own missing parent (an open input
// finding on an object holds it as needs_input, SPEC §7), else the value, so a thousand births with one odd status
// are one finding.
func (f inputFollowUp) subject() string {
	if f.problem.Field == "parent_code" {
		return f.object
	}
	return f.problem.Field + "=" + f.problem.Value
}

// orphanFollowUp is a blocked high-risk orphan: the row (a group, or an object row) with no owner in its scope, and
// the verdict that found it so (its scan time and validity).
type orphanFollowUp struct {
	key, source, scope, ruleset, object string
	log                                 string // logKey, computed once
	verdictAt                           time.Time
	validUntil                          *time.Time
}

// logKey names the verdict the orphan was raised for: one raise per verdict, however often the gate is asked.
func (o orphanFollowUp) logKey() string {
	return o.key + "@" + o.verdictAt.UTC().Format(time.RFC3339Nano)
}

func (f gateFollowUps) empty() bool {
	return len(f.rescan) == 0 && len(f.unknown) == 0 && len(f.orphans) == 0 && len(f.lifts) == 0 && len(f.inputs) == 0
}

// gateFollowUp dirties stale low-risk groups for a re-scan (reason ttl), raises candidate_unknown and
// coverage_orphan. A busy caller asking about the same objects must not turn every blocked read into a write (the
// mark is idempotent and the findings coalesced anyway): a re-scan or an unknown is followed up once per coalesce
// window, an orphan once per verdict (until the row is re-scanned or expires, it is the same orphan).
func (g *Gate) gateFollowUp(ctx context.Context, f gateFollowUps) error {
	claim := g.cfg.Gate.Timeout.Duration() // the write's own bound: a claim outlives no writer
	rescan, unknown := g.followUps.due("rescan", f.rescan, claim), g.followUps.due("unknown", f.unknown, claim)
	var orphans []orphanFollowUp
	for _, o := range f.orphans {
		if g.followUps.dueOne("orphan", o.log, claim) {
			orphans = append(orphans, o)
		}
	}
	var lifts []liftFollowUp
	for _, l := range f.lifts {
		if g.followUps.dueOne("lift", l.log, claim) {
			lifts = append(lifts, l)
		}
	}
	var inputs []inputFollowUp
	for _, in := range f.inputs {
		if g.followUps.dueOne("input", in.log, claim) {
			inputs = append(inputs, in)
		}
	}
	if len(rescan) == 0 && len(unknown) == 0 && len(orphans) == 0 && len(lifts) == 0 && len(inputs) == 0 {
		return nil
	}
	// On the gate's own pool: the follow-ups must not wait for the connections scans and readers hold.
	err := pgx.BeginFunc(ctx, g.gatePool, func(tx pgx.Tx) error {
		if _, err := postgres.MarkKeysDirtyTx(ctx, tx, rescan, gcos.DirtyTTL); err != nil {
			return err
		}
		// Every finding this transaction raises, built first so that the rows they link are locked before any
		// finding's key (LockOrder).
		var raise []gcos.Finding
		for _, key := range unknown {
			raise = append(raise, gcos.Finding{Type: gcos.IssueCandidateUnknown, Subject: key, Group: key,
				Evidence: map[string]any{"group_key": key, "raised_by": "gate"}})
		}
		for _, o := range orphans {
			subject, evidence := o.key, map[string]any{"group_key": o.key, "scope": o.scope, "object": o.object, "raised_by": "gate"}
			if o.source == gcos.GateSourceObject {
				subject = "object:" + o.key
				evidence = map[string]any{"candidate_key": o.key, "scope": o.scope, "object": o.object, "raised_by": "gate"}
			}
			f := gcos.NewFinding(gcos.IssueCoverageOrphan, subject, "", o.ruleset, evidence)
			if o.source == gcos.GateSourceObject {
				f.Object = o.key
			} else {
				f.Group = o.key
			}
			raise = append(raise, f)
		}
		for _, in := range inputs {
			p := in.problem
			f := gcos.NewFinding(gcos.InputIssue(p.State), in.subject(), "", "", map[string]any{
				"object": in.object, "field": p.Field, "value": p.Value, "reason": p.Reason, "raised_by": "gate"})
			if in.subject() == in.object {
				f.Object = in.object // the object's own row, when it has one
			}
			raise = append(raise, f)
		}
		if err := postgres.LockFindingLinksTx(ctx, tx, raise); err != nil {
			return err
		}
		for _, f := range raise {
			if _, err := postgres.RaiseFindingTx(ctx, tx, f); err != nil {
				return err
			}
		}
		for _, l := range lifts {
			if err := postgres.RaiseExceptionLiftedTx(ctx, tx, l.lift, l.object, l.ruleset, "", "gate"); err != nil {
				return err
			}
		}
		return nil
	})
	g.core.NoteConflict(err)
	if err == nil {
		window := g.cfg.CoalesceWindow.Duration()
		g.followUps.done("rescan", rescan, window)
		g.followUps.done("unknown", unknown, window)
		for _, o := range orphans {
			until := time.Now().Add(window)
			if o.validUntil != nil && o.validUntil.After(until) {
				until = *o.validUntil
			}
			g.followUps.doneUntil("orphan", o.log, until)
		}
		// A lifted exception stays lifted and an odd value stays odd until someone acts: say so once per window.
		for _, l := range lifts {
			g.followUps.done("lift", []string{l.log}, window)
		}
		for _, in := range inputs {
			g.followUps.done("input", []string{in.log}, window)
		}
		return nil
	}
	// Failed: the next question tries again.
	g.followUps.release("rescan", rescan)
	g.followUps.release("unknown", unknown)
	for _, o := range orphans {
		g.followUps.release("orphan", []string{o.log})
	}
	for _, l := range lifts {
		g.followUps.release("lift", []string{l.log})
	}
	for _, in := range inputs {
		g.followUps.release("input", []string{in.log})
	}
	return err
}

// followUpLog remembers until when each group's gate follow-up needs no repeat.
type followUpLog struct {
	mu    sync.Mutex
	until map[followUpKey]time.Time
}

// followUpKey names one follow-up: its kind and the group, verdict or value it is about.
type followUpKey struct{ kind, key string }

// due returns the keys whose follow-up is due, each once, and claims them for claim: a concurrent question skips
// a follow-up another is writing instead of writing it again behind that writer's row lock (a batch asks about
// many objects of one group at once). The writer then records the outcome: done, or release when it failed.
func (l *followUpLog) due(kind string, keys []string, claim time.Duration) []string {
	if len(keys) == 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	var out []string
	for _, k := range keys {
		if now.After(l.until[followUpKey{kind, k}]) {
			out = append(out, k)
			l.setLocked(followUpKey{kind, k}, now.Add(claim))
		}
	}
	return out
}

// release makes claimed follow-ups due again (their write failed).
func (l *followUpLog) release(kind string, keys []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range keys {
		delete(l.until, followUpKey{kind, k})
	}
}

// setLocked records until for key, under l.mu.
func (l *followUpLog) setLocked(key followUpKey, until time.Time) {
	if l.until == nil || len(l.until) > 100_000 {
		l.until = map[followUpKey]time.Time{} // bounded: forgetting only costs a repeated idempotent write
	}
	l.until[key] = until
}

// quietUntil is the first instant at which one of f's follow-ups is due again.
func (l *followUpLog) quietUntil(f gateFollowUps) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	var until time.Time
	first := true
	see := func(kind, key string) {
		if u := l.until[followUpKey{kind, key}]; first || u.Before(until) {
			until, first = u, false
		}
	}
	for _, k := range f.rescan {
		see("rescan", k)
	}
	for _, k := range f.unknown {
		see("unknown", k)
	}
	for _, o := range f.orphans {
		see("orphan", o.log)
	}
	for _, x := range f.lifts {
		see("lift", x.log)
	}
	for _, x := range f.inputs {
		see("input", x.log)
	}
	return until
}

// dueOne reports whether one follow-up is due, and claims it when it is (due).
func (l *followUpLog) dueOne(kind, key string, claim time.Duration) bool {
	return len(l.due(kind, []string{key}, claim)) == 1
}

// done records follow-ups as needing no repeat for window.
func (l *followUpLog) done(kind string, keys []string, window time.Duration) {
	if window <= 0 {
		l.release(kind, keys) // no window: due again at once
		return
	}
	until := time.Now().Add(window)
	for _, k := range keys {
		l.doneUntil(kind, k, until)
	}
}

// doneUntil records one follow-up as needing no repeat until the given time.
func (l *followUpLog) doneUntil(kind, key string, until time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.setLocked(followUpKey{kind, key}, until)
}

// gateReadySQL: an active ruleset, and candidate rows seeded under it. Without them every answer is a block.
const gateReadySQL = `
	SELECT r.ruleset_version,
	       EXISTS (SELECT 1 FROM governance_candidate_state c WHERE c.ruleset_version = r.ruleset_version)
	FROM governance_ruleset r WHERE r.status = 'active'`

// Ready reports, through the gate's own pool, whether the gate can give answers other than block: its
// connections reach the database, a ruleset is active and candidate rows are seeded under it.
func (g *Gate) Ready(ctx context.Context) error {
	var version string
	var seeded bool
	err := g.gatePool.QueryRow(ctx, gateReadySQL).Scan(&version, &seeded)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return gcos.Errorf(gcos.EUNAVAILABLE, "no ruleset is active: every answer would be a block")
	case err != nil:
		g.logger.Debug("gate readiness", "err", err)
		return gcos.Errorf(gcos.EUNAVAILABLE, "the gate's connections cannot read the candidate state")
	case !seeded:
		return gcos.Errorf(gcos.EUNAVAILABLE, "no candidate rows are seeded under the active ruleset %s (run gcos backfill)", version)
	}
	return nil
}
