package main

import (
	"context"
	"fmt"
	"math"

	"github.com/spf13/cobra"

	"gcos/postgres"
	"gcos/world"
)

func (a *app) worldCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "world", Short: "the synthetic world (demo, tests, benchmarks)"}
	var opts world.Options
	gen := &cobra.Command{
		Use:   "generate",
		Short: "load a deterministic synthetic world of the live size into an empty greenfield database",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			store, err := a.openPrepared(cmd.Context(), true)
			if err != nil {
				return err
			}
			if !a.jsonOut {
				opts.Progress = a.stderr
			}
			opts.Logger = a.logger
			sum, err := world.Generate(cmd.Context(), store.Pool(), opts)
			if err != nil {
				return err
			}
			return a.print(sum, sum.String())
		},
	}
	gen.Flags().IntVar(&opts.Births, "births", 0, "births to generate (default 1,037,724)")
	gen.Flags().IntVar(&opts.Children, "children", 0, "inherited children to add under one container")
	gen.Flags().Uint64Var(&opts.Seed, "seed", 1, "seed; the same seed gives the same rows")
	flagRange(gen.Flags(), "births", 0, 100_000_000)
	flagRange(gen.Flags(), "children", 0, 10_000_000)
	flagRange(gen.Flags(), "seed", 0, math.MaxUint64)
	var n int
	var seed uint64
	children := &cobra.Command{
		Use:   "add-children",
		Short: "add N inherited children under one container of an existing world",
		Args:  cobra.NoArgs,
		RunE: storeRunE(a, func(ctx context.Context, store *postgres.Store, _ []string) (addedChildren, error) {
			ref, err := world.AddChildren(ctx, store.Pool(), n, seed)
			return addedChildren{Container: ref.String(), Children: n}, err
		}, func(c addedChildren) string {
			return fmt.Sprintf("added %d children under %s", c.Children, c.Container)
		}),
	}
	children.Flags().IntVar(&n, "n", 1000, "children to add")
	children.Flags().Uint64Var(&seed, "seed", 1, "seed")
	flagRange(children.Flags(), "n", 1, 10_000_000)
	flagRange(children.Flags(), "seed", 0, math.MaxUint64)
	cmd.AddCommand(gen, children)
	return cmd
}

// addedChildren is what `gcos world add-children --json` prints.
type addedChildren struct {
	Container string `json:"container"`
	Children  int    `json:"children"`
}
