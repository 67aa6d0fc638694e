package postgres_test

import (
	"testing"

	"gcos/postgres"
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
