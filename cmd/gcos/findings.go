package main

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"gcos/postgres"
)

// findingsCommand is `gcos findings [--open] [--type T] [--limit N]`.
func (a *app) findingsCommand() *cobra.Command {
	var f postgres.FindingFilter
	cmd := &cobra.Command{
		Use:   "findings [--open] [--type T]",
		Short: "GCOS findings (system_issues), newest first",
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
			list, err := store.ListFindings(ctx, f)
			if list == nil {
				list = []postgres.FindingRow{}
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
	Findings []postgres.FindingRow `json:"findings"`
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

// anyTime formats a timestamp scanned into an any (FindingRow keeps them untyped).
func anyTime(v any) string {
	switch t := v.(type) {
	case time.Time:
		return t.UTC().Format(time.RFC3339)
	case nil:
		return "-"
	}
	return fmt.Sprint(v)
}
