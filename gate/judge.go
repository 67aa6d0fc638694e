package gate

import (
	"fmt"
	"strings"
	"time"

	"gcos"
	"gcos/postgres"
)

// judge takes the gate's decision on an object's reads (the database's or the view's) and lists its follow-ups;
// res is the answer so far (object, action, as_of, source).
func (g *Gate) judge(ref postgres.ObjectRef, action string, o objectReads, res GateResult) (GateResult, gateFollowUps) {
	var fu gateFollowUps
	reads, now := o.reads, o.now
	res.DecidedAt = now
	if len(reads) == 0 {
		res.Reasons = append(res.Reasons, fmt.Sprintf("object %s has no birth in %s: unknown objects are blocked", ref, g.core.BirthBinding().Table))
		res.EffectiveVerdict = gcos.VerdictUnknown
		return res, fu
	}
	in := gcos.ObjectGateInput{Action: action, Scopes: o.scopes, Problems: o.problems, Rows: make([]gcos.GateInput, len(reads))}
	for i, r := range reads {
		in.Rows[i] = g.gateInput(action, r, now)
	}
	d := gcos.GateObject(in)
	res.Decision, res.EffectiveVerdict, res.RiskClass, res.Reasons = d.Decision, d.EffectiveVerdict, d.RiskClass, d.Reasons
	for i, r := range reads {
		rd := d.Rows[i]
		statement := g.statement(ref.String(), r, in.Rows[i].Effective)
		res.Consulted = append(res.Consulted, ConsultedRow{Source: r.source, Key: r.key, Scope: r.scope, Decision: rd.Decision, Statement: statement})
		if i == d.Worst {
			res.Statement = statement
		}
		if r.key == "" {
			continue
		}
		// A row already dirty has its re-scan coming: marking it again could only re-dirty a row a scan has just
		// cleaned, when the answer was read a moment before (the view's bound).
		if rd.RescanScheduled && r.source == gcos.GateSourceGroup {
			if r.row.Dirty {
				res.RescanScheduled = true
			} else {
				fu.rescan = append(fu.rescan, r.key)
			}
		}
		if rd.RaiseUnknown {
			fu.unknown = append(fu.unknown, r.key)
		}
		if r.lift != nil {
			subject := ref.String() // an exception on the object; a group's names the group
			if r.source == gcos.GateSourceGroup {
				subject = "group:" + r.key
			}
			fu.lifts = append(fu.lifts, liftFollowUp{lift: *r.lift, object: subject, ruleset: r.row.RulesetVersion,
				log: r.lift.ExceptionID + "@" + r.lift.Reason})
		}
		if rd.RaiseOrphan {
			o := orphanFollowUp{key: r.key, source: r.source, scope: r.scope, ruleset: r.row.RulesetVersion,
				object: ref.String(), verdictAt: r.row.ScanTime, validUntil: r.row.StaleAfter}
			o.log = o.logKey()
			fu.orphans = append(fu.orphans, o)
		}
	}
	fu.sync = syncRescan(d, reads, len(o.problems) > 0)
	for _, p := range o.problems {
		in := inputFollowUp{problem: p, object: ref.String()}
		in.log = string(p.State) + ":" + in.subject()
		fu.inputs = append(fu.inputs, in)
	}
	return res, fu
}

// syncRescan lists the groups to re-scan when a re-scan could turn the block into an allow
// (gcos.ObjectGateDecision.RescanCouldAllow): the blocking group rows. An object row follows its group, which is
// re-scanned with it.
func syncRescan(d gcos.ObjectGateDecision, reads []candidateRead, problems bool) []string {
	if !d.RescanCouldAllow(problems) {
		return nil
	}
	var groups []string
	for i, r := range reads {
		if !d.Rows[i].Allowed() && r.source == gcos.GateSourceGroup && r.key != "" {
			groups = append(groups, r.key)
		}
	}
	return groups
}

// gateInput derives one row's gate input the same way for the gate and explain.
func (g *Gate) gateInput(action string, r candidateRead, now time.Time) gcos.GateInput {
	in := gcos.GateInput{Action: action, Found: r.found(), Source: r.source, Scope: r.scope, RulesetStatus: r.rulesetStatus,
		SnapshotExists: r.snapshotExists, Coverage: r.coverage}
	if in.Found {
		in.Row = r.row
		in.HighRisk = gcos.IsHighRisk(r.row.RiskClass, g.cfg.Gate.LowRiskClasses)
		in.Effective = gcos.Effective(r.row, now, gcos.RulesetState{ActiveVersion: r.activeVersion, RowRulesetStatus: r.rulesetStatus}, r.snapshotExists, in.HighRisk)
	}
	return in
}

func (r candidateRead) found() bool { return r.row.Verdict != "" }

// statement says in one sentence what one consulted row's verdict rests on: the verdict, the ruleset, the
// snapshot, when it was scanned and until when it holds, its coverage, and what it is now when no longer clean.
func (g *Gate) statement(subject string, r candidateRead, eff gcos.EffectiveState) string {
	if !r.found() {
		if r.key == "" {
			return fmt.Sprintf("object %s belongs to no known group: unknown", subject)
		}
		return fmt.Sprintf("object %s (group %s, scope %s) has no verdict under the current ruleset: unknown", subject, r.key, r.scope)
	}
	snap := fmt.Sprintf("snapshot %d", r.row.SnapshotRef)
	if r.snapshotAt != nil {
		snap += fmt.Sprintf(" (captured %s)", r.snapshotAt.UTC().Format(time.RFC3339))
	} else {
		snap += " (pruned: dangling)"
	}
	valid := "no expiry recorded"
	if r.row.StaleAfter != nil {
		valid = "valid until " + r.row.StaleAfter.UTC().Format(time.RFC3339)
	}
	where := ""
	if r.scope != "" {
		where = fmt.Sprintf(" in scope %s", r.scope)
	}
	out := fmt.Sprintf("object %s was %s%s under ruleset %s (%s), %s, scanned %s, %s", subject, r.row.Verdict, where,
		r.row.RulesetVersion, r.rulesetStatus, snap, r.row.ScanTime.UTC().Format(time.RFC3339), valid)
	if r.row.Verdict == gcos.VerdictRelevant && r.row.CoverageRequired {
		coverage := string(r.coverage)
		if coverage == "" {
			coverage = "not recorded"
		}
		out += "; coverage " + coverage
		if r.lift != nil {
			out += fmt.Sprintf(" (recorded %s, lifted: %s)", r.recorded.Outcome, r.lift.Detail)
		}
	}
	if !eff.Clean && eff.Verdict != "" {
		out += fmt.Sprintf("; now %s (%s)", eff.Verdict, strings.Join(eff.Reasons, ", "))
	}
	return out
}
