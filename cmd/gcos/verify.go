package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"gcos/oracle"
)

// verifyCommand is `gcos verify`: the incremental state compared with a from-scratch evaluation of the same
// substrate at one instant; exit 0 when they agree everywhere, 1 when anything differs.
func (a *app) verifyCommand() *cobra.Command {
	var opts oracle.VerifyOptions
	cmd := &cobra.Command{
		Use:   "verify [--sample N]",
		Short: "prove the incremental state equals a from-scratch evaluation; exit 1 on any mismatch",
		Long: "verify reads the substrate and GCOS's state in one REPEATABLE READ transaction, evaluates the substrate " +
			"from scratch under the active ruleset (package oracle) and prints every group, object row, ledger bucket " +
			"and gate decision that differs (the gate is asked, with no follow-up, about every object with a row and " +
			"--sample others, for write and read). Groups still marked dirty differ until their scan: run it once intake " +
			"and scans are idle for an exact answer.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			store, err := a.openPrepared(cmd.Context(), false)
			if err != nil {
				return err
			}
			rep, err := oracle.Verify(cmd.Context(), store, opts)
			if err != nil {
				return err
			}
			if err := a.print(rep, verifyText(rep)); err != nil {
				return err
			}
			if !rep.Clean() {
				return &exitError{code: 1}
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&opts.Sample, "sample", 2000, "about how many objects without an object row have their gate decisions compared")
	cmd.Flags().Uint64Var(&opts.Seed, "seed", 1, "picks the sampled objects")
	cmd.Flags().StringSliceVar(&opts.Only, "collection", nil, "verify only the groups, object rows and births of these "+
		"collections, as an audit proves a slice of its cover (repeatable; the ledger is then not compared)")
	return cmd
}

func verifyText(rep oracle.Report) string {
	var b strings.Builder
	where := ""
	if rep.Only != nil {
		where = fmt.Sprintf(" in %d collections (%s)", len(rep.Only), strings.Join(rep.Only, ", "))
	}
	fmt.Fprintf(&b, "verified at %s under ruleset %s%s: %d births, %d groups, %d object rows, %d gate decisions one by one and %d in batches (%.1fs from scratch)\n",
		rep.At.UTC().Format("2006-01-02T15:04:05Z"), rep.RulesetVersion, where, rep.Births, rep.Groups, rep.Objects, rep.GateChecks,
		rep.BatchChecks, rep.EvaluateTime)
	if rep.Clean() {
		b.WriteString("the incremental state equals the reference everywhere\n")
		return b.String()
	}
	fmt.Fprintf(&b, "%d mismatches:\n", len(rep.Mismatches))
	for _, m := range rep.Mismatches {
		b.WriteString("  " + m.String() + "\n")
	}
	return b.String()
}
