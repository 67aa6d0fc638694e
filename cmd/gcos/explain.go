package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/spf13/cobra"

	"gcos"
	"gcos/gate"
	"gcos/postgres"
)

// explainCommand is `gcos explain --object C:E | --group KEY`: the reproducible statement(s).
func (a *app) explainCommand() *cobra.Command {
	var object, group string
	cmd := &cobra.Command{
		Use:   "explain --object COLLECTION:CODE | --group KEY",
		Short: "the reproducible statement behind an object's or a group's verdict",
		Args: argsAnd(cobra.NoArgs, func([]string) error {
			if (object == "") == (group == "") {
				return gcos.Errorf(gcos.EINVALID, "give exactly one of --object COLLECTION:CODE or --group KEY")
			}
			return nil
		}),
		RunE: reachRunE(a, func(ctx context.Context, api *apiClient, _ []string) (ex gate.Explanation, err error) {
			q := url.Values{"object": {object}}
			if group != "" {
				q = url.Values{"group": {group}}
			}
			return ex, api.get(ctx, "/v1/explain", q, &ex)
		}, func(ctx context.Context, store *postgres.Store, _ []string) (gate.Explanation, error) {
			if object != "" {
				return gate.New(store, nil).ExplainObject(ctx, object)
			}
			return gate.New(store, nil).ExplainGroup(ctx, group)
		}, explainText),
	}
	cmd.Flags().StringVar(&object, "object", "", "the object, COLLECTION:CODE")
	cmd.Flags().StringVar(&group, "group", "", "a group key (32 hex digits)")
	return cmd
}

func explainText(ex gate.Explanation) string {
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
		fmt.Fprintf(&b, "\n[%s %s%s] effective %s (%s%s)\n", row.Source, row.Key, scopeSuffix(row.Scope), eff.Verdict, state, age)
		if i < len(ex.Statements) {
			fmt.Fprintf(&b, "  %s\n", ex.Statements[i])
		}
	}
	for _, scope := range ex.MissingScopes {
		fmt.Fprintf(&b, "\n[no group in scope %s] unknown: the gate blocks\n", scope)
	}
	return b.String()
}
