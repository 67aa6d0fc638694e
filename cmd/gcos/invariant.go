package main

import (
	"fmt"
	"net/url"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"gcos/gate"
	"gcos/httpapi"
)

// invariantCommand is `gcos invariant [--scope S]`: each scope's ledger and whether it closes; exit 1 when any
// does not (which also raises governance_schema_drift).
func (a *app) invariantCommand() *cobra.Command {
	var scope string
	cmd := &cobra.Command{
		Use:   "invariant [--scope S]",
		Short: "the coverage invariant per scope, in objects; exit 1 if a ledger does not close",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var view httpapi.InvariantView
			if api := a.daemonAPI(cmd.Context()); api != nil {
				q := url.Values{}
				if scope != "" {
					q.Set("scope", scope)
				}
				if err := api.get(cmd.Context(), "/v1/invariant", q, &view); err != nil {
					return err
				}
			} else {
				store, err := a.openPrepared(cmd.Context(), false)
				if err != nil {
					return err
				}
				rep, err := gate.New(store, nil).Invariant(cmd.Context(), scope)
				if err != nil {
					return err
				}
				view = httpapi.NewInvariantView(rep)
			}
			if err := a.print(view, invariantText(view)); err != nil {
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

func invariantText(v httpapi.InvariantView) string {
	var b strings.Builder
	snap := "none"
	if v.SnapshotID != nil {
		snap = fmt.Sprint(*v.SnapshotID)
	}
	fmt.Fprintf(&b, "invariant per scope, in objects, against snapshot %s:\n", snap)
	b.WriteString("total = covered + orphans + approved_exceptions + retired_or_ignored + stale + deferred_birth + class_0\n")
	b.WriteString("(stale: members of groups whose verdict is stale, unknown or needs input, and objects not yet counted)\n\n")
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
