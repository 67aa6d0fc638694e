package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"gcos"
	"gcos/postgres"
	"gcos/scan"
)

// exitBlock is the exit status of a gate block (SPEC §13).
const exitBlock = 3

const gateCommandName = "gate"

// gateCommand is `gcos gate --object C:E [--action write|read]`: exit 0 allow, 3 block. Anything else is a block
// too (the gate fails closed): a malformed object or action, a usage or configuration error, an unreachable
// database, a timeout (gateFailed prints those as a block decision whose reason is the error).
func (a *app) gateCommand() *cobra.Command {
	var object, action, atLeast string
	cmd := &cobra.Command{
		Use:   gateCommandName + " --object COLLECTION:CODE [--action write|read]",
		Short: "may this action proceed on this object? exit 0 allow, 3 block or any error (fails closed)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if object == "" {
				return gcos.Errorf(gcos.EINVALID, "--object COLLECTION:CODE is required")
			}
			openCtx := cmd.Context()
			if a.databaseURL != "" {
				// A pipeline waits on this answer: an unreachable server blocks within the gate's timeout instead
				// of the operating system's connect timeout. (Starting the embedded cluster is not bounded by it.)
				var cancel context.CancelFunc
				openCtx, cancel = context.WithTimeout(openCtx, a.cfg.Gate.Timeout.Duration())
				defer cancel()
			}
			store, err := a.openPrepared(openCtx, false)
			if err != nil {
				return err
			}
			// As the daemon's gate does: a stale high-risk group is re-scanned within gate.rescan_deadline.
			store.SetRescanner(scan.New(store).RescanGroups)
			res := store.GateWith(cmd.Context(), object, action, postgres.GateOptions{AtLeast: atLeast})
			if err := a.print(res, gateText(res)); err != nil {
				return err
			}
			if res.Decision != gcos.GateAllow {
				return &exitError{code: exitBlock}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&object, "object", "", "the object, COLLECTION:CODE")
	cmd.Flags().StringVar(&action, "action", gcos.ActionWrite, "the action: write or read")
	cmd.Flags().StringVar(&atLeast, "at-least", "", "a consistency token (a write's or an answer's): decide on at least that state")
	return cmd
}

// gateFailed answers a gate command that could not decide: a block, exit 3, printed as a decision whose reason is
// the error (JSON with --json, even when the flags could not be parsed).
func (a *app) gateFailed(cmd *cobra.Command, args []string, err error) int {
	object, _ := cmd.Flags().GetString("object")
	action, _ := cmd.Flags().GetString("action")
	if errors.Is(err, context.DeadlineExceeded) {
		err = gcos.Errorf(gcos.EUNAVAILABLE, "no answer within %s", a.cfg.Gate.Timeout.Duration())
	}
	// One line: driver errors span several (one per address tried).
	reason := a.redact(strings.Join(strings.Fields(err.Error()), " "))
	res := postgres.GateResult{Object: object, Action: action, Decision: gcos.GateBlock, Consulted: []postgres.ConsultedRow{},
		Reasons: []string{fmt.Sprintf("the gate could not decide (%s); it fails closed", reason)}}
	a.jsonOut = a.jsonOut || slices.Contains(args, "--json") || slices.Contains(args, "--json=true")
	if perr := a.print(res, gateText(res)); perr != nil {
		fmt.Fprintln(a.stderr, "gcos:", perr)
	}
	return exitBlock
}

func gateText(res postgres.GateResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "decision:  %s\n", strings.ToUpper(res.Decision))
	fmt.Fprintf(&b, "object:    %s (action %s)\n", res.Object, res.Action)
	fmt.Fprintf(&b, "effective: %s\n", orDash(string(res.EffectiveVerdict)))
	fmt.Fprintf(&b, "risk:      %s\n", orDash(res.RiskClass))
	if res.Rescanned {
		b.WriteString("rescanned: the gate re-scanned the stale groups it read, and decided on their fresh verdicts\n")
	}
	if res.RescanScheduled {
		b.WriteString("rescan:    scheduled\n")
	}
	b.WriteString("reasons:\n")
	for _, r := range res.Reasons {
		fmt.Fprintf(&b, "  - %s\n", r)
	}
	if res.Statement != "" {
		fmt.Fprintf(&b, "statement: %s\n", res.Statement)
	}
	if res.Token != "" {
		fmt.Fprintf(&b, "as of:     %s (%s, token %s)\n", res.AsOf.Format(time.RFC3339Nano), res.Source, res.Token)
	}
	if len(res.Consulted) > 1 {
		b.WriteString("consulted:\n")
		for _, c := range res.Consulted {
			fmt.Fprintf(&b, "  - %s %s %s: %s\n", c.Source, c.Key, orDash(c.Scope), c.Decision)
		}
	}
	return b.String()
}
