package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"gcos"
	"gcos/postgres"
	"gcos/postgres/migration"
	"gcos/postgres/substrate"
)

func (a *app) migrateCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "migrate", Short: "apply, revert or show GCOS's schema migrations"}
	var substrateMode string
	up := &cobra.Command{
		Use:   "up",
		Short: "verify the substrate (or create it with --substrate=create) and apply pending migrations",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if substrateMode != "" && substrateMode != "create" && substrateMode != "verify" {
				return gcos.Errorf(gcos.EINVALID, "--substrate: %s is not one of verify, create", gcos.Quote(substrateMode))
			}
			store, err := a.open(cmd.Context())
			if err != nil {
				return err
			}
			res, err := store.Prepare(cmd.Context(), postgres.PrepareOptions{CreateSubstrate: substrateMode == "create"})
			if err != nil {
				return err
			}
			human := fmt.Sprintf("substrate created: %s\nmigrations applied: %v\nabsent optional registries: %s",
				listOrNone(res.CreatedSubstrate), res.Migrated, listOrNone(res.Substrate.AbsentOptional))
			for _, s := range res.Substrate.MissingIndexes {
				human += "\nmissing index (run it yourself): " + s
			}
			return a.print(res, human)
		},
	}
	up.Flags().StringVar(&substrateMode, "substrate", "verify", "verify | create (create absent substrate tables: greenfield only)")
	var steps int
	down := &cobra.Command{
		Use:   "down",
		Short: "revert the last --steps migrations (default 1; 0 reverts all). Substrate tables are never touched",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			store, err := a.open(cmd.Context())
			if err != nil {
				return err
			}
			m, err := migration.New(store.Pool())
			if err != nil {
				return err
			}
			reverted, err := m.Down(cmd.Context(), steps)
			if err != nil {
				return err
			}
			return a.print(map[string]any{"reverted": reverted}, fmt.Sprintf("migrations reverted: %v", reverted))
		},
	}
	down.Flags().IntVar(&steps, "steps", 1, "how many steps to revert; 0 = all (0..1000)")
	flagRange(down.Flags(), "steps", 0, 1000)
	status := &cobra.Command{
		Use:   "status",
		Short: "list migrations and substrate verification",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			store, err := a.open(cmd.Context())
			if err != nil {
				return err
			}
			m, err := migration.New(store.Pool())
			if err != nil {
				return err
			}
			st, err := m.Status(cmd.Context())
			if err != nil {
				return err
			}
			rep, err := substrate.Verify(cmd.Context(), store.Pool(), substrate.Bound(store.Config().SourceBinding))
			if err != nil {
				return err
			}
			var b strings.Builder
			for _, s := range st {
				mark := "pending"
				if s.Applied {
					mark = "applied"
				}
				fmt.Fprintf(&b, "%03d %-28s %s\n", s.Version, s.Name, mark)
			}
			fmt.Fprintf(&b, "substrate: missing %s; absent optional %s", listOrNone(rep.Missing), listOrNone(rep.AbsentOptional))
			return a.print(map[string]any{"migrations": st, "substrate": rep}, b.String())
		},
	}
	cmd.AddCommand(up, down, status)
	return cmd
}

func listOrNone(xs []string) string {
	if len(xs) == 0 {
		return "none"
	}
	return strings.Join(xs, ", ")
}
