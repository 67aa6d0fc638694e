package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"gcos"
	"gcos/httpapi"
	"gcos/postgres"
)

func init() {
	extraCommands = append(extraCommands, (*app).gateCommand, (*app).explainCommand, (*app).invariantCommand,
		(*app).findingsCommand, (*app).statusCommand)
}

// exitBlock is the exit status of a gate block (SPEC §13).
const exitBlock = 3

const gateCommandName = "gate"

// gateCommand is `gcos gate --object C:E [--action write|read]`: exit 0 allow, 3 block. Anything else is a block
// too (the gate fails closed): a malformed object or action, a usage or configuration error, an unreachable
// database, a timeout (gateFailed prints those as a block decision whose reason is the error).
func (a *app) gateCommand() *cobra.Command {
	var object, action string
	cmd := &cobra.Command{
		Use:   gateCommandName + " --object COLLECTION:CODE [--action write|read]",
		Short: "may this action proceed on this object? exit 0 allow, 3 block or any error (fails closed)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if object == "" {
				return gcos.Errorf(gcos.EINVALID, "--object COLLECTION:CODE is required")
			}
			openCtx := cmd.Context()
			if a.databaseURL != "" {
				// A pipeline waits on this answer: an unreachable server blocks within the gate's timeout instead
				// of the operating system's connect timeout. (Starting the embedded cluster is not bounded by it.)
				var cancel context.CancelFunc
				openCtx, cancel = context.WithTimeout(openCtx, a.cfg.Gate.Timeout.Duration())
				defer cancel()
			}
			store, err := a.openPrepared(openCtx, false)
			if err != nil {
				return err
			}
			res := store.Gate(cmd.Context(), object, action)
			if err := a.print(res, rdGateText(res)); err != nil {
				return err
			}
			if res.Decision != gcos.GateAllow {
				return &exitError{code: exitBlock}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&object, "object", "", "the object, COLLECTION:CODE")
	cmd.Flags().StringVar(&action, "action", gcos.ActionWrite, "the action: write or read")
	return cmd
}

// gateFailed answers a gate command that could not decide: a block, exit 3, printed as a decision whose reason is
// the error (JSON with --json, even when the flags could not be parsed).
func (a *app) gateFailed(cmd *cobra.Command, args []string, err error) int {
	object, _ := cmd.Flags().GetString("object")
	action, _ := cmd.Flags().GetString("action")
	if errors.Is(err, context.DeadlineExceeded) {
		err = gcos.Errorf(gcos.EUNAVAILABLE, "no answer within %s", a.cfg.Gate.Timeout.Duration())
	}
	// One line: driver errors span several (one per address tried).
	reason := a.redact(strings.Join(strings.Fields(err.Error()), " "))
	res := postgres.GateResult{Object: object, Action: action, Decision: gcos.GateBlock, Consulted: []postgres.ConsultedRow{},
		Reasons: []string{fmt.Sprintf("the gate could not decide (%s); it fails closed", reason)}}
	a.jsonOut = a.jsonOut || slices.Contains(args, "--json") || slices.Contains(args, "--json=true")
	if perr := a.print(res, rdGateText(res)); perr != nil {
		fmt.Fprintln(a.stderr, "gcos:", perr)
	}
	return exitBlock
}

func rdGateText(res postgres.GateResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "decision:  %s\n", strings.ToUpper(res.Decision))
	fmt.Fprintf(&b, "object:    %s (action %s)\n", res.Object, res.Action)
	fmt.Fprintf(&b, "effective: %s\n", rdOrDash(string(res.EffectiveVerdict)))
	fmt.Fprintf(&b, "risk:      %s\n", rdOrDash(res.RiskClass))
	if res.RescanScheduled {
		b.WriteString("rescan:    scheduled\n")
	}
	b.WriteString("reasons:\n")
	for _, r := range res.Reasons {
		fmt.Fprintf(&b, "  - %s\n", r)
	}
	if res.Statement != "" {
		fmt.Fprintf(&b, "statement: %s\n", res.Statement)
	}
	if len(res.Consulted) > 1 {
		b.WriteString("consulted:\n")
		for _, c := range res.Consulted {
			fmt.Fprintf(&b, "  - %s %s %s: %s\n", c.Source, c.Key, rdOrDash(c.Scope), c.Decision)
		}
	}
	return b.String()
}

// explainCommand is `gcos explain --object C:E | --group KEY`: the reproducible statement(s).
func (a *app) explainCommand() *cobra.Command {
	var object, group string
	cmd := &cobra.Command{
		Use:   "explain --object COLLECTION:CODE | --group KEY",
		Short: "the reproducible statement behind an object's or a group's verdict",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (object == "") == (group == "") {
				return gcos.Errorf(gcos.EINVALID, "give exactly one of --object COLLECTION:CODE or --group KEY")
			}
			store, err := a.openPrepared(cmd.Context(), false)
			if err != nil {
				return err
			}
			var ex postgres.Explanation
			if object != "" {
				ex, err = store.ExplainObject(cmd.Context(), object)
			} else {
				ex, err = store.ExplainGroup(cmd.Context(), group)
			}
			if err != nil {
				return err
			}
			var b strings.Builder
			fmt.Fprintf(&b, "%s\n", ex.Subject)
			for i, row := range ex.Rows {
				eff := row.Effective
				state := "clean"
				if !eff.Clean {
					state = "not clean: " + strings.Join(eff.Reasons, ", ")
				}
				age := ""
				if row.Age != "" {
					age = ", scanned " + row.Age + " ago"
				}
				fmt.Fprintf(&b, "\n[%s %s%s] effective %s (%s%s)\n", row.Source, row.Key, rdScopeSuffix(row.Scope), eff.Verdict, state, age)
				if i < len(ex.Statements) {
					fmt.Fprintf(&b, "  %s\n", ex.Statements[i])
				}
			}
			for _, scope := range ex.MissingScopes {
				fmt.Fprintf(&b, "\n[no group in scope %s] unknown: the gate blocks\n", scope)
			}
			return a.print(ex, b.String())
		},
	}
	cmd.Flags().StringVar(&object, "object", "", "the object, COLLECTION:CODE")
	cmd.Flags().StringVar(&group, "group", "", "a group key (32 hex digits)")
	return cmd
}

// invariantCommand is `gcos invariant [--scope S]`: each scope's ledger and whether it closes; exit 1 when any
// does not (which also raises governance_schema_drift).
func (a *app) invariantCommand() *cobra.Command {
	var scope string
	cmd := &cobra.Command{
		Use:   "invariant [--scope S]",
		Short: "the coverage invariant per scope, in objects; exit 1 if a ledger does not close",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			store, err := a.openPrepared(cmd.Context(), false)
			if err != nil {
				return err
			}
			rep, err := store.Invariant(cmd.Context(), scope)
			if err != nil {
				return err
			}
			view := httpapi.NewInvariantView(rep)
			if err := a.print(view, rdInvariantText(view)); err != nil {
				return err
			}
			if !view.Closes {
				return &exitError{code: 1}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&scope, "scope", "", "one scope (default: every scope)")
	return cmd
}

func rdInvariantText(v httpapi.InvariantView) string {
	var b strings.Builder
	snap := "none"
	if v.SnapshotID != nil {
		snap = fmt.Sprint(*v.SnapshotID)
	}
	fmt.Fprintf(&b, "invariant per scope, in objects, against snapshot %s:\n", snap)
	b.WriteString("total = covered + orphans + approved_exceptions + retired_or_ignored + stale + deferred_birth + class_0\n\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scope\ttotal\tcovered\torphans\tappr.exc\tretired/ign\tstale\tdeferred\tclass_0\tdifference\tcloses\t")
	open := 0
	for _, l := range v.Ledgers {
		closes := "yes"
		if !l.Closes {
			closes, open = "NO", open+1
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t\n", l.Scope, l.Total, l.Covered, l.Orphans,
			l.ApprovedExceptions, l.RetiredOrIgnored, l.Stale, l.DeferredBirth, l.Class0, l.Difference, closes)
	}
	_ = tw.Flush()
	switch {
	case len(v.Ledgers) == 0:
		b.WriteString("\nno ledger yet (no full snapshot)\n")
	case open == 0:
		fmt.Fprintf(&b, "\nall %d scope(s) close\n", len(v.Ledgers))
	default:
		fmt.Fprintf(&b, "\n%d of %d scope(s) do NOT close: governance_schema_drift raised\n", open, len(v.Ledgers))
	}
	return b.String()
}

// findingsCommand is `gcos findings [--open] [--type T] [--limit N]`.
func (a *app) findingsCommand() *cobra.Command {
	var f postgres.FindingFilter
	cmd := &cobra.Command{
		Use:   "findings [--open] [--type T]",
		Short: "GCOS findings (system_issues), newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.Limit < 0 || f.Limit > 1000 {
				return gcos.Errorf(gcos.EINVALID, "--limit %d: want 1..1000", f.Limit)
			}
			store, err := a.openPrepared(cmd.Context(), false)
			if err != nil {
				return err
			}
			list, err := store.ListFindings(cmd.Context(), f)
			if err != nil {
				return err
			}
			if list == nil {
				list = []postgres.FindingRow{}
			}
			var b strings.Builder
			if len(list) == 0 {
				b.WriteString("no findings\n")
			} else {
				tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tLAST SEEN\tTYPE\tSEVERITY\tSTATUS\tSEEN\tREOPENED\tKEY")
				for _, x := range list {
					fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", x.ID, rdAnyTime(x.LastSeenAt), x.IssueType, x.Severity,
						x.Status, x.OccurrenceCount, x.ReopenCount, x.CoalesceKey)
				}
				_ = tw.Flush()
			}
			return a.print(map[string]any{"findings": list}, b.String())
		},
	}
	cmd.Flags().BoolVar(&f.OpenOnly, "open", false, "only open findings")
	cmd.Flags().StringVar(&f.IssueType, "type", "", "only this issue type (e.g. handoff_lag)")
	cmd.Flags().IntVar(&f.Limit, "limit", 100, "at most this many (1..1000)")
	return cmd
}

// StatusReport is `gcos status --json`.
type StatusReport struct {
	Summary postgres.Summary       `json:"summary"`
	Workers postgres.WorkersReport `json:"workers"`
}

// statusCommand is `gcos status`: workers, heartbeats, lags, dirty set size, active ruleset, last snapshot.
func (a *app) statusCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "workers and heartbeats, lags, the dirty set, the active ruleset and the last snapshot",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			store, err := a.openPrepared(cmd.Context(), false)
			if err != nil {
				return err
			}
			sum, err := store.Summary(cmd.Context())
			if err != nil {
				return err
			}
			ws, err := store.Workers(cmd.Context())
			if err != nil {
				return err
			}
			rep := StatusReport{Summary: sum, Workers: ws}
			return a.print(rep, rdStatusText(rep))
		},
	}
}

func rdStatusText(rep StatusReport) string {
	s, w := rep.Summary, rep.Workers
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	if rs := s.Ruleset; rs != nil {
		line := fmt.Sprintf("%s (%s", rs.Version, rs.Status)
		if rs.ActivatedAt != nil {
			line += fmt.Sprintf(", activated %s by %s, approval %s", rs.ActivatedAt.UTC().Format(time.RFC3339), rdDeref(rs.ActivatedBy), rdDeref(rs.ApprovalRef))
		} else {
			line += fmt.Sprintf(", proposed by %s; verdicts read under a draft are unknown", rs.ProposedBy)
		}
		fmt.Fprintf(tw, "ruleset\t%s)\n", line)
	} else {
		fmt.Fprintln(tw, "ruleset\tnone computed yet (run gcos backfill)")
	}
	if sn := s.LastSnapshot; sn != nil {
		fmt.Fprintf(tw, "last snapshot\t%d %s at %s\n", sn.ID, sn.Scope, sn.SnapshotAt.UTC().Format(time.RFC3339))
	} else {
		fmt.Fprintln(tw, "last snapshot\tnone")
	}
	h := s.ScanHealth
	fmt.Fprintf(tw, "groups\t%d (objects × scopes: %d)\n", s.Groups, s.Objects)
	fmt.Fprintf(tw, "dirty set\t%d groups, scan lag %.1fs (failed %d, expired %d, unseeded %d)\n", s.DirtyGroups,
		h.ScanLagSeconds, h.FailedGroups, h.ExpiredGroups, h.UnseededGroups)
	var verdicts []string
	for _, v := range rdSortedKeys(s.Verdicts) {
		verdicts = append(verdicts, fmt.Sprintf("%s %d/%d", v, s.Verdicts[v].Groups, s.Verdicts[v].Objects))
	}
	fmt.Fprintf(tw, "verdicts\t%s (groups/objects)\n", rdOrDash(strings.Join(verdicts, ", ")))
	var findings []string
	for _, t := range rdSortedKeys(s.OpenFindings) {
		findings = append(findings, fmt.Sprintf("%s %d", t, s.OpenFindings[t]))
	}
	fmt.Fprintf(tw, "open findings\t%d %s\n", s.OpenFindingsTotal, strings.Join(findings, ", "))
	if c := s.Cover; c != nil {
		whole := fmt.Sprintf("%d of %d slices proven so far", c.Proven, c.Slices)
		if c.WholeSince != nil {
			whole = "every slice proven since " + c.WholeSince.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "last proof	slice %d/%d (%d collections, %d mismatches) at %s by %s; %s\n", c.Slice, c.Slices,
			c.Collections, c.Mismatches, c.VerifiedAt.UTC().Format(time.RFC3339), c.RunID, whole)
	}
	for _, mode := range rdSortedKeys(h.LastRuns) {
		r := h.LastRuns[mode]
		at := "-"
		if r.StartedAt != nil {
			at = r.StartedAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "last %s run\t%s %s at %s\n", mode, r.RunID, r.Status, at)
	}
	_ = tw.Flush()

	fmt.Fprintf(&b, "\nworkers (silent after %.0fs):\n", w.SilentThresholdSeconds)
	if len(w.Workers) == 0 {
		b.WriteString("  no gcos.* heartbeats\n")
	} else {
		tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  EXECUTOR\tSTATE\tAGE\tLAST STATUS\tLEASE")
		for _, x := range w.Workers {
			lease := "-"
			if x.LeaseOwner != nil {
				lease = *x.LeaseOwner
				if !x.LeaseHeld {
					lease += " (expired)"
				}
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", x.Name, x.State, rdSeconds(x.AgeSeconds), rdOrDash(rdDeref(x.TickStatus)), lease)
		}
		_ = tw.Flush()
	}
	b.WriteString("\nintake cursors:\n")
	if len(w.Cursors) == 0 {
		b.WriteString("  none\n")
	} else {
		tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  SOURCE\tPOSITION\tPOSITION AGE\tEVENTS\tDEAD-LETTERED\tLAST RUN AGO")
		for _, c := range w.Cursors {
			pos := "start"
			if c.PositionAt != nil {
				pos = c.PositionAt.UTC().Format(time.RFC3339Nano) + "/" + rdDeref(c.PositionID)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%d\t%s\n", c.Source, pos, rdSeconds(c.PositionAgeSeconds), c.EventsSeen,
				c.DeadLettered, rdSeconds(c.LastRunAgeSeconds))
		}
		_ = tw.Flush()
	}
	return b.String()
}

func rdSortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func rdSeconds(p *float64) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprintf("%.1fs", *p)
}

func rdDeref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func rdOrDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func rdScopeSuffix(scope string) string {
	if scope == "" {
		return ""
	}
	return " scope " + scope
}

// rdAnyTime formats a timestamp scanned into an any (FindingRow keeps them untyped).
func rdAnyTime(v any) string {
	switch t := v.(type) {
	case time.Time:
		return t.UTC().Format(time.RFC3339)
	case nil:
		return "-"
	}
	return fmt.Sprint(v)
}
