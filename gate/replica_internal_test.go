package gate

import (
	"testing"
	"time"
)

func TestProveReplica(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	samples := []lsnSample{{at(0), 100}, {at(20), 100}, {at(40), 250}, {at(60), 400}}
	tests := []struct {
		name     string
		replayed int64
		proven   time.Time
		ok       bool
		kept     int
	}{
		{"behind every sample", 99, time.Time{}, false, 4},
		{"at the first position: the newest sample of it", 100, at(20), true, 3},
		{"between samples: the older one", 300, at(40), true, 2},
		{"past every sample", 1000, at(60), true, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kept, proven, ok := proveReplica(samples, tt.replayed)
			if ok != tt.ok || !proven.Equal(tt.proven) || len(kept) != tt.kept {
				t.Fatalf("proveReplica(%d) = %d kept, %v, %v; want %d, %v, %v", tt.replayed, len(kept), proven, ok, tt.kept, tt.proven, tt.ok)
			}
		})
	}
}

func TestReplicaFresh(t *testing.T) {
	proven := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	bound := 100 * time.Millisecond
	tests := []struct {
		name string
		now  time.Time
		want bool
	}{
		{"at the proof", proven, true},
		{"within the bound", proven.Add(99 * time.Millisecond), true},
		{"at the bound", proven.Add(bound), true},
		{"past the bound", proven.Add(bound + time.Microsecond), false},
		{"a clock before the proof proves nothing", proven.Add(-time.Millisecond), false},
	}
	for _, tt := range tests {
		if got := replicaFresh(proven, tt.now, bound); got != tt.want {
			t.Errorf("%s: replicaFresh = %v, want %v", tt.name, got, tt.want)
		}
	}
}
