package gate

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"gcos"
	"gcos/postgres"
)

// The gate's batch (SPEC §12): up to gate.batch_max questions answered in request order from one instant — one
// state of the view, or one repeatable-read transaction on the database — so a pipeline checking a change's
// objects never sees half of a verdict change.

// GateBatchResult is a batch's answers, one per check in request order, all read from the state AsOf, Source and
// Token name.
type GateBatchResult struct {
	Results []GateResult
	AsOf    time.Time
	Source  string
	Token   string
	// Rescanned says the answers were read after the gate re-scanned the stale groups some of them blocked on.
	Rescanned bool
	// Refused is set when the batch itself is bad input (GateResult.Refused): every answer blocks.
	Refused error
}

// Answers are the batch's lean answers (the state is the batch's, so each answer leaves it out).
func (b GateBatchResult) Answers() []gcos.GateAnswer {
	out := make([]gcos.GateAnswer, len(b.Results))
	for i, r := range b.Results {
		out[i] = r.Answer()
		out[i].AsOf, out[i].Source, out[i].Token = time.Time{}, "", ""
	}
	return out
}

// Answer is the gate's lean answer: the decision, the reason that decided it (blocking reasons come first) and the
// state it was read from.
func (r GateResult) Answer() gcos.GateAnswer {
	a := gcos.GateAnswer{Object: r.Object, Action: r.Action, Decision: r.Decision, AsOf: r.AsOf, Source: r.Source, Token: r.Token,
		RescanScheduled: r.RescanScheduled, Rescanned: r.Rescanned}
	if len(r.Reasons) > 0 {
		a.Reason = r.Reasons[0]
	}
	if a.Decision != gcos.GateAllow {
		a.Decision = gcos.GateBlock
		if a.Reason == "" {
			a.Reason = "no reason to allow; the gate fails closed"
		}
	}
	return a
}

// GateBatch answers checks in request order from one instant (SPEC §12): from the view while it is within its
// bound (and past opt.AtLeast) for every object, else from one repeatable-read transaction on the database. A batch
// the gate does not take (empty, over gate.batch_max, a malformed check or option) is blocked whole, each answer
// naming the problem. As a single question does, it re-scans the stale groups high-risk answers blocked on (one
// re-scan for the batch) and answers again, from the database, when that re-scan commits in time.
func (g *Gate) GateBatch(ctx context.Context, checks []gcos.GateCheck, opt GateOptions) GateBatchResult {
	refs, actions, atLeast, refused := g.checkBatch(checks, opt)
	if refused != nil {
		return *refused
	}
	if opt.fresh() {
		var err error
		if atLeast, err = g.settle(ctx, atLeast); err != nil {
			return blockBatch(checks, actions, err)
		}
	}
	out, fus := g.decideBatch(ctx, refs, actions, atLeast, opt.Consistency == ConsistencyFull)
	var sync []string
	for _, fu := range fus {
		sync = append(sync, fu.sync...)
	}
	if len(sync) > 0 {
		slices.Sort(sync)
		sync = slices.Compact(sync)
		if g.rescanNow(ctx, sync) {
			// The re-scan committed: the database has its verdicts (the view catches up a moment later).
			before := fus
			out, fus = g.decideBatch(ctx, refs, actions, nil, true)
			out.Rescanned = true
			for i := range out.Results {
				out.Results[i].Rescanned = len(before[i].sync) > 0
			}
		}
	}
	// Follow-ups are best effort and never change the answers already taken; answers the view remembers with
	// every follow-up done skip the log.
	var all gateFollowUps
	now := time.Now().UnixNano()
	for _, fu := range fus {
		if fu.empty() || (fu.answer != nil && now < fu.answer.quiet.Load()) {
			continue
		}
		all.rescan, all.unknown = append(all.rescan, fu.rescan...), append(all.unknown, fu.unknown...)
		all.orphans, all.lifts, all.inputs = append(all.orphans, fu.orphans...), append(all.lifts, fu.lifts...), append(all.inputs, fu.inputs...)
	}
	if !all.empty() {
		if err := g.gateFollowUp(context.WithoutCancel(ctx), all); err != nil {
			g.logger.Warn("gate: follow up a batch", "checks", len(checks), "err", err)
			return out
		}
		// As a single answer does: a remembered answer knows until when its follow-ups are all done.
		for _, fu := range fus {
			if a := fu.answer; a != nil && !fu.empty() {
				if u := g.followUps.quietUntil(fu); !u.IsZero() {
					a.quiet.Store(u.UnixNano())
				}
			}
		}
	}
	for i, fu := range fus {
		out.Results[i].RescanScheduled = out.Results[i].RescanScheduled || len(fu.rescan) > 0
	}
	return out
}

// DecideBatch is GateBatch with no follow-up, no re-scan and no wait for the intake: a reader that compares
// decisions (gcos verify) leaves the state it compares as it found it, and reads it as it is.
func (g *Gate) DecideBatch(ctx context.Context, checks []gcos.GateCheck, opt GateOptions) GateBatchResult {
	refs, actions, atLeast, refused := g.checkBatch(checks, opt)
	if refused != nil {
		return *refused
	}
	out, _ := g.decideBatch(ctx, refs, actions, atLeast, opt.Consistency == ConsistencyFull)
	return out
}

// checkBatch parses a batch's checks and options; refused is the whole batch blocked when the gate does not take
// it (empty, over gate.batch_max, a malformed check or option), each answer naming the problem.
func (g *Gate) checkBatch(checks []gcos.GateCheck, opt GateOptions) ([]postgres.ObjectRef, []string, *gcos.ConsistencyToken, *GateBatchResult) {
	refs, actions := make([]postgres.ObjectRef, len(checks)), make([]string, len(checks))
	err := gcos.CheckGateBatch(checks, g.cfg.Gate.BatchMax)
	for i, c := range checks {
		actions[i] = c.Action
		if actions[i] == "" {
			actions[i] = gcos.ActionWrite
		}
		// Checked above: a valid reference splits at its first colon (a refused batch uses none of them).
		coll, code, _ := strings.Cut(c.Object, ":")
		refs[i] = postgres.ObjectRef{Collection: coll, Code: code}
	}
	var atLeast *gcos.ConsistencyToken
	if err == nil {
		atLeast, err = opt.parse()
	}
	if err == nil {
		return refs, actions, atLeast, nil
	}
	out := blockBatch(checks, actions, err)
	return nil, nil, nil, &out
}

// blockBatch blocks every check of a batch for err; an EINVALID err refuses the batch as bad input.
func blockBatch(checks []gcos.GateCheck, actions []string, err error) GateBatchResult {
	out := GateBatchResult{Results: make([]GateResult, len(checks))}
	reason := gcos.ErrorMessage(err) + "; the gate fails closed"
	for i, c := range checks {
		out.Results[i] = GateResult{Object: c.Object, Action: actions[i], Decision: gcos.GateBlock, Reasons: []string{reason}, Consulted: []ConsultedRow{}}
	}
	if gcos.ErrorCode(err) == gcos.EINVALID {
		out.Refused = err
	}
	return out
}

// decideBatch takes every decision of a batch from one instant: the view's when it can answer them all (and full
// is false), else the database's.
func (g *Gate) decideBatch(ctx context.Context, refs []postgres.ObjectRef, actions []string, atLeast *gcos.ConsistencyToken, full bool) (GateBatchResult, []gateFollowUps) {
	if v := g.view.Load(); v != nil && !full {
		if res, fus, at, ok := v.decideBatch(ctx, refs, actions, atLeast); ok {
			return GateBatchResult{Results: res, AsOf: at.asOf, Source: SourceView, Token: at.token}, fus
		}
		v.readThrough.Add(1)
	}
	ctx, cancel := context.WithTimeout(ctx, g.cfg.Gate.Timeout.Duration())
	defer cancel()
	pool, source := g.gateReadPool(full)
	reads, err := g.gateBatchReads(ctx, pool, refs)
	if err != nil && source == SourceReplica && ctx.Err() == nil {
		g.replicaFailed(err)
		source = SourceDatabase
		reads, err = g.gateBatchReads(ctx, g.gatePool, refs)
	}
	out := GateBatchResult{Results: make([]GateResult, len(refs))}
	fus := make([]gateFollowUps, len(refs))
	if err != nil {
		err = g.gateReadFailed(fmt.Sprintf("a batch of %d", len(refs)), err)
		for i, ref := range refs {
			d := gcos.GateObject(gcos.ObjectGateInput{Action: actions[i], Err: err})
			out.Results[i] = GateResult{Object: ref.String(), Action: actions[i], Decision: gcos.GateBlock, Reasons: d.Reasons, Consulted: []ConsultedRow{}}
		}
		return out, fus
	}
	g.gateOutage.succeeded()
	out.Source = source
	for i, ref := range refs {
		o := reads[i]
		out.AsOf, out.Token = o.now, o.token
		res := GateResult{Object: ref.String(), Action: actions[i], Decision: gcos.GateBlock, Reasons: []string{}, Consulted: []ConsultedRow{},
			AsOf: o.now, Source: source, Token: o.token}
		out.Results[i], fus[i] = g.judge(ref, actions[i], o, res)
	}
	return out, fus
}

// gateBatchReads reads every object's gate inputs in one read-only repeatable-read transaction: one snapshot and
// one clock (now() is the transaction's) for the whole batch, the statements sent in one round trip.
func (g *Gate) gateBatchReads(ctx context.Context, pool *pgxpool.Pool, refs []postgres.ObjectRef) ([]objectReads, error) {
	var reads []objectReads
	err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var now time.Time
		var token string
		if err := tx.QueryRow(ctx, `SELECT now(), pg_current_snapshot()::text`).Scan(&now, &token); err != nil {
			return err
		}
		var err error
		reads, err = g.batchReadsIn(ctx, tx, refs, now, token)
		return err
	})
	return reads, err
}

// batchReadsIn reads every object's gate inputs in tx, judged at now and stamped with token (the transaction's
// own, or a resource search's first page's).
func (g *Gate) batchReadsIn(ctx context.Context, tx pgx.Tx, refs []postgres.ObjectRef, now time.Time, token string) ([]objectReads, error) {
	reads := make([]objectReads, len(refs))
	err := func() error {
		b := &pgx.Batch{}
		for _, ref := range refs {
			b.Queue(g.gateSQLText, ref.Collection, ref.Code)
		}
		br := tx.SendBatch(ctx, b)
		versions, fingerprints := make([]string, len(refs)), make([]*string, len(refs))
		for i, ref := range refs {
			rows, err := br.Query()
			if err != nil {
				_ = br.Close()
				return err
			}
			if reads[i], versions[i], fingerprints[i], err = gateReadsFrom(rows, ref); err != nil {
				_ = br.Close()
				return err
			}
			// An object with no birth has no row, and so no clock of its own: the transaction's is the same.
			reads[i].now, reads[i].token = now, token
		}
		if err := br.Close(); err != nil {
			return err
		}
		for i, ref := range refs {
			if len(reads[i].reads) == 0 {
				continue
			}
			var err error
			if reads[i], err = g.completeReads(ctx, tx, ref, reads[i], versions[i], fingerprints[i]); err != nil {
				return err
			}
		}
		return nil
	}()
	return reads, err
}
