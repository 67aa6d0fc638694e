package main

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"gcos"
	"gcos/events"
	"gcos/httpapi"
	"gcos/postgres"
)

// notificationsCommand is `gcos notifications list|read|mute|unmute|subscribe`: the governance events a principal
// is notified of, worked by that principal (--by, or the token's principal through the daemon).
func (a *app) notificationsCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "notifications", Short: "your governance notifications: list, read, mute, unmute, subscribe"}
	var by string
	var limit int
	list := &cobra.Command{
		Use: "list", Short: "your unread notifications (subscribed, not muted, not read), the unread count and your mutes", Args: cobra.NoArgs,
		RunE: reachRunE(a, func(ctx context.Context, api *apiClient, _ []string) (in events.NotificationInbox, err error) {
			return in, api.as(by).get(ctx, "/v1/notifications", url.Values{"limit": {strconv.Itoa(limit)}}, &in)
		}, func(ctx context.Context, store *postgres.Store, _ []string) (events.NotificationInbox, error) {
			return events.New(store).Inbox(ctx, cliActor(by).Principal, limit)
		}, inboxText),
	}
	byFlag(list.Flags(), &by, "whose notifications")
	list.Flags().IntVar(&limit, "limit", 100, "at most this many (1..1000)")
	flagRange(list.Flags(), "limit", 1, 1000)

	var all bool
	read := &cobra.Command{
		Use: "read EVENT_ID... | --all", Short: "mark notifications read (seen by you; others still see them unread)", Args: cobra.ArbitraryArgs,
		RunE: reachRunE(a, func(ctx context.Context, api *apiClient, args []string) (res events.ReadResult, err error) {
			return res, api.as(by).post(ctx, "/v1/notifications/read", httpapi.ReadRequest{EventIDs: args, All: all}, &res)
		}, func(ctx context.Context, store *postgres.Store, args []string) (events.ReadResult, error) {
			return events.New(store).MarkReadAs(ctx, args, all, cliActor(by))
		}, func(res events.ReadResult) string {
			return fmt.Sprintf("%s: %d marked read, %d already read", res.Recipient, res.Marked, res.Already)
		}),
	}
	byFlag(read.Flags(), &by, "who read them")
	read.Flags().BoolVar(&all, "all", false, "every notification you have unread")

	cmd.AddCommand(list, read,
		a.selectorCommand(&by, "mute", "stop notifying you of a stream, a type or one finding (the finding stays open and keeps counting)", (*events.Loop).MuteAs),
		a.selectorCommand(&by, "unmute", "undo a mute (the same selectors it was muted with)", (*events.Loop).UnmuteAs),
		a.selectorCommand(&by, "subscribe", "notify you of a stream, a type or one finding", (*events.Loop).SubscribeAs))
	return cmd
}

// selectorCommand is mute, unmute or subscribe.
func (a *app) selectorCommand(by *string, action, short string,
	change func(*events.Loop, context.Context, events.NotificationSelector, gcos.Actor) (events.SubscriptionChange, error)) *cobra.Command {
	var sel events.NotificationSelector
	cmd := &cobra.Command{
		Use: action + " --type PATTERN | --stream PATTERN | --finding ID | --findings", Short: short, Args: cobra.NoArgs,
		RunE: reachRunE(a, func(ctx context.Context, api *apiClient, _ []string) (ch events.SubscriptionChange, err error) {
			return ch, api.as(*by).post(ctx, "/v1/notifications/"+action, sel, &ch)
		}, func(ctx context.Context, store *postgres.Store, _ []string) (events.SubscriptionChange, error) {
			return change(events.New(store), ctx, sel, cliActor(*by))
		}, func(ch events.SubscriptionChange) string {
			state := "done"
			if !ch.Changed {
				state = "already so, nothing changed"
			}
			return fmt.Sprintf("%s %s: %s (%s)", ch.Action, selectorText(ch.Subscription), state, ch.Subscription.ID)
		}),
	}
	f := cmd.Flags()
	f.StringVar(&sel.EventType, "type", "", "event type pattern (e.g. governance.candidate.*)")
	f.StringVar(&sel.Stream, "stream", "", "event stream pattern (e.g. handoff)")
	f.Int64Var(&sel.FindingID, "finding", 0, "one finding's announcements (its id)")
	f.BoolVar(&sel.Findings, "findings", false, "only findings' announcements (opened, reopened, resolved)")
	flagRange(f, "finding", 0, 1<<62)
	byFlag(f, by, "whose notifications")
	return cmd
}

func selectorText(s events.Subscription) string {
	var parts []string
	if s.EventType != nil {
		parts = append(parts, "type "+*s.EventType)
	}
	if s.EventStream != nil {
		parts = append(parts, "stream "+*s.EventStream)
	}
	if s.ScopeSubjectTable != nil {
		parts = append(parts, "subject table "+*s.ScopeSubjectTable)
	}
	filter := s.ScopeFilter
	if _, ok := filter["transition"]; ok && len(filter) == 1 {
		parts = append(parts, "every finding")
	} else if k, ok := filter["coalesce_key"]; ok {
		parts = append(parts, fmt.Sprintf("finding %v", k))
	} else if len(filter) > 0 {
		parts = append(parts, fmt.Sprintf("filter %v", filter))
	}
	if len(parts) == 0 {
		return "every governance event"
	}
	return strings.Join(parts, ", ")
}

func inboxText(in events.NotificationInbox) string {
	var b strings.Builder
	more := ""
	if in.UnreadMore {
		more = "+"
	}
	fmt.Fprintf(&b, "%s: %d%s unread\n", in.Recipient, in.Unread, more)
	if len(in.Notifications) > 0 {
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "EVENT\tCREATED\tTYPE\tSEVERITY\tSUBJECT\tEXPLAIN")
		for _, n := range in.Notifications {
			created := "-"
			if n.CreatedAt != nil {
				created = anyTime(*n.CreatedAt)
			}
			subject := n.Event.SubjectRef
			if id, ok := n.Event.Payload["issue_id"]; ok {
				subject = fmt.Sprintf("finding %v %s", id, subject)
			}
			explain := "-"
			if n.Explain != nil {
				explain = n.Explain.Path
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", n.Event.ID, created, n.Event.Type, n.Event.Severity, subject, explain)
		}
		_ = tw.Flush()
	}
	if len(in.Subscriptions) == 0 {
		fmt.Fprintf(&b, "no subscriptions: %s is notified of nothing (gcos notifications subscribe)\n", in.Recipient)
	}
	for _, s := range in.Subscriptions {
		kind := "subscribed"
		if s.Mute {
			kind = "muted"
		}
		fmt.Fprintf(&b, "%-10s %s\n", kind, selectorText(s))
	}
	return b.String()
}
