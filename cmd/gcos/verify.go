package main

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"gcos"
	"gcos/intake"
	"gcos/oracle"
)

// verifyCommand is `gcos verify`: the incremental state compared with a from-scratch evaluation of the same
// substrate at one instant; exit 0 when they agree everywhere, 1 when anything differs.
func (a *app) verifyCommand() *cobra.Command {
	var opts oracle.VerifyOptions
	var strict bool
	var settle time.Duration
	cmd := &cobra.Command{
		Use:   "verify [--sample N]",
		Short: "prove the incremental state equals a from-scratch evaluation; exit 1 on any mismatch",
		Long: "verify reads the substrate and GCOS's state in one REPEATABLE READ transaction (the instant), evaluates " +
			"the substrate from scratch under the active ruleset (package oracle) and prints every group, object row, " +
			"ledger bucket and gate decision that differs (the gate is asked, with no follow-up, about every object with " +
			"a row and --sample others, for write and read).\n\nOn a live system it then waits (up to --settle-timeout) " +
			"until the intake has handed off every source row committed before the instant, and lists apart, as in " +
			"flight, the differences of what was moving: groups dirty at the instant, groups and objects written by " +
			"transactions that committed after it, and the ledgers and gate decisions that count or read them. It exits " +
			"0 when everything settled agrees, 1 when anything settled differs. --strict counts in-flight differences " +
			"too (what the differential tests ask of a quiet system).",
		Args: argsAnd(cobra.NoArgs, func([]string) error {
			for _, c := range opts.Only {
				if strings.TrimSpace(c) == "" {
					return gcos.Errorf(gcos.EINVALID, "--collection: empty name")
				}
			}
			return nil
		}),
		RunE: func(cmd *cobra.Command, _ []string) error {
			store, err := a.openPrepared(cmd.Context(), false)
			if err != nil {
				return err
			}
			opts.InFlight = !strict
			opts.Settle = func(ctx context.Context, at time.Time) error {
				return intake.New(store).HandedOff(ctx, nil, at, settle, intakeIdle)
			}
			rep, err := oracle.Verify(cmd.Context(), store, opts)
			if err != nil {
				return err
			}
			if err := a.print(rep, verifyText(rep)); err != nil {
				return err
			}
			if !rep.Settled() {
				return &exitError{code: 1}
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&opts.Sample, "sample", 2000, fmt.Sprintf("about how many objects without an object row have their gate decisions compared (0..%d)", maxVerifySample))
	cmd.Flags().BoolVar(&strict, "strict", false, "count differences in flight as mismatches too (for a quiet system)")
	cmd.Flags().DurationVar(&settle, "settle-timeout", time.Minute, "how long to wait for the intake to hand off what the instant held (0s..1h)")
	cmd.Flags().Uint64Var(&opts.Seed, "seed", 1, "picks the sampled objects")
	flagRange(cmd.Flags(), "sample", 0, maxVerifySample)
	flagRange(cmd.Flags(), "settle-timeout", 0, 3600)
	flagRange(cmd.Flags(), "seed", 0, math.MaxUint64)
	cmd.Flags().StringSliceVar(&opts.Only, "collection", nil, "verify only the groups, object rows and births of these "+
		"collections, as an audit proves a slice of its cover (repeatable; the ledger is then not compared)")
	return cmd
}

// maxVerifySample bounds --sample: each sampled object is two gate questions, asked one by one.
const maxVerifySample = 1_000_000

// intakeIdle is how long verify waits for a tail that does not move before it concludes no intake runs.
const intakeIdle = 3 * time.Second

func verifyText(rep oracle.Report) string {
	var b strings.Builder
	where := ""
	if rep.Only != nil {
		where = fmt.Sprintf(" in %d collections (%s)", len(rep.Only), strings.Join(rep.Only, ", "))
	}
	fmt.Fprintf(&b, "verified at %s under ruleset %s%s: %d births, %d groups, %d object rows, %d gate decisions one by one and %d in batches (%.1fs from scratch)\n",
		rep.At.UTC().Format("2006-01-02T15:04:05Z"), rep.RulesetVersion, where, rep.Births, rep.Groups, rep.Objects, rep.GateChecks,
		rep.BatchChecks, rep.EvaluateTime)
	if m := rep.Moving; m != nil {
		fmt.Fprintf(&b, "in flight at the instant: %d groups dirty, %d groups and %d objects written after it\n",
			m.DirtyGroups, m.WrittenGroups, m.Objects)
	}
	switch {
	case rep.Inconclusive:
		fmt.Fprintf(&b, "not all handed off: %s; inconclusive, every difference is in flight\n", rep.NotHandedOff)
	case rep.NotHandedOff != "":
		fmt.Fprintf(&b, "not all handed off: %s; their differences count as settled\n", rep.NotHandedOff)
	}
	if len(rep.InFlight) > 0 {
		fmt.Fprintf(&b, "%d differences in flight (what was moving at the instant; the next verification judges them settled):\n", len(rep.InFlight))
		for _, m := range rep.InFlight {
			b.WriteString("  " + m.String() + "\n")
		}
	}
	switch {
	case rep.Clean():
		b.WriteString("the incremental state equals the reference everywhere\n")
	case rep.Settled():
		b.WriteString("everything settled equals the reference\n")
	default:
		fmt.Fprintf(&b, "%d settled mismatches:\n", len(rep.Mismatches))
		for _, m := range rep.Mismatches {
			b.WriteString("  " + m.String() + "\n")
		}
	}
	return b.String()
}
