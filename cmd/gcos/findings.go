package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"gcos/events"
	"gcos/httpapi"
	"gcos/postgres"
)

// findingsCommand is `gcos findings list|show|resolve` (bare `gcos findings` lists, as it always did).
func (a *app) findingsCommand() *cobra.Command {
	cmd := a.findingsListCommand("findings [--open] [--type T]", "GCOS findings (system_issues): list, show, resolve")
	list := a.findingsListCommand("list [--open] [--type T]", "GCOS findings (system_issues), newest first")
	show := &cobra.Command{
		Use: "show ID", Short: "one finding whole: counts, evidence, its explanation, its announcements and resolutions",
		Args: argsAnd(cobra.ExactArgs(1), findingIDArg),
		RunE: reachRunE(a, func(ctx context.Context, api *apiClient, args []string) (d events.FindingDetail, err error) {
			return d, api.get(ctx, "/v1/findings/"+url.PathEscape(args[0]), nil, &d)
		}, func(ctx context.Context, store *postgres.Store, args []string) (events.FindingDetail, error) {
			id, _ := events.CheckFindingID(args[0])
			return events.New(store).GetFinding(ctx, id)
		}, findingText),
	}
	var by, reason string
	resolve := &cobra.Command{
		Use: "resolve ID --reason TEXT", Short: "close an open finding with a reason (it reopens, with its counts, if the condition recurs)",
		Args: argsAnd(cobra.ExactArgs(1), findingIDArg),
		RunE: reachRunE(a, func(ctx context.Context, api *apiClient, args []string) (row events.FindingRow, err error) {
			return row, api.as(by).post(ctx, "/v1/findings/"+url.PathEscape(args[0])+"/resolve", httpapi.ResolveRequest{Reason: reason}, &row)
		}, func(ctx context.Context, store *postgres.Store, args []string) (events.FindingRow, error) {
			id, _ := events.CheckFindingID(args[0])
			return events.New(store).ResolveFindingAs(ctx, id, reason, cliActor(by))
		}, func(row events.FindingRow) string {
			return fmt.Sprintf("finding %d %s: resolved (seen %d times, reopened %d); it reopens if %s recurs",
				row.ID, row.CoalesceKey, row.OccurrenceCount, row.ReopenCount, row.IssueType)
		}),
	}
	resolve.Flags().StringVar(&reason, "reason", "", "why it is resolved (required; kept in the audit row)")
	byFlag(resolve.Flags(), &by, "the resolving principal")
	cmd.AddCommand(list, show, resolve)
	return cmd
}

// findingIDArg refuses an id that is not a positive number before anything runs (exit 2).
func findingIDArg(args []string) error {
	_, err := events.CheckFindingID(args[0])
	return err
}

// findingsListCommand is the listing, under the name use.
func (a *app) findingsListCommand(use, short string) *cobra.Command {
	var f events.FindingFilter
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: reachRunE(a, func(ctx context.Context, api *apiClient, _ []string) (l findingList, err error) {
			q := url.Values{"limit": {strconv.Itoa(f.Limit)}}
			if f.OpenOnly {
				q.Set("open", "true")
			}
			if f.IssueType != "" {
				q.Set("type", f.IssueType)
			}
			return l, api.get(ctx, "/v1/findings", q, &l)
		}, func(ctx context.Context, store *postgres.Store, _ []string) (findingList, error) {
			list, err := events.New(store).ListFindings(ctx, f)
			if list == nil {
				list = []events.FindingRow{}
			}
			return findingList{list}, err
		}, findingsText),
	}
	cmd.Flags().BoolVar(&f.OpenOnly, "open", false, "only open findings")
	cmd.Flags().StringVar(&f.IssueType, "type", "", "only this issue type (e.g. handoff_lag)")
	cmd.Flags().IntVar(&f.Limit, "limit", postgres.DefaultFindingLimit, fmt.Sprintf("at most this many (1..%d)", postgres.MaxFindingLimit))
	flagRange(cmd.Flags(), "limit", 1, postgres.MaxFindingLimit)
	return cmd
}

// findingList is what `gcos findings --json` prints.
type findingList struct {
	Findings []events.FindingRow `json:"findings"`
}

func findingsText(l findingList) string {
	if len(l.Findings) == 0 {
		return "no findings\n"
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tLAST SEEN\tTYPE\tSEVERITY\tSTATUS\tSEEN\tREOPENED\tKEY")
	for _, x := range l.Findings {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", x.ID, anyTime(x.LastSeenAt), x.IssueType, x.Severity,
			x.Status, x.OccurrenceCount, x.ReopenCount, x.CoalesceKey)
	}
	_ = tw.Flush()
	return b.String()
}

func findingText(d events.FindingDetail) string {
	var b strings.Builder
	fmt.Fprintf(&b, "finding %d  %s  %s  %s\n", d.ID, d.IssueType, d.Severity, d.Status)
	fmt.Fprintf(&b, "key        %s\n", d.CoalesceKey)
	fmt.Fprintf(&b, "seen       %d times (first %s, last %s), reopened %d times\n", d.OccurrenceCount,
		anyTime(d.FirstSeenAt), anyTime(d.LastSeenAt), d.ReopenCount)
	if d.RulesetVersion != nil {
		fmt.Fprintf(&b, "ruleset    %s\n", *d.RulesetVersion)
	}
	if d.Explain != nil {
		ref := "--group " + d.Explain.Group
		if d.Explain.Object != "" {
			ref = "--object " + d.Explain.Object
		}
		fmt.Fprintf(&b, "explain    gcos explain %s  (%s)\n", ref, d.Explain.Path)
	}
	if len(d.Evidence) > 0 {
		ev, _ := json.Marshal(d.Evidence)
		fmt.Fprintf(&b, "evidence   %s\n", ev)
	}
	for _, r := range d.Resolutions {
		fmt.Fprintf(&b, "resolved   %s by %s: %s (audit %d)\n", r.ResolvedAt.UTC().Format(time.RFC3339), r.By, r.Reason, r.AuditID)
	}
	for _, e := range d.Events {
		fmt.Fprintf(&b, "event      %s %v (%s)\n", e.Type, e.Payload["transition"], e.ID)
	}
	return b.String()
}

// anyTime formats a timestamp scanned into an any (FindingRow keeps them untyped).
func anyTime(v any) string {
	switch t := v.(type) {
	case time.Time:
		return t.UTC().Format(time.RFC3339)
	case string:
		if p, err := time.Parse(time.RFC3339Nano, t); err == nil {
			return p.UTC().Format(time.RFC3339)
		}
	case nil:
		return "-"
	}
	return fmt.Sprint(v)
}
