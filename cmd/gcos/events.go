package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"gcos"
	"gcos/events"
	"gcos/postgres"
)

// eventsCommand is `gcos events`: the governance event domain (SB-11). Registering writes the vocabulary inactive;
// activating one type needs an approval reference; promoting moves captured signals of active types to the outbox.
func (a *app) eventsCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "events", Short: "the governance event domain: register, activate, promote, list"}

	register := &cobra.Command{
		Use:   "register",
		Short: "write the governance vocabulary into event_type_registry, inactive (idempotent; never deactivates)",
		Args:  cobra.NoArgs,
		RunE: storeRunE(a, func(ctx context.Context, store *postgres.Store, _ []string) (events.RegisterResult, error) {
			return events.New(store).RegisterVocabulary(ctx)
		}, func(res events.RegisterResult) string {
			human := fmt.Sprintf("domain %s: %d types registered (inactive), %d already present, vocabulary of %d",
				res.Domain, len(res.Registered), res.Present, res.Total)
			if len(res.Drifted) > 0 {
				human += fmt.Sprintf("\ndiffering from the vocabulary (left as they are): %s", strings.Join(res.Drifted, ", "))
			}
			if len(res.Registered) > 0 {
				human += "\nactivate each with: gcos events activate TYPE --approval REF"
			}
			return human
		}),
	}

	var approval, by string
	activate := &cobra.Command{
		Use:   "activate TYPE",
		Short: "activate one registered governance event type (needs --approval; audited)",
		Args: argsAnd(cobra.ExactArgs(1), func(args []string) error {
			if strings.TrimSpace(approval) == "" {
				return gcos.Errorf(gcos.EINVALID, "--approval: an approval reference is required to activate %s", args[0])
			}
			return nil
		}),
		RunE: storeRunE(a, func(ctx context.Context, store *postgres.Store, args []string) (events.ActivateResult, error) {
			return events.New(store).ActivateEventType(ctx, args[0], approval, by)
		}, func(res events.ActivateResult) string {
			human := fmt.Sprintf("%s is active (approval %s, by %s, audit row %d)", res.EventType, res.ApprovalRef,
				res.ActivatedBy, res.AuditID)
			if !res.Activated {
				human = fmt.Sprintf("%s was already active: nothing changed", res.EventType)
			}
			if res.PendingBacklog > 0 {
				human += fmt.Sprintf("\n%d captured signals wait: run gcos events promote", res.PendingBacklog)
			}
			return human
		}),
	}
	activate.Flags().StringVar(&approval, "approval", "", "approval reference (required)")
	activate.Flags().StringVar(&by, "by", "gcos", "who activates (recorded in the audit row)")

	promote := &cobra.Command{
		Use:   "promote",
		Short: "move captured signals whose type is now active from event_pending to event_outbox, in capture order (announcements under the emission discipline)",
		Args:  cobra.NoArgs,
		RunE: storeRunE(a, func(ctx context.Context, store *postgres.Store, _ []string) (postgres.PromoteResult, error) {
			return events.New(store).PromotePending(ctx)
		}, func(res postgres.PromoteResult) string {
			return fmt.Sprintf("%d promoted, %d already in the outbox, %d dead-lettered, %d still waiting (type not active, or a cooldown)\n"+
				"announcements: %d held back by a ceiling, %d coalesced into a later one, %d digests, %d escalations",
				res.Promoted, res.Duplicates, res.DeadLettered, res.Held, res.HeldBack, res.Coalesced, res.Digests, res.Escalations)
		}),
	}

	list := &cobra.Command{
		Use:   "list",
		Short: "list the governance event types, their state and captured backlog",
		Args:  cobra.NoArgs,
		RunE: storeRunE(a, func(ctx context.Context, store *postgres.Store, _ []string) ([]events.EventTypeRow, error) {
			return events.New(store).ListEventTypes(ctx)
		}, func(rows []events.EventTypeRow) string {
			if len(rows) == 0 {
				return "no governance event types registered: run gcos events register"
			}
			var b strings.Builder
			tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TYPE\tSTREAM\tLANE\tSEVERITY\tSTATE\tPENDING")
			for _, r := range rows {
				state := "inactive"
				if r.Active {
					state = "active"
				}
				if !r.InVocabulary {
					state += " (not in vocabulary)"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\n", r.EventType, r.EventStream, r.DeliveryLane, r.DefaultSeverity, state, r.Pending)
			}
			_ = tw.Flush()
			return b.String()
		}),
	}

	var limit int
	var recipient string
	notifications := &cobra.Command{
		Use:   "notifications RECIPIENT",
		Short: "show the governance events RECIPIENT should be notified of (subscribed, not muted, not yet read)",
		Args:  cobra.ExactArgs(1),
		RunE: storeRunE(a, func(ctx context.Context, store *postgres.Store, args []string) ([]events.Notification, error) {
			recipient = args[0]
			return events.New(store).Notifications(ctx, args[0], limit)
		}, func(ns []events.Notification) string {
			if len(ns) == 0 {
				return "nothing to notify " + recipient + " of"
			}
			var b strings.Builder
			for _, n := range ns {
				fmt.Fprintf(&b, "%s  %s  %s  (event %s)\n", n.Event.Type, n.Event.CanonicalAddress, n.Event.Severity, n.Event.ID)
			}
			return b.String()
		}),
	}
	notifications.Flags().IntVar(&limit, "limit", 100, "at most this many (1..1000)")
	flagRange(notifications.Flags(), "limit", 1, 1000)

	cmd.AddCommand(register, activate, promote, list, notifications)
	return cmd
}
