package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/spf13/cobra"

	"gcos"
	"gcos/httpapi"
	"gcos/postgres"
	"gcos/preview"
)

func (a *app) rulesetCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "ruleset", Short: "content-addressed ruleset versions"}
	var by string
	type computed = httpapi.ProposeResult
	compute := &cobra.Command{
		Use: "compute", Short: "hash the current rule registries and verdict policy into a draft version", Args: cobra.NoArgs,
		RunE: reachRunE(a, func(ctx context.Context, api *apiClient, _ []string) (c computed, err error) {
			return c, api.as(by).post(ctx, "/v1/rulesets", httpapi.ProposeRequest{Proposer: by}, &c)
		}, func(ctx context.Context, store *postgres.Store, _ []string) (computed, error) {
			row, created, err := store.ComputeRulesetAs(ctx, cliActor(by), preview.New(store).RulesetImpact)
			return computed{Ruleset: row, Created: created}, err
		}, func(c computed) string {
			row, state := c.Ruleset, "unchanged"
			if c.Created {
				state = "new draft"
			}
			return fmt.Sprintf("%s (%s, status %s, proposed by %s): %d measurements, %d laws, absent %v",
				row.Version, state, row.Status, row.ProposedBy, len(row.Summary.MeasurementIDs), len(row.Summary.LawCodes), row.Summary.Absent)
		}),
	}
	compute.Flags().StringVar(&by, "by", gcos.SystemProposer, "the proposing principal")
	list := &cobra.Command{
		Use: "list", Short: "list ruleset versions", Args: cobra.NoArgs,
		RunE: reachRunE(a, func(ctx context.Context, api *apiClient, _ []string) ([]postgres.RulesetRow, error) {
			var l struct {
				Rulesets []postgres.RulesetRow `json:"rulesets"`
			}
			return l.Rulesets, api.get(ctx, "/v1/rulesets", nil, &l)
		}, func(ctx context.Context, store *postgres.Store, _ []string) ([]postgres.RulesetRow, error) {
			return store.ListRulesets(ctx)
		}, func(rows []postgres.RulesetRow) string {
			var b strings.Builder
			for _, r := range rows {
				fmt.Fprintf(&b, "%s  %-10s proposed by %s at %s", r.Version, r.Status, r.ProposedBy, r.ProposedAt.UTC().Format("2006-01-02T15:04:05Z"))
				if r.ActivatedBy != nil {
					fmt.Fprintf(&b, ", activated by %s (%s)", *r.ActivatedBy, deref(r.ApprovalRef))
				}
				b.WriteString("\n")
			}
			return b.String()
		}),
	}
	show := &cobra.Command{
		Use: "show VERSION", Short: "show one ruleset version", Args: argsAnd(cobra.ExactArgs(1), rulesetVersions),
		RunE: storeRunE(a, func(ctx context.Context, store *postgres.Store, args []string) (postgres.RulesetRow, error) {
			return store.GetRuleset(ctx, args[0])
		}, func(r postgres.RulesetRow) string {
			return fmt.Sprintf("%s %s\ncontent_hash %s\nproposed by %s; supersedes %s\nmeasurements %d, laws %v, absent %v",
				r.Version, r.Status, r.ContentHash, r.ProposedBy, deref(r.Supersedes), len(r.Summary.MeasurementIDs), r.Summary.LawCodes, r.Summary.Absent)
		}),
	}
	diff := &cobra.Command{
		Use: "diff FROM TO", Short: "changed components, rule rows and the groups the change would dirty", Args: argsAnd(cobra.ExactArgs(2), rulesetVersions),
		RunE: storeRunE(a, func(ctx context.Context, store *postgres.Store, args []string) (postgres.RulesetDiffReport, error) {
			return store.DiffRulesets(ctx, args[0], args[1])
		}, func(d postgres.RulesetDiffReport) string {
			human := fmt.Sprintf("%s → %s\nchanged components: %v\nmeasurements: +%v -%v ~%v\npolicy changed: %v\nwould dirty %d of %d groups",
				d.From, d.To, d.ChangedComponents, d.Measurements.Added, d.Measurements.Removed, d.Measurements.Modified,
				d.PolicyChanged, len(d.Groups), d.GroupsTotal)
			if len(d.Unresolved) > 0 {
				human += fmt.Sprintf("\nUNRESOLVED law codes %v: every group is dirtied and ruleset_drift is raised on activation", d.Unresolved)
			}
			return human
		}),
	}
	var approval, actor string
	activate := &cobra.Command{
		Use: "activate VERSION", Short: "activate a draft (needs --approval and an actor other than the proposer)", Args: argsAnd(cobra.ExactArgs(1), rulesetVersions),
		RunE: reachRunE(a, func(ctx context.Context, api *apiClient, args []string) (res postgres.ActivationResult, err error) {
			// The daemon's view and caches learn of the activation at once; the audit row names the actor.
			if strings.TrimSpace(actor) == "" {
				return res, gcos.Errorf(gcos.EINVALID, "activate %s: the approving actor is required (--by)", args[0])
			}
			return res, api.as(actor).post(ctx, "/v1/rulesets/"+url.PathEscape(args[0])+"/activate", httpapi.ActivateRequest{ApprovalRef: approval, Actor: actor}, &res)
		}, func(ctx context.Context, store *postgres.Store, args []string) (postgres.ActivationResult, error) {
			return store.ActivateRulesetAs(ctx, args[0], approval, cliActor(actor))
		}, func(res postgres.ActivationResult) string {
			return fmt.Sprintf("%s active (supersedes %s); %d groups dirtied, %d carried unchanged",
				res.Version, deref(res.Superseded), res.DirtiedGroups, res.CarriedGroups) + tokenText(res.Token)
		}),
	}
	activate.Flags().StringVar(&approval, "approval", "", "approval reference (required)")
	activate.Flags().StringVar(&actor, "by", "", "the approving principal (required; not the proposer)")
	cmd.AddCommand(compute, list, show, diff, activate)
	return cmd
}

// rulesetVersions refuses an argument that cannot be a ruleset version (exit 2).
func rulesetVersions(args []string) error {
	for _, v := range args {
		if err := gcos.CheckRulesetVersion(v); err != nil {
			return err
		}
	}
	return nil
}
