package postgres

import (
	"slices"
	"testing"
)

func TestPendingMarksOf(t *testing.T) {
	const born, retired, axis = "handoff:object_born", "handoff:object_retired", "axis"
	tests := []struct {
		name                  string
		keys, reasons, locked []string
		pending, why          []string
	}{
		{"a membership mark on a row not locked is pending", []string{"b", "a"}, []string{born, born}, []string{"a"},
			[]string{"b"}, []string{born}},
		{"one mark per key, in key order", []string{"c", "a", "c"}, []string{born, retired, born}, nil,
			[]string{"a", "c"}, []string{retired, born}},
		{"of two membership reasons, the first in sort order", []string{"a", "a"}, []string{retired, born}, nil,
			[]string{"a"}, []string{born}},
		{"another reason is never pending: it waited for its row", []string{"a", "a", "b"}, []string{born, axis, axis}, nil,
			nil, nil},
		{"nothing left", []string{"a"}, []string{born}, []string{"a"}, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pending, why := pendingMarks(tt.keys, tt.reasons, tt.locked)
			if !slices.Equal(pending, tt.pending) || !slices.Equal(why, tt.why) {
				t.Fatalf("pendingMarks = %v %v, want %v %v", pending, why, tt.pending, tt.why)
			}
		})
	}
}
