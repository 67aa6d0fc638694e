package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"gcos"
	"gcos/client"
	"gcos/postgres"
)

// changesCommand is `gcos changes [--after CURSOR | --since TIME] [--limit N] [--follow]`: the verdict change log
// (SPEC §13 feed), through the daemon's API when one runs for the data dir, else from the database.
func (a *app) changesCommand() *cobra.Command {
	var after, since string
	var limit int
	var follow bool
	cmd := &cobra.Command{
		Use:   "changes [--after CURSOR | --since TIME] [--limit N] [--follow]",
		Short: "the verdict change log: the newest changes, a page after a cursor in commit order, or --follow every later one as it commits",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if after != "" && since != "" {
				return gcos.Errorf(gcos.EINVALID, "give --after (a cursor) or --since (a time), not both")
			}
			var sinceAt time.Time
			if since != "" {
				t, err := time.Parse(time.RFC3339Nano, since)
				if err != nil {
					return gcos.Errorf(gcos.EINVALID, "--since %s: want an RFC 3339 time, e.g. 2026-11-26T08:00:00Z", gcos.Quote(since))
				}
				sinceAt = t
			}
			if follow {
				if since != "" {
					return gcos.Errorf(gcos.EINVALID, "--follow reads on from a cursor (--after), not from a time")
				}
				return a.followChanges(cmd.Context(), cmp.Or(after, client.FromNow))
			}
			page, err := a.changesPage(cmd.Context(), after, since, sinceAt, limit)
			if err != nil {
				return err
			}
			return a.print(page, changesText(page))
		},
	}
	cmd.Flags().StringVar(&after, "after", "", "a cursor (an earlier answer's next), start (the oldest retained change) or now: the changes after it, in commit order")
	cmd.Flags().StringVar(&since, "since", "", "only changes stamped after this RFC 3339 time, oldest first")
	cmd.Flags().IntVar(&limit, "limit", postgres.DefaultChangeLimit, fmt.Sprintf("at most this many (1..%d)", postgres.MaxChangeLimit))
	flagRange(cmd.Flags(), "limit", 1, postgres.MaxChangeLimit)
	cmd.Flags().BoolVar(&follow, "follow", false, "print every change as it commits, from --after (default now), until interrupted; a dropped stream resumes where it was")
	return cmd
}

// changesPage reads one answer of the log, as GET /v1/changes answers it.
func (a *app) changesPage(ctx context.Context, after, since string, sinceAt time.Time, limit int) (postgres.ChangePage, error) {
	var page postgres.ChangePage
	if api := a.daemonAPI(ctx); api != nil {
		q := url.Values{"limit": {strconv.Itoa(limit)}}
		if after != "" {
			q.Set("after", after)
		}
		if since != "" {
			q.Set("since", since)
		}
		return page, api.get(ctx, "/v1/changes", q, &page)
	}
	store, err := a.openPrepared(ctx, false)
	if err != nil {
		return page, err
	}
	return store.Changes(ctx, postgres.ChangeQuery{After: after, Since: sinceAt, Limit: limit})
}

// followChanges prints every change after cursor as it commits: through the daemon's watch (Server-Sent Events,
// resumed after a dropped stream), else by reading the database's log every http.watch_poll.
func (a *app) followChanges(ctx context.Context, cursor string) error {
	emit := func(c any, line, next string) error {
		if a.jsonOut {
			b, err := json.Marshal(map[string]any{"change": c, "cursor": next})
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(a.stdout, string(b))
			return err
		}
		_, err := fmt.Fprintln(a.stdout, line)
		return err
	}
	if api := a.daemonAPI(ctx); api != nil {
		err := api.c.Watch(ctx, cursor, func(c client.Change) error {
			return emit(c, changeLine(c.ChangedAt, c.Subject, c.Key, c.ObjectRef, c.Scope, c.VerdictBefore, c.VerdictAfter,
				c.CoverageBefore, c.CoverageAfter, c.Why, c.LatencySeconds), c.Cursor)
		})
		return apiError("GET", "/v1/changes/watch", err)
	}
	store, err := a.openPrepared(ctx, false)
	if err != nil {
		return err
	}
	tick := time.NewTicker(a.cfg.HTTP.WatchPoll.Duration())
	defer tick.Stop()
	for {
		page, err := store.Changes(ctx, postgres.ChangeQuery{After: cursor, Limit: postgres.MaxChangeLimit})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		for _, c := range page.Changes {
			if err := emit(c, changeLine(c.ChangedAt, c.Subject, c.Key, c.ObjectRef, c.Scope, c.VerdictBefore, c.VerdictAfter,
				c.CoverageBefore, c.CoverageAfter, c.Why, c.LatencySeconds), page.CursorAfter(c)); err != nil {
				return err
			}
		}
		cursor = page.Next
		if page.More {
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// changesText is a page for people: one line per change, then the cursor to read on from.
func changesText(p postgres.ChangePage) string {
	var b strings.Builder
	for _, c := range p.Changes {
		b.WriteString(changeLine(c.ChangedAt, c.Subject, c.Key, c.ObjectRef, c.Scope, c.VerdictBefore, c.VerdictAfter,
			c.CoverageBefore, c.CoverageAfter, c.Why, c.LatencySeconds) + "\n")
	}
	if len(p.Changes) == 0 {
		b.WriteString("no verdict change\n")
	}
	more := ""
	if p.More {
		more = " (more wait: read on at once)"
	}
	fmt.Fprintf(&b, "as of %s; read on with --after %s%s\n", p.AsOf.UTC().Format(time.RFC3339), p.Next, more)
	return b.String()
}

// changeLine is one change for people.
func changeLine(at time.Time, subject, key string, object, scope *string, before, after string, covBefore, covAfter *string, why string, latency *float64) string {
	what := "group " + key
	if subject == "object" && object != nil {
		what = "object " + *object
	}
	if scope != nil {
		what += " in " + *scope
	}
	verdict := after
	if before != after {
		verdict = before + " → " + after
	}
	s := fmt.Sprintf("%s  %s: %s", at.UTC().Format(time.RFC3339Nano), what, verdict)
	if covBefore != nil || covAfter != nil {
		s += fmt.Sprintf(", coverage %s → %s", deref(covBefore), deref(covAfter))
	}
	s += " (" + why
	if latency != nil {
		s += fmt.Sprintf(", %.3f s after its mark", *latency)
	}
	return s + ")"
}
