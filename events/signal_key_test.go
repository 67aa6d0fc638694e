package events_test

import (
	"testing"

	"gcos"
	"gcos/postgres"
)

// TestSignalKeysKeptForTheWindow: a signal's idempotency key is kept for the dedup window (events.signal_key_keep) in
// either of two generations: a replay of a key the generation before holds is still a duplicate. The promoter
// rotates the generations once the current one has been current for the window, emptying the older one, after which
// a replay of a key it held announces again while a key of the generation kept stays a duplicate. A rotation waits
// for a transaction that claimed keys: it defers while one is open, and the key that transaction claimed survives it.
func TestSignalKeysKeptForTheWindow(t *testing.T) {
	t.Parallel()
	e := newEvEnv(t)
	e.register(t)
	e.activate(t, gcos.ChangeObjectBorn.EventType())
	emit := func(corr string) string {
		t.Helper()
		return e.emit(t, handoffEmit(gcos.ChangeObjectBorn, "fin_invoices", "INV-1", corr, evBase)).Outcome
	}
	current := func() int {
		t.Helper()
		return e.n(t, `SELECT current FROM gcos_signal_key_generation`)
	}
	windowAgo := func() { // the current generation has been current for longer than the window (7 days)
		t.Helper()
		e.exec(t, `UPDATE gcos_signal_key_generation SET since = now() - interval '7 days 1 minute'`)
	}
	if got := emit("first"); got != postgres.EmitOutcomeEmitted {
		t.Fatalf("first emit: %s", got)
	}
	e.promote(t)
	if g := current(); g != 0 {
		t.Fatalf("rotated inside the window: generation %d is current", g)
	}

	windowAgo()
	e.promote(t)
	if g := current(); g != 1 {
		t.Fatalf("after the window generation %d is current, want 1", g)
	}
	if got := emit("first"); got != postgres.EmitOutcomeDuplicate {
		t.Fatalf("replay of a key of the generation before: %s, want duplicate", got)
	}
	if got := emit("second"); got != postgres.EmitOutcomeEmitted {
		t.Fatalf("a new key: %s", got)
	}
	if n := e.n(t, `SELECT count(*) FROM governance_signal_key_g1 WHERE correlation_id = 'second'`); n != 1 {
		t.Fatal("a new key is not in the current generation")
	}

	// A transaction that claimed a key is open: the rotation due waits for it no longer than its lock timeout.
	tx, err := e.pool.Begin(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(e.ctx) //nolint:errcheck // after Commit it is a no-op
	if res, err := postgres.EmitSignal(e.ctx, tx, handoffEmit(gcos.ChangeObjectBorn, "fin_invoices", "INV-1", "held", evBase)); err != nil ||
		res.Outcome != postgres.EmitOutcomeEmitted {
		t.Fatalf("claim in an open transaction: %+v %v", res, err)
	}
	windowAgo()
	e.promote(t)
	if g := current(); g != 1 {
		t.Fatalf("rotated under an open claim: generation %d is current", g)
	}
	if err := tx.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.promote(t)
	if g := current(); g != 0 {
		t.Fatalf("after the claim committed generation %d is current, want 0", g)
	}
	for corr, want := range map[string]string{
		"first":  postgres.EmitOutcomeEmitted,   // its generation was emptied: past the window
		"second": postgres.EmitOutcomeDuplicate, // kept in the generation before
		"held":   postgres.EmitOutcomeDuplicate, // claimed just before the rotation
	} {
		if got := emit(corr); got != want {
			t.Errorf("replay of %s after the second rotation: %s, want %s", corr, got, want)
		}
	}
}
