package postgres_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
	"gcos/gcostest/wait"
	"gcos/postgres"
)

// heldRow is a scan in the middle of its tick: it started (its now(), the scan_time it writes) and holds a claimed
// candidate row until it writes the row clean and commits.
type heldRow struct {
	tx  pgx.Tx
	key string
}

func (b *bundle) holdRow(t *testing.T, key string) *heldRow {
	t.Helper()
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if _, err := tx.Exec(b.ctx, `SELECT 1 FROM governance_candidate_state WHERE group_key = $1 FOR UPDATE`, key); err != nil {
		t.Fatal(err)
	}
	return &heldRow{tx, key}
}

// clear writes the held row clean, as a scan tick does (scan_time is its transaction's start; counted_at when it
// read the counts: at its start, or now when countedNow), and commits.
func (h *heldRow) clear(t *testing.T, ctx context.Context, countedNow ...bool) {
	t.Helper()
	if _, err := h.tx.Exec(ctx, `UPDATE governance_candidate_state SET dirty = false, dirty_reason = NULL, recompute_status = 'ok',
		scan_time = now(), counted_at = CASE WHEN $2 THEN clock_timestamp() ELSE now() END WHERE group_key = $1`,
		h.key, len(countedNow) > 0 && countedNow[0]); err != nil {
		t.Fatal(err)
	}
	if err := h.tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// clearSeen writes the held row clean like clear, counted now under the snapshot its count reads (as CountGroups
// records it), and commits.
func (h *heldRow) clearSeen(t *testing.T, ctx context.Context) {
	t.Helper()
	if _, err := h.tx.Exec(ctx, `UPDATE governance_candidate_state SET dirty = false, dirty_reason = NULL, recompute_status = 'ok',
		scan_time = now(), counted_at = clock_timestamp(), counted_snapshot = pg_current_snapshot() WHERE group_key = $1`, h.key); err != nil {
		t.Fatal(err)
	}
	if err := h.tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// clearCounted writes the held row clean like clear, counted at its start and having read the births counted
// (ids not handed off yet), and commits.
func (h *heldRow) clearCounted(t *testing.T, ctx context.Context, counted []int64) {
	t.Helper()
	if _, err := h.tx.Exec(ctx, `UPDATE governance_candidate_state SET dirty = false, dirty_reason = NULL, recompute_status = 'ok',
		scan_time = now(), counted_at = now(), counted_births = $2 WHERE group_key = $1`, h.key, counted); err != nil {
		t.Fatal(err)
	}
	if err := h.tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// markBirths marks key dirty in one transaction for the births (ids) a handoff hands off, and for a retirement too
// when retired.
func (b *bundle) markBirths(t *testing.T, key string, births []int64, retired bool) {
	t.Helper()
	byReason := map[string][]string{"handoff:" + string(gcos.ChangeObjectBorn): {key}}
	if retired {
		byReason["handoff:"+string(gcos.ChangeObjectRetired)] = []string{key}
	}
	if err := b.store.InTx(b.ctx, func(tx pgx.Tx) error {
		_, err := postgres.MarkChangesTx(b.ctx, tx, byReason, map[string][]int64{key: births})
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// markSoon marks key dirty for reason in its own transaction and reports the outcome on the returned channel.
func (b *bundle) markSoon(key, reason string) <-chan error {
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
		defer cancel()
		_, err := b.store.MarkDirty(ctx, []string{key}, reason)
		done <- err
	}()
	return done
}

func (b *bundle) settlePending(t *testing.T) postgres.PendingMarks {
	t.Helper()
	rs, err := b.store.CurrentRuleset(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	var res postgres.PendingMarks
	if err := b.store.InTx(b.ctx, func(tx pgx.Tx) error {
		res, err = postgres.ApplyPendingMarks(b.ctx, tx, rs.Version, postgres.PendingMarkBatch)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return res
}

// TestPendingMarks: a membership mark that finds its group dirty and held by a scan neither waits for the scan nor
// is lost when the scan clears the row over a count from before it: it is kept pending, owed once the scan commits,
// and the next settling marks the row dirty again. A scan that started after the mark settles it. A mark for any
// other reason still waits for the scan and is judged on what it committed.
func TestPendingMarks(t *testing.T) {
	t.Parallel()
	b := seededWorld(t, 1500, nil)
	born := "handoff:" + string(gcos.ChangeObjectBorn)
	key := b.strs(t, `SELECT group_key FROM governance_candidate_state c JOIN v_current_ruleset USING (ruleset_version) ORDER BY 1 LIMIT 1`)[0]
	pending := func() int64 {
		return b.count(t, `SELECT count(*) FROM governance_pending_mark WHERE $1 = ANY(group_keys)`, key)
	}
	owed := func() int64 {
		return b.count(t, `SELECT count(*) FROM v_pending_mark_owed WHERE group_key = $1`, key)
	}
	// makeDirty starts from a clean row with nothing pending (a scan after every mark) and marks it.
	makeDirty := func() {
		b.holdRow(t, key).clear(t, b.ctx)
		b.settlePending(t)
		if pending() != 0 {
			t.Fatal("a mark stays pending after a scan that started after it")
		}
		if _, err := b.store.MarkDirty(b.ctx, []string{key}, born); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("a scan that counted before the mark", func(t *testing.T) {
		makeDirty()
		scan := b.holdRow(t, key) // claimed before the birth was handed off
		if err := <-b.markSoon(key, born); err != nil {
			t.Fatalf("a membership mark on a held dirty row: %v", err)
		}
		if pending() != 1 || owed() != 0 {
			t.Fatalf("pending %d, owed %d: want the mark pending, not owed while the row is dirty", pending(), owed())
		}
		scan.clear(t, b.ctx)
		if owed() != 1 {
			t.Fatal("the scan cleared the row over a count from before the mark, and no mark is owed")
		}
		other := b.holdRow(t, key) // another transaction holds the owed row: settling waits for no one
		if res := b.settlePending(t); res.Marked != 0 || res.Held != 1 || pending() != 1 {
			t.Fatalf("settling an owed mark on a held row: %+v, %d pending; want it held and kept pending", res, pending())
		}
		if err := other.tx.Rollback(b.ctx); err != nil {
			t.Fatal(err)
		}
		if res := b.settlePending(t); res.Marked != 1 || res.Held != 0 {
			t.Fatalf("settling marked %+v, want 1 group", res)
		}
		if n := b.count(t, `SELECT count(*) FROM governance_candidate_state c
			WHERE group_key = $1 AND dirty AND dirty_reason = $2 AND recompute_status = 'dirty'
			  AND dirtied_at > scan_time`, key, born); n != 1 {
			t.Fatal("the owed mark is not on the row")
		}
		if pending() != 0 {
			t.Fatal("a settled mark stays pending")
		}
	})

	t.Run("a scan that started after the mark", func(t *testing.T) {
		makeDirty()
		if _, err := b.store.MarkDirty(b.ctx, []string{key}, born); err != nil {
			t.Fatal(err)
		}
		if pending() != 1 {
			t.Fatal("a membership mark on a dirty row is not pending")
		}
		if res := b.settlePending(t); res.Marked != 0 || res.Held != 0 || pending() != 1 {
			t.Fatalf("settling a mark whose row is still dirty: %+v and %d pending, want nothing marked and 1 pending", res, pending())
		}
		b.holdRow(t, key).clear(t, b.ctx)
		if owed() != 0 {
			t.Fatal("a scan that started after the mark counted the change, yet the mark is owed")
		}
		if res := b.settlePending(t); res.Marked != 0 || pending() != 0 {
			t.Fatalf("settling: %+v and %d pending, want nothing marked and nothing pending", res, pending())
		}
		if n := b.count(t, `SELECT count(*) FROM governance_candidate_state WHERE group_key = $1 AND dirty`, key); n != 0 {
			t.Fatal("the row was marked again")
		}
	})

	t.Run("a scan that started before the mark and counted after it", func(t *testing.T) {
		makeDirty()
		scan := b.holdRow(t, key)
		if err := <-b.markSoon(key, born); err != nil {
			t.Fatal(err)
		}
		scan.clear(t, b.ctx, true)
		if owed() != 0 {
			t.Fatal("the scan counted after the mark, yet the mark is owed")
		}
		if res := b.settlePending(t); res.Marked != 0 || pending() != 0 {
			t.Fatalf("settling: %+v and %d pending, want nothing marked and nothing pending", res, pending())
		}
	})

	// The mark is stamped inside its transaction, which may commit after a scan began counting: that count read
	// the kept counts without the change (a retired birth still counted where it was), so it settles the mark only
	// if its snapshot saw the marking transaction, whatever the clocks say.
	t.Run("a mark whose transaction commits after the count began", func(t *testing.T) {
		retired := "handoff:" + string(gcos.ChangeObjectRetired)
		makeDirty()
		marking, err := b.pool.Begin(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = marking.Rollback(context.Background()) })
		if _, err := postgres.MarkChangesTx(b.ctx, marking, map[string][]string{retired: {key}}, nil); err != nil {
			t.Fatal(err)
		}
		scan := b.holdRow(t, key) // the mark found the row dirty and took no lock: it is pending, not committed
		scan.clearSeen(t, b.ctx)
		if err := marking.Commit(b.ctx); err != nil {
			t.Fatal(err)
		}
		if n := b.count(t, `SELECT count(*) FROM governance_pending_mark p JOIN governance_candidate_state c
			ON c.group_key = $1 AND c.ruleset_version = p.ruleset_version
			WHERE $1 = ANY(p.group_keys) AND c.counted_at > p.marked_at[1]`, key); n != 1 {
			t.Fatal("want the count stamped after the mark, so that time alone would take the mark as counted")
		}
		if owed() != 1 {
			t.Fatal("the count did not see the marking transaction, yet the mark is not owed")
		}
		if res := b.settlePending(t); res.Marked != 1 || pending() != 0 {
			t.Fatalf("settling: %+v and %d pending, want the row marked again", res, pending())
		}

		// A count whose snapshot saw the marking transaction commit includes the change: the mark is settled.
		makeDirty()
		if _, err := b.store.MarkDirty(b.ctx, []string{key}, retired); err != nil {
			t.Fatal(err)
		}
		b.holdRow(t, key).clearSeen(t, b.ctx)
		if owed() != 0 {
			t.Fatal("the count saw the marking transaction, yet the mark is owed")
		}
		if res := b.settlePending(t); res.Marked != 0 || pending() != 0 {
			t.Fatalf("settling: %+v and %d pending, want nothing marked and nothing pending", res, pending())
		}
	})

	t.Run("a mark for another reason waits for the scan", func(t *testing.T) {
		makeDirty()
		scan := b.holdRow(t, key)
		done := b.markSoon(key, gcos.DirtyAxis)
		wait.For(t, time.Minute, "the mark waits for the scan's row", func() bool {
			return b.count(t, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`) > 0
		})
		scan.clear(t, b.ctx)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if n := b.count(t, `SELECT count(*) FROM governance_candidate_state WHERE group_key = $1 AND dirty AND dirty_reason = $2`, key, gcos.DirtyAxis); n != 1 {
			t.Fatal("the mark judged the row as it was before the scan committed")
		}
		if pending() != 0 {
			t.Fatal("a mark for another reason than membership was left pending")
		}
	})

	// A scan counts the births the tail has not handed off yet: one that read every birth behind a mark includes
	// it, even though it began before the handoff marked their group.
	t.Run("a scan that read the births before their handoff", func(t *testing.T) {
		for _, tc := range []struct {
			name    string
			counted []int64
			retired bool
			owed    bool
		}{
			{"every birth read", []int64{7, 8, 9}, false, false},
			{"a birth not read", []int64{7, 9}, false, true},
			{"no count of births recorded", nil, false, true},
			{"a retirement marked the group too", []int64{7, 8, 9}, true, true},
		} {
			makeDirty()
			scan := b.holdRow(t, key)
			b.markBirths(t, key, []int64{8, 7}, tc.retired)
			if pending() != 1 {
				t.Fatalf("%s: the births' mark on a dirty row is not pending", tc.name)
			}
			scan.clearCounted(t, b.ctx, tc.counted)
			if got := owed() == 1; got != tc.owed {
				t.Fatalf("%s: owed %v, want %v", tc.name, got, tc.owed)
			}
			res := b.settlePending(t)
			if want := map[bool]int64{true: 1, false: 0}[tc.owed]; res.Marked != want || pending() != 0 {
				t.Fatalf("%s: settling %+v, %d pending; want %d marked and nothing pending", tc.name, res, pending(), want)
			}
		}
	})

	t.Run("an owed mark follows its row to the next ruleset", func(t *testing.T) {
		makeDirty()
		scan := b.holdRow(t, key)
		if err := <-b.markSoon(key, born); err != nil {
			t.Fatal(err)
		}
		scan.clear(t, b.ctx)
		if owed() != 1 {
			t.Fatal("the scan cleared the row over a count from before the mark, and no mark is owed")
		}
		from := b.sb10Active(t)
		next := b.sb10NewRuleset(t, "R-PENDING-CARRIED")
		b.activate(t, next)
		if n := b.count(t, `SELECT count(*) FROM governance_pending_mark WHERE $1 = ANY(group_keys) AND ruleset_version = $2`, key, next); n != 1 {
			t.Fatalf("the pending mark of %s was not moved to ruleset %s (from %s)", key, next, from)
		}
		dirty := b.count(t, `SELECT count(*) FROM governance_candidate_state WHERE group_key = $1 AND ruleset_version = $2 AND dirty`, key, next) == 1
		res := b.settlePending(t)
		switch {
		case dirty && (res.Marked != 0 || pending() != 1): // the activation re-marked the row itself: a scan settles it
			t.Fatalf("a row dirty under the new ruleset: settling %+v, %d pending; want the mark kept", res, pending())
		case !dirty && (res.Marked != 1 || pending() != 0):
			t.Fatalf("a row carried clean under the new ruleset: settling %+v, %d pending; want it marked again", res, pending())
		}
	})

	t.Run("a ruleset no longer current", func(t *testing.T) {
		b.exec(t, `INSERT INTO governance_pending_mark (ruleset_version, group_keys, reasons, marked_at)
			VALUES ('gone', ARRAY[$1], ARRAY[$2], ARRAY[clock_timestamp()])`, key, born)
		b.settlePending(t)
		if n := b.count(t, `SELECT count(*) FROM governance_pending_mark WHERE ruleset_version = 'gone'`); n != 0 {
			t.Fatal("a mark of a ruleset no longer current was kept")
		}
	})
}

// TestCountGroupsReadsBirthsNotHandedOff: a scan's count includes the births the tail has not handed off yet and
// says which they are, so a pending mark of those births is settled by it; once handed off, a birth is counted
// through the cursor and no longer listed.
func TestCountGroupsReadsBirthsNotHandedOff(t *testing.T) {
	t.Parallel()
	b := seededWorld(t, 1500, nil)
	key := b.strs(t, `SELECT g.group_key FROM governance_group g JOIN governance_candidate_state c USING (group_key)
		WHERE g.lifecycle_status = 'active' AND g.object_class IS NOT NULL AND g.source_registry IS NOT NULL
		ORDER BY g.member_count DESC, 1 LIMIT 1`)[0]
	count := func() (int64, []int64) {
		t.Helper()
		var members int64
		var births []int64
		if err := b.store.InTx(b.ctx, func(tx pgx.Tx) error {
			groups, err := postgres.GroupsByKey(b.ctx, tx, []string{key})
			if err != nil {
				return err
			}
			counted, err := b.store.CountGroups(b.ctx, tx, groups)
			base := postgres.BaseOf(groups[key])
			members, births = counted.Members[base], counted.Births[base]
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return members, births
	}
	before, listed := count()
	if listed == nil || len(listed) != 0 {
		t.Fatalf("every birth handed off: want a known, empty list of births read after the cursor, got %v", listed)
	}
	var id int64
	if err := b.pool.QueryRow(b.ctx, `INSERT INTO birth_registry (entity_code, collection_name, entity_type, status, source_system, actor_ref)
		SELECT 'count-test-1', source_registry, object_class, 'active', 'birth-api', 'tester' FROM governance_group WHERE group_key = $1
		RETURNING id`, key).Scan(&id); err != nil {
		t.Fatal(err)
	}
	members, listed := count()
	if members != before+1 || !slices.Equal(listed, []int64{id}) {
		t.Fatalf("a birth not handed off: %d members (was %d), births read %v; want one more and [%d]", members, before, listed, id)
	}
	b.world().IntakeAll(t)
	members, listed = count()
	if members != before+1 || len(listed) != 0 {
		t.Fatalf("a birth handed off: %d members, births read %v; want %d and none", members, listed, before+1)
	}
}

// TestPendingBirthMarkCarriesItsBirths: a birth handed off while a scan holds its dirty group leaves a pending mark
// that carries the birth, and a count that read the birth before the handoff settles it; unless its class gives
// objects rows of their own and the object is still queued for its row (the handoff queued it after the scan took
// the queue): then the group is owed a scan until one takes the queue.
func TestPendingBirthMarkCarriesItsBirths(t *testing.T) {
	t.Parallel()
	b := seededWorld(t, 3000, func(c *gcos.Config) { c.Gate.ObjectRiskClasses = []string{"write_high"} })
	owed := func(key string) bool {
		return b.count(t, `SELECT count(*) FROM v_pending_mark_owed WHERE group_key = $1`, key) == 1
	}
	for _, tc := range []struct {
		name, classes string
		objectRows    bool
	}{
		{"a class without object rows", `NOT independently_authoritative AND NOT (write_path AND risk_class = 'write_high')`, false},
		{"a class with object rows", `write_path AND risk_class = 'write_high' AND NOT independently_authoritative`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keys := b.strs(t, `SELECT g.group_key FROM governance_group g JOIN governance_candidate_state c USING (group_key)
				JOIN v_current_ruleset USING (ruleset_version)
				WHERE g.lifecycle_status = 'active' AND g.object_class IN (SELECT entity_type FROM governance_coverage_profile WHERE `+tc.classes+`)
				ORDER BY 1 LIMIT 1`)
			if len(keys) == 0 {
				t.Fatal("no active group of such a class in this world")
			}
			key := keys[0]
			if _, err := b.store.MarkDirty(b.ctx, []string{key}, "handoff:"+string(gcos.ChangeObjectBorn)); err != nil {
				t.Fatal(err)
			}
			scan := b.holdRow(t, key)
			var id int64
			var code string
			if err := b.pool.QueryRow(b.ctx, `INSERT INTO birth_registry (entity_code, collection_name, entity_type, status, source_system, actor_ref)
				SELECT 'carried-' || md5($1), source_registry, object_class, 'active', 'birth-api', 'tester' FROM governance_group WHERE group_key = $1
				RETURNING id, entity_code`, key).Scan(&id, &code); err != nil {
				t.Fatal(err)
			}
			b.sb10Apply(t, b.sb10TailRows(t, fmt.Sprintf("id = %d", id)))
			births := b.strs(t, `SELECT coalesce(u.births, 'NULL') FROM governance_pending_mark p,
				unnest(p.group_keys, p.births) AS u(k, births) WHERE u.k = $1`, key)
			if want := fmt.Sprintf("{%d}", id); len(births) != 1 || births[0] != want {
				t.Fatalf("the pending mark of %s carries %v, want [%s]", key, births, want)
			}
			queued := b.count(t, `SELECT count(*) FROM governance_object_pending WHERE entity_code = $1`, code) == 1
			if queued != tc.objectRows {
				t.Fatalf("the birth's object queued for its row: %v, want %v", queued, tc.objectRows)
			}
			scan.clearCounted(t, b.ctx, []int64{id})
			if got := owed(key); got != tc.objectRows {
				t.Fatalf("a count that read the birth: owed %v, want %v (object queued: %v)", got, tc.objectRows, queued)
			}
			if tc.objectRows {
				b.exec(t, `DELETE FROM governance_object_pending WHERE entity_code = $1`, code) // as a scan that takes the queue does
				if owed(key) {
					t.Fatal("the queue was taken, and the mark is still owed")
				}
			}
			if res := b.settlePending(t); res.Marked != 0 {
				t.Fatalf("settling %+v, want nothing marked", res)
			}
		})
	}
}
