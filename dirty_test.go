package gcos_test

import (
	"testing"

	"gcos"
)

func TestInvalidationStorm(t *testing.T) {
	for _, c := range []struct {
		name     string
		dirtied  int64
		groups   int64
		fraction float64
		want     bool
	}{
		{"a quarter of the groups in one tick", 250, 1000, 0.25, false},
		{"one more than a quarter", 251, 1000, 0.25, true},
		{"a quiet tick", 3, 1000, 0.25, false},
		{"nothing dirtied", 0, 1000, 0.25, false},
		{"every group with a threshold of one", 1000, 1000, 1, false},
		{"no groups yet", 5, 0, 0.25, false},
		{"a tiny world", 2, 3, 0.5, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := gcos.InvalidationStorm(c.dirtied, c.groups, c.fraction); got != c.want {
				t.Fatalf("InvalidationStorm(%d, %d, %v) = %v, want %v", c.dirtied, c.groups, c.fraction, got, c.want)
			}
			// The throttle holds by the same share of the standing dirty set.
			if got := gcos.StormDraining(c.dirtied, c.groups, c.fraction); got != c.want {
				t.Fatalf("StormDraining(%d, %d, %v) = %v, want %v", c.dirtied, c.groups, c.fraction, got, c.want)
			}
		})
	}
}
