package postgres

import (
	"slices"
	"strconv"
	"testing"
	"time"
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

func TestPendingBirths(t *testing.T) {
	const born, retired = "handoff:object_born", "handoff:object_retired"
	many := make([]int64, MarkBirthsMax+1)
	for i := range many {
		many[i] = int64(i + 1)
	}
	tests := []struct {
		name          string
		pending       []string
		keys, reasons []string
		births        map[string][]int64
		want          []string // "" for NULL
	}{
		{"each pending key carries its births", []string{"a", "b"}, []string{"a", "b"}, []string{born, born},
			map[string][]int64{"a": {3, 1}, "b": {2}}, []string{"{3,1}", "{2}"}},
		{"a key a retirement marked too is settled by time", []string{"a"}, []string{"a", "a"}, []string{born, retired},
			map[string][]int64{"a": {1}}, []string{""}},
		{"a key without births is settled by time", []string{"a"}, []string{"a"}, []string{born}, nil, []string{""}},
		{"more births than a mark carries", []string{"a"}, []string{"a"}, []string{born}, map[string][]int64{"a": many}, []string{""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := pendingBirths(tt.pending, tt.keys, tt.reasons, tt.births)
			var texts []string
			for _, g := range got {
				texts = append(texts, Deref(g))
			}
			if !slices.Equal(texts, tt.want) {
				t.Fatalf("pendingBirths = %q, want %q", texts, tt.want)
			}
		})
	}
	// The groups of one base share their births (one slice): the list is written out once and shared.
	shared := []int64{5, 7}
	got := pendingBirths([]string{"a", "b", "c"}, []string{"a", "b", "c"}, []string{born, born, born},
		map[string][]int64{"a": shared, "b": shared, "c": {5, 7}})
	if Deref(got[0]) != "{5,7}" || got[0] != got[1] || Deref(got[2]) != "{5,7}" || got[2] == got[0] {
		t.Fatalf("pendingBirths over a shared list = %q %q %q (%p %p %p), want one text for a and b, another for c",
			Deref(got[0]), Deref(got[1]), Deref(got[2]), got[0], got[1], got[2])
	}
}

func TestPendingKeyMerge(t *testing.T) {
	at := func(s int) time.Time { return time.Unix(int64(s), 0) }
	lit := func(s string) *string { return &s }
	tests := []struct {
		name  string
		marks []struct {
			at     int
			births *string
		}
		want   string // merged births literal, "" for NULL
		wantAt time.Time
	}{
		{"births of every mark, once each, the latest time", []struct {
			at     int
			births *string
		}{{1, lit("{5,2}")}, {3, lit("{2,9}")}},
			"{2,5,9}", at(3)},
		{"one mark without births: time alone", []struct {
			at     int
			births *string
		}{{1, lit("{5}")}, {2, nil}, {3, lit("{7}")}},
			"", at(3)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p pendingKey
			for _, m := range tt.marks {
				if err := p.add("handoff:object_born", at(m.at), m.births, strconv.Itoa(1000+m.at)); err != nil {
					t.Fatal(err)
				}
			}
			if got := Deref(p.birthsText()); got != tt.want || !p.at.Equal(tt.wantAt) {
				t.Fatalf("merged %q at %v, want %q at %v", got, p.at, tt.want, tt.wantAt)
			}
			if len(p.by) != len(tt.marks) {
				t.Fatalf("merged the marks of %d transactions into %v: a count must have seen each of them", len(tt.marks), p.by)
			}
		})
	}
	var p pendingKey
	if err := p.add("handoff:object_born", at(1), lit("1,2"), "1000"); err == nil {
		t.Fatal("a births value that is not an array literal must be refused")
	}
}
