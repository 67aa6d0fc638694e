package events_test

import (
	"testing"
	"time"

	"gcos"
	"gcos/events"
	"gcos/postgres"
)

// TestSignalKeysKeptForTheWindow: a signal's idempotency key is kept for the dedup window (events.signal_key_keep)
// whatever partition holds it: a replay of a key first seen days ago, in an older partition than today's, is still
// a duplicate. The promoter makes the key table's partitions and drops those past the window, after which a replay
// of a key it held announces again; a key inside the window stays.
func TestSignalKeysKeptForTheWindow(t *testing.T) {
	t.Parallel()
	e := newEvEnv(t)
	e.register(t)
	e.activate(t, gcos.ChangeObjectBorn.EventType())
	emit := func(corr string) string {
		t.Helper()
		return e.emit(t, handoffEmit(gcos.ChangeObjectBorn, "fin_invoices", "INV-1", corr, evBase)).Outcome
	}
	for _, corr := range []string{"seen-3-days-ago", "seen-1-day-ago", "seen-now"} {
		if got := emit(corr); got != postgres.EmitOutcomeEmitted {
			t.Fatalf("first emit of %s: %s", corr, got)
		}
	}
	// Age two keys: each is filed under the hour it was first seen.
	e.exec(t, `UPDATE governance_signal_key SET first_seen_at = date_bin('1 hour', now() - interval '3 days', '0001-01-01 00:00:00+00')
		WHERE correlation_id = 'seen-3-days-ago'`)
	e.exec(t, `UPDATE governance_signal_key SET first_seen_at = date_bin('1 hour', now() - interval '1 day', '0001-01-01 00:00:00+00')
		WHERE correlation_id = 'seen-1-day-ago'`)

	// A window of 7 days in daily partitions: partitions made, for the aged keys' days too; nothing dropped.
	daily := func(keep time.Duration) *events.Loop {
		cfg := gcos.DefaultConfig()
		cfg.Events.SignalKeyKeep, cfg.Events.SignalKeyPartition = gcos.Duration(keep), gcos.Duration(24*time.Hour)
		return events.New(postgres.New(e.pool, cfg, nil))
	}
	if _, err := daily(7 * 24 * time.Hour).PromotePending(e.ctx); err != nil {
		t.Fatal(err)
	}
	parts, err := postgres.LogPartitions(e.ctx, e.pool, postgres.SignalKeyLog)
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) < 5 { // 3 days ago, yesterday, today and two days ahead
		t.Fatalf("partitions after the first maintenance: %v", parts)
	}
	if n := e.n(t, `SELECT count(*) FROM governance_signal_key_default`); n != 0 {
		t.Fatalf("%d keys left in the default partition", n)
	}
	if n := e.n(t, `SELECT count(DISTINCT tableoid) FROM governance_signal_key`); n != 3 {
		t.Fatalf("the three keys lie in %d partitions, want 3", n)
	}
	for _, corr := range []string{"seen-3-days-ago", "seen-1-day-ago", "seen-now"} {
		if got := emit(corr); got != postgres.EmitOutcomeDuplicate {
			t.Fatalf("replay of %s inside the window: %s, want duplicate", corr, got)
		}
	}

	// A window of two days: the partition of the key first seen 3 days ago goes, and only it.
	if _, err := daily(48 * time.Hour).PromotePending(e.ctx); err != nil {
		t.Fatal(err)
	}
	after, err := postgres.LogPartitions(e.ctx, e.pool, postgres.SignalKeyLog)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(parts)-1 || after[0] != parts[1] {
		t.Fatalf("partitions after a two-day window: %v, before %v (want the oldest dropped)", after, parts)
	}
	if got := e.strings(t, `SELECT correlation_id FROM governance_signal_key ORDER BY 1`); len(got) != 2 || got[0] != "seen-1-day-ago" || got[1] != "seen-now" {
		t.Fatalf("keys kept: %v", got)
	}
	if got := emit("seen-3-days-ago"); got != postgres.EmitOutcomeEmitted {
		t.Fatalf("replay past the window: %s, want emitted again", got)
	}
	if got := emit("seen-1-day-ago"); got != postgres.EmitOutcomeDuplicate {
		t.Fatalf("replay inside the window: %s, want duplicate", got)
	}
}
