package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"gcos/daemon"
	"gcos/intake"
	"gcos/postgres"
)

// intakeCommand is `gcos intake [--once]`: the intake stage alone, or one catch-up pass of it.
func (a *app) intakeCommand() *cobra.Command {
	var once bool
	cmd := &cobra.Command{
		Use:   "intake",
		Short: "tail the source registries losslessly and dirty the groups each change provably affects",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			store, err := a.openPrepared(cmd.Context(), false)
			if err != nil {
				return err
			}
			d, err := daemon.New(daemon.Config{Store: store, Logger: a.logger})
			if err != nil {
				return err
			}
			w := d.Intake
			if err := w.Start(cmd.Context()); err != nil {
				return err
			}
			if !once {
				return w.Run(cmd.Context())
			}
			ticks, err := w.Once(cmd.Context())
			if err != nil {
				return err
			}
			var b strings.Builder
			for _, t := range ticks {
				fmt.Fprintf(&b, "%-20s read %d, applied %d, retry %d, dead-lettered %d, position %s\n", t.Source, t.Read, t.Applied, t.Failed, t.DeadLettered, t.Position)
			}
			return a.print(ticks, b.String())
		},
	}
	cmd.Flags().BoolVar(&once, "once", false, "catch up once and exit")
	return cmd
}

// cursorCommand is `gcos cursor list | reset SOURCE --to W`: the intake's cursors.
func (a *app) cursorCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "cursor", Short: "intake cursors"}
	list := &cobra.Command{
		Use: "list", Short: "list cursors", Args: cobra.NoArgs,
		RunE: storeRunE(a, func(ctx context.Context, store *postgres.Store, _ []string) ([]intake.Cursor, error) {
			return intake.New(store).ListCursors(ctx)
		}, func(cs []intake.Cursor) string {
			var b strings.Builder
			for _, c := range cs {
				fmt.Fprintf(&b, "%-20s %-20s seen %d, dead-lettered %d\n", c.Source, c.Position, c.EventsSeen, c.DeadLettered)
			}
			return b.String()
		}),
	}
	var to, by string
	reset := &cobra.Command{
		Use: "reset SOURCE", Short: "move a cursor back to a watermark (start | RFC3339 | RFC3339/id) to replay", Args: cobra.ExactArgs(1),
		RunE: storeRunE(a, func(ctx context.Context, store *postgres.Store, args []string) (intake.Cursor, error) {
			return intake.New(store).ResetCursorAs(ctx, args[0], to, cliActor(by))
		}, func(c intake.Cursor) string {
			return fmt.Sprintf("%s reset to %s", c.Source, c.Position)
		}),
	}
	reset.Flags().StringVar(&to, "to", "", "watermark: start, an RFC3339 instant, or instant/id")
	_ = reset.MarkFlagRequired("to")
	byFlag(reset.Flags(), &by, "who resets it (recorded in the audit row)")
	cmd.AddCommand(list, reset)
	return cmd
}
