package postgres_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"gcos/postgres"
	"gcos/world"
)

// TestSameRowsHashedApart: two captures of a group are held to agree only when its births are provably the row
// versions the previous capture saw; without the evidence a moved hash is a change, never nondeterminism.
func TestSameRowsHashedApart(t *testing.T) {
	t.Parallel()
	cut := &postgres.SnapshotCut{Snapshot: "1000:1010:1003,1005"}
	prevGroup := postgres.SnapshotGroup{Count: 7, ContentHash: "aaaa", NewestXID: 900}
	group := func(edit func(*postgres.SnapshotGroup)) postgres.SnapshotGroup {
		g := postgres.SnapshotGroup{Count: 7, ContentHash: "bbbb", NewestXID: 900}
		if edit != nil {
			edit(&g)
		}
		return g
	}
	metrics := func(c *postgres.SnapshotCut, rowHash string, g postgres.SnapshotGroup) postgres.SnapshotMetrics {
		return postgres.SnapshotMetrics{Cut: c, RowHash: rowHash, Groups: map[string]postgres.SnapshotGroup{"k": g}}
	}
	tests := []struct {
		name      string
		prev, cur postgres.SnapshotMetrics
		want      bool
	}{
		{"the same row versions hashed apart", metrics(cut, "h1", prevGroup), metrics(nil, "h1", group(nil)), true},
		{"the same hash", metrics(cut, "h1", prevGroup), metrics(nil, "h1", group(func(g *postgres.SnapshotGroup) { g.ContentHash = "aaaa" })), false},
		{"a row written by the cut's oldest running transaction", metrics(cut, "h1", prevGroup),
			metrics(nil, "h1", group(func(g *postgres.SnapshotGroup) { g.NewestXID = 1000 })), false},
		{"a row written after the cut", metrics(cut, "h1", prevGroup), metrics(nil, "h1", group(func(g *postgres.SnapshotGroup) { g.NewestXID = 1020 })), false},
		{"a row written just before the cut's horizon", metrics(cut, "h1", prevGroup),
			metrics(nil, "h1", group(func(g *postgres.SnapshotGroup) { g.NewestXID = 999 })), true},
		{"a row gone", metrics(cut, "h1", prevGroup), metrics(nil, "h1", group(func(g *postgres.SnapshotGroup) { g.Count = 6 })), false},
		{"no newest row version recorded", metrics(cut, "h1", prevGroup), metrics(nil, "h1", group(func(g *postgres.SnapshotGroup) { g.NewestXID = 0 })), false},
		{"another row hash", metrics(cut, "h1", prevGroup), metrics(nil, "h2", group(nil)), false},
		{"a previous capture that named no row hash", metrics(cut, "", prevGroup), metrics(nil, "", group(nil)), false},
		{"a previous capture with no cut", metrics(nil, "h1", prevGroup), metrics(nil, "h1", group(nil)), false},
		{"a cut that does not parse", metrics(&postgres.SnapshotCut{Snapshot: "x:1010:"}, "h1", prevGroup), metrics(nil, "h1", group(nil)), false},
		{"a cut with no horizon", metrics(&postgres.SnapshotCut{Snapshot: "1000"}, "h1", prevGroup), metrics(nil, "h1", group(nil)), false},
		{"a group new since", postgres.SnapshotMetrics{Cut: cut, RowHash: "h1"}, metrics(nil, "h1", group(nil)), false},
		{"a group gone since", metrics(cut, "h1", prevGroup), postgres.SnapshotMetrics{RowHash: "h1"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := postgres.SameRowsHashedApart(tt.prev, tt.cur, "k"); got != tt.want {
				t.Fatalf("SameRowsHashedApart = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestCaptureRecordsNewestRowVersion: a capture records per group the youngest transaction that wrote one of its
// births or their anchors, exactly; an update moves only its group's; a child whose anchor is deleted makes the
// group it falls into read as written after the capture, since a deleted row leaves no version to read.
func TestCaptureRecordsNewestRowVersion(t *testing.T) {
	t.Parallel()
	b := sb12World(t, 1500)
	container, err := world.AddChildren(b.ctx, b.pool, 3, 5)
	if err != nil {
		t.Fatal(err)
	}
	capture := func(run string) postgres.Snapshot {
		return b.sb12Capture(t, postgres.CaptureOptions{Scope: postgres.SnapshotScan, RunID: run})
	}
	newest := func(s postgres.Snapshot) map[sb12Base]int64 {
		out := map[sb12Base]int64{}
		for _, g := range s.Groups {
			out[sb12BaseOf(g)] = s.Metrics.Groups[g.Key].NewestXID
		}
		return out
	}
	cutXmax := func(s postgres.Snapshot) int64 {
		_, rest, _ := strings.Cut(s.Metrics.Cut.Snapshot, ":")
		x, _, _ := strings.Cut(rest, ":")
		n, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			t.Fatalf("cut %q: %v", s.Metrics.Cut.Snapshot, err)
		}
		return n
	}
	first := capture("newest-1")
	before := newest(first)
	for base, x := range before {
		if x <= 0 || x >= cutXmax(first) {
			t.Fatalf("group %v: newest row version %d, want a committed transaction before the cut (xmax %d)", base, x, cutXmax(first))
		}
	}

	// One update: its transaction is exactly its group's newest row version, and no other group's moves.
	var base sb12Base
	var xid int64
	err = pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(b.ctx, `UPDATE birth_registry SET source_system = 'edited' WHERE id = (
			SELECT min(id) FROM birth_registry WHERE parent_code IS NULL AND collection_name <> $1)
			RETURNING entity_type, collection_name, status`, container.Collection).Scan(&base.class, &base.registry, &base.lifecycle); err != nil {
			return err
		}
		return tx.QueryRow(b.ctx, `SELECT pg_current_xact_id()::text::bigint`).Scan(&xid)
	})
	if err != nil {
		t.Fatal(err)
	}
	after := newest(capture("newest-2"))
	for k, x := range after {
		want := before[k]
		if k.class == base.class && k.registry == base.registry && k.lifecycle == base.lifecycle {
			want = xid
		}
		if x != want {
			t.Fatalf("group %v: newest row version %d, want %d (the update was %d on %v)", k, x, want, xid, base)
		}
	}

	// The children's anchor deleted behind the tail: the group they fall into can never be proven unchanged.
	var class, status string
	if err := b.pool.QueryRow(b.ctx, `SELECT entity_type, status FROM birth_registry WHERE collection_name = $1 AND parent_code = $2 LIMIT 1`,
		container.Collection, container.EntityCode).Scan(&class, &status); err != nil {
		t.Fatal(err)
	}
	b.exec(t, `DELETE FROM birth_registry WHERE collection_name = $1 AND entity_code = $2`, container.Collection, container.EntityCode)
	third := capture("newest-3")
	if x := newest(third)[sb12Base{class, container.Collection, status}]; x < cutXmax(third) {
		t.Fatalf("the group holding children whose anchor is gone: newest row version %d, want one after the cut (xmax %d)", x, cutXmax(third))
	}
}
