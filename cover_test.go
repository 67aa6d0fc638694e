package gcos

import (
	"fmt"
	"testing"
)

func TestCoverSlice(t *testing.T) {
	for _, c := range []struct {
		collection string
		slices     int
		want       int
	}{
		{"commerce_orders", 1, 0},
		{"commerce_orders", 0, 0},
		{"", 32, int(14695981039346656037 % 32)}, // FNV-1a offset basis: the hash of nothing
		{"a", 2, int(0xaf63dc4c8601ec8c % 2)},
		{"a", 32, int(0xaf63dc4c8601ec8c % 32)},
	} {
		if got := CoverSlice(c.collection, c.slices); got != c.want {
			t.Errorf("CoverSlice(%q, %d) = %d, want %d", c.collection, c.slices, got, c.want)
		}
	}
	// Every collection lands in a slice, and the slices of many collections spread over all of them.
	seen := map[int]int{}
	for i := range 1000 {
		s := CoverSlice(fmt.Sprintf("collection_%d", i), 32)
		if s < 0 || s >= 32 {
			t.Fatalf("slice %d out of range", s)
		}
		seen[s]++
	}
	if len(seen) != 32 {
		t.Errorf("1,000 collections fill %d of 32 slices", len(seen))
	}
}

func TestNextCoverSlice(t *testing.T) {
	for _, c := range []struct{ last, slices, want int }{
		{-1, 32, 0}, {0, 32, 1}, {30, 32, 31}, {31, 32, 0}, {40, 32, 9}, // fewer slices than before: still in range
		{5, 1, 0}, {-1, 1, 0},
	} {
		if got := NextCoverSlice(c.last, c.slices); got != c.want {
			t.Errorf("NextCoverSlice(%d, %d) = %d, want %d", c.last, c.slices, got, c.want)
		}
	}
	// A turn of the cover proves every slice once.
	proven, last := map[int]bool{}, -1
	for range 32 {
		last = NextCoverSlice(last, 32)
		proven[last] = true
	}
	if len(proven) != 32 {
		t.Errorf("32 audits proved %d slices", len(proven))
	}
}

func TestCoverSample(t *testing.T) {
	for _, c := range []struct{ sample, slices, want int }{
		{2000, 32, 63}, {2000, 1, 2000}, {0, 32, 1}, {31, 32, 1}, {64, 32, 2},
	} {
		if got := CoverSample(c.sample, c.slices); got != c.want {
			t.Errorf("CoverSample(%d, %d) = %d, want %d", c.sample, c.slices, got, c.want)
		}
	}
}

func TestProofBatches(t *testing.T) {
	births := map[string]int64{"a": 300, "b": 300, "c": 500, "d": 2000, "e": 100}
	for _, c := range []struct {
		name        string
		collections []string
		budget      int64
		want        [][]string
	}{
		{"none", nil, 1000, nil},
		{"all fit", []string{"a", "b", "e"}, 1000, [][]string{{"a", "b", "e"}}},
		{"exactly the budget", []string{"a", "b", "e"}, 700, [][]string{{"a", "b", "e"}}},
		{"split in order", []string{"a", "b", "c", "e"}, 700, [][]string{{"a", "b"}, {"c", "e"}}},
		{"heavier than the budget stands alone", []string{"a", "d", "e"}, 1000, [][]string{{"a"}, {"d"}, {"e"}}},
		{"heavy first", []string{"d", "a"}, 1000, [][]string{{"d"}, {"a"}}},
		{"unknown weighs nothing", []string{"a", "x", "y"}, 300, [][]string{{"a", "x", "y"}}},
		{"a budget of one: one collection each", []string{"a", "b"}, 1, [][]string{{"a"}, {"b"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := ProofBatches(c.collections, births, c.budget)
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Errorf("ProofBatches(%v, %d) = %v, want %v", c.collections, c.budget, got, c.want)
			}
			var n int
			for _, b := range got {
				n += len(b)
			}
			if n != len(c.collections) {
				t.Errorf("the batches hold %d collections, want every one of %d", n, len(c.collections))
			}
		})
	}
}
