package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"gcos/httpapi"
	"gcos/postgres"
)

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
		RunE: reachRunE(a, func(ctx context.Context, api *apiClient, _ []string) (StatusReport, error) {
			var sum httpapi.SummaryView
			var rep StatusReport
			if err := api.get(ctx, "/v1/summary", nil, &sum); err != nil {
				return rep, err
			}
			rep.Summary = sum.Summary
			return rep, api.get(ctx, "/v1/workers", nil, &rep.Workers)
		}, func(ctx context.Context, store *postgres.Store, _ []string) (StatusReport, error) {
			sum, err := store.Summary(ctx)
			if err != nil {
				return StatusReport{}, err
			}
			ws, err := store.Workers(ctx)
			return StatusReport{Summary: sum, Workers: ws}, err
		}, statusText),
	}
}

func statusText(rep StatusReport) string {
	s, w := rep.Summary, rep.Workers
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	if rs := s.Ruleset; rs != nil {
		line := fmt.Sprintf("%s (%s", rs.Version, rs.Status)
		if rs.ActivatedAt != nil {
			line += fmt.Sprintf(", activated %s by %s, approval %s", rs.ActivatedAt.UTC().Format(time.RFC3339), orEmpty(rs.ActivatedBy), orEmpty(rs.ApprovalRef))
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
	for _, v := range sortedKeys(s.Verdicts) {
		verdicts = append(verdicts, fmt.Sprintf("%s %d/%d", v, s.Verdicts[v].Groups, s.Verdicts[v].Objects))
	}
	fmt.Fprintf(tw, "verdicts\t%s (groups/objects)\n", orDash(strings.Join(verdicts, ", ")))
	var findings []string
	for _, t := range sortedKeys(s.OpenFindings) {
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
	for _, mode := range sortedKeys(h.LastRuns) {
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
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", x.Name, x.State, seconds(x.AgeSeconds), orDash(orEmpty(x.TickStatus)), lease)
		}
		_ = tw.Flush()
	}
	b.WriteString("\nrole leases (renewed while held; not workers, so never silent):\n")
	if len(w.Leases) == 0 {
		b.WriteString("  none taken yet\n")
	} else {
		tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  ROLE\tHOLDER\tEXPIRES\tTAKEN\tEPOCH")
		for _, l := range w.Leases {
			holder, expires := "free", "-"
			if l.Holder != nil {
				holder = *l.Holder
				if !l.Held {
					holder += " (expired)"
				}
			}
			if l.ExpiresAt != nil && l.Held {
				expires = l.ExpiresAt.UTC().Format(time.RFC3339)
			}
			taken := "-"
			if l.TakenAt != nil {
				taken = l.TakenAt.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%d\n", l.Role, holder, expires, taken, l.Epoch)
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
				pos = c.PositionAt.UTC().Format(time.RFC3339Nano) + "/" + orEmpty(c.PositionID)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%d\t%s\n", c.Source, pos, seconds(c.PositionAgeSeconds), c.EventsSeen,
				c.DeadLettered, seconds(c.LastRunAgeSeconds))
		}
		_ = tw.Flush()
	}
	return b.String()
}
