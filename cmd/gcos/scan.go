package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"gcos"
	"gcos/daemon"
	"gcos/postgres"
)

// scanCommand is `gcos scan --mode M [--once]`: one scan loop, or one pass of it.
func (a *app) scanCommand() *cobra.Command {
	var mode string
	var once bool
	cmd := &cobra.Command{
		Use:   "scan",
		Short: "re-evaluate dirty and expired groups (event | incremental | full audit)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			m := map[string]string{"event": postgres.ModeEvent, "incremental": postgres.ModeIncremental, "full": postgres.ModeFullAudit, "full_audit": postgres.ModeFullAudit}[mode]
			if m == "" {
				return gcos.Errorf(gcos.EINVALID, "--mode: %s is not one of event, incremental, full", gcos.Quote(mode))
			}
			store, err := a.openPrepared(cmd.Context(), false)
			if err != nil {
				return err
			}
			d, err := daemon.New(daemon.Config{Store: store, Logger: a.logger, ScanModes: []string{m}})
			if err != nil {
				return err
			}
			if !once {
				return d.Scan.Run(cmd.Context())
			}
			p, err := d.Scan.Once(cmd.Context(), m)
			if err != nil {
				return err
			}
			p.Token = writeToken(cmd.Context(), a, store)
			human := fmt.Sprintf("%s run %s: %d groups scanned, %d verdict changes, %d failed, storm %v, %d still dirty",
				p.Mode, p.RunID, p.Scanned, p.VerdictChanges, p.Failed, p.Storm, p.Remaining)
			if p.Audit != nil {
				au := p.Audit
				human = fmt.Sprintf("full audit %s: snapshot %d (previous %v), %d groups changed (%d signalled, %d pending, %d lost signals → snapshot_drift), %d expired, %d scanned, invariant closes: %v, in %s",
					au.RunID, au.SnapshotID, derefInt(au.PreviousID), au.ChangedGroups, au.Signalled, au.Pending, len(au.LostSignals),
					au.Expired, au.Scanned, au.Ledger.Closes, au.Elapsed.Round(1e6))
			}
			return a.print(p, human+tokenText(p.Token))
		},
	}
	cmd.Flags().StringVar(&mode, "mode", "incremental", "event | incremental | full")
	cmd.Flags().BoolVar(&once, "once", false, "run one pass and exit")
	return cmd
}

// derefInt is *p, or "none" for nil.
func derefInt(p *int64) string {
	if p == nil {
		return "none"
	}
	return fmt.Sprint(*p)
}
