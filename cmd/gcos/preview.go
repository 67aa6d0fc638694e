package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"gcos"
	"gcos/postgres"
	"gcos/preview"
)

// previewCommand is `gcos preview --changes FILE|-`: what a proposed governance change would flip, read-only.
func (a *app) previewCommand() *cobra.Command {
	var from, action string
	var sample int
	var req gcos.PreviewRequest
	cmd := &cobra.Command{
		Use:   "preview --changes FILE|- [--action write|read] [--sample N]",
		Short: "what a proposed governance change would flip (groups, ledgers, gate decisions), computed read-only",
		Long: `Reads a preview request, {"changes": [{"kind": "owner_revoke", "ownership_id": 38}, …]}, from FILE (- for
stdin) and answers what the changes would flip, judged at one instant by the evaluator and the gate's decision on
the groups they route to. Nothing is written. The kinds and their fields: docs/REFERENCE.md, "Impact preview".`,
		Args: func(cmd *cobra.Command, args []string) error {
			if err := cobra.NoArgs(cmd, args); err != nil {
				return err
			}
			if err := checkInput(cmd, args); err != nil {
				return err // the flags' own ranges first, then the request they amend
			}
			var err error
			if req, err = a.readPreview(from); err != nil {
				return err
			}
			if cmd.Flags().Changed("action") {
				req.Action = action
			}
			if cmd.Flags().Changed("sample") {
				req.Sample = sample
			}
			return req.Validate()
		},
		RunE: reachRunE(a, func(ctx context.Context, api *apiClient, _ []string) (rep gcos.PreviewReport, err error) {
			return rep, api.post(ctx, "/v1/preview", req, &rep)
		}, func(ctx context.Context, store *postgres.Store, _ []string) (gcos.PreviewReport, error) {
			return preview.New(store).Preview(ctx, req)
		}, previewText),
	}
	cmd.Flags().StringVar(&from, "changes", "", "the preview request: a JSON file (- for stdin)")
	cmd.Flags().StringVar(&action, "action", gcos.ActionWrite, "the gate action whose decisions are compared (write|read)")
	cmd.Flags().IntVar(&sample, "sample", gcos.PreviewSampleDefault, "how many objects of each flip direction to name")
	flagRange(cmd.Flags(), "sample", 1, gcos.PreviewSampleMax)
	return cmd
}

// readPreview reads a preview request from path (- for stdin): one JSON object, no unknown field.
func (a *app) readPreview(path string) (gcos.PreviewRequest, error) {
	var req gcos.PreviewRequest
	if path == "" {
		return req, gcos.Errorf(gcos.EINVALID, "give --changes FILE (- for stdin): the request, {\"changes\": [{\"kind\": …}]}")
	}
	r, err := a.openInput("--changes", path)
	if err != nil {
		return req, err
	}
	defer r.Close()
	body, err := io.ReadAll(io.LimitReader(r, 1<<20+1))
	if err != nil {
		return req, gcos.Errorf(gcos.EINVALID, "--changes: %v", err)
	}
	if len(body) > 1<<20 {
		return req, gcos.Errorf(gcos.EINVALID, "--changes: the request exceeds 1 MiB")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, gcos.Errorf(gcos.EINVALID, "--changes %s: %v", path, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return req, gcos.Errorf(gcos.EINVALID, "--changes %s: trailing data after the JSON object", path)
	}
	return req, nil
}

func previewText(rep gcos.PreviewReport) string {
	var b strings.Builder
	fmt.Fprintf(&b, "as of %s (token %s), ruleset %s", rep.AsOf.UTC().Format("2006-01-02T15:04:05Z"), rep.Token, rep.RulesetVersion)
	if rep.RulesetAfter != rep.RulesetVersion {
		fmt.Fprintf(&b, " → %s", rep.RulesetAfter)
	}
	fmt.Fprintf(&b, "\n%d changes judged on %d groups (%d objects); %d groups change\n", len(rep.Changes), rep.AffectedGroups, rep.AffectedObjects, rep.ChangedGroups)
	fmt.Fprintf(&b, "%s decisions that flip: %d allow → block, %d block → allow\n", rep.Action, rep.Flips.AllowToBlock, rep.Flips.BlockToAllow)
	for _, f := range rep.Flips.FirstBlocked {
		fmt.Fprintf(&b, "  allow → block  %s: %s\n", f.Object, strings.Join(f.After, "; "))
	}
	for _, f := range rep.Flips.FirstAllowed {
		fmt.Fprintf(&b, "  block → allow  %s: %s\n", f.Object, strings.Join(f.After, "; "))
	}
	for _, g := range rep.Groups {
		side := func(j gcos.GroupJudged) string {
			return strings.Join(strings.Fields(fmt.Sprintf("%s %s %s owner %s, %d members", j.Verdict, j.RiskClass, j.Coverage,
				cmp.Or(deref(j.Owner), "none"), j.Members)), " ")
		}
		fmt.Fprintf(&b, "  group %s/%s/%s in %s: %s → %s\n", g.ObjectClass, g.SourceRegistry, g.Lifecycle, g.Scope, side(g.Before), side(g.After))
	}
	for _, l := range rep.Ledgers {
		fmt.Fprintf(&b, "  ledger %s:", l.Scope)
		for _, bucket := range gcos.Buckets {
			if n := l.Delta[bucket]; n != 0 {
				fmt.Fprintf(&b, " %s %+d", bucket, n)
			}
		}
		b.WriteString("\n")
	}
	for _, s := range rep.Assumed {
		fmt.Fprintf(&b, "  assumed: %s\n", s)
	}
	return b.String()
}
