package gcos

import (
	"reflect"
	"testing"
	"time"
)

func TestLogPartitionsToCreate(t *testing.T) {
	at := func(h, m int) time.Time { return time.Date(2026, 11, 29, h, m, 0, 0, time.UTC) }
	span := func(h1, m1, h2, m2 int) Span { return Span{at(h1, m1), at(h2, m2)} }
	for _, tc := range []struct {
		name     string
		existing []Span
		need     []time.Time
		width    time.Duration
		want     []Span
	}{
		{"an empty log gets the bins of now and ahead", nil, []time.Time{at(15, 20), at(16, 20), at(17, 20)}, time.Hour,
			[]Span{span(15, 0, 16, 0), span(16, 0, 17, 0), span(17, 0, 18, 0)}},
		{"bins that exist are not made again", []Span{span(15, 0, 16, 0)}, []time.Time{at(15, 20), at(16, 20)}, time.Hour,
			[]Span{span(16, 0, 17, 0)}},
		{"instants in one bin make it once, in order", nil, []time.Time{at(16, 59), at(9, 1), at(16, 0), at(9, 59)}, time.Hour,
			[]Span{span(9, 0, 10, 0), span(16, 0, 17, 0)}},
		{"a narrower width fills only what the wider partition leaves free", []Span{span(15, 0, 16, 0)},
			[]time.Time{at(15, 40), at(16, 10)}, 15 * time.Minute, []Span{span(16, 0, 16, 15)}},
		{"a wider width is clipped around a narrower partition", []Span{span(15, 15, 15, 30)}, []time.Time{at(15, 50)}, time.Hour,
			[]Span{span(15, 0, 15, 15), span(15, 30, 16, 0)}},
		{"an instant in another zone is binned in UTC", nil, []time.Time{at(15, 20).In(time.FixedZone("x", 90*60))}, time.Hour,
			[]Span{span(15, 0, 16, 0)}},
		{"no width, no partitions", nil, []time.Time{at(15, 20)}, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := LogPartitionsToCreate(tc.existing, tc.need, tc.width)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for i := range got { // never overlapping what exists or each other
				for _, e := range append(append([]Span{}, tc.existing...), got[:i]...) {
					if got[i].From.Before(e.To) && e.From.Before(got[i].To) {
						t.Fatalf("%v overlaps %v", got[i], e)
					}
				}
			}
		})
	}
}

func TestLogPartitionsToDrop(t *testing.T) {
	at := func(h int) time.Time { return time.Date(2026, 11, 29, h, 0, 0, 0, time.UTC) }
	part := func(h int, newest uint64) LogPartition { return LogPartition{Span{at(h), at(h + 1)}, newest} }
	for _, tc := range []struct {
		name        string
		parts       []LogPartition
		cutoff      time.Time
		mark, from  uint64
		want        []int
		wantHorizon uint64
	}{
		{"expired and read past: dropped, horizon just past its newest", []LogPartition{part(10, 500), part(11, 700)}, at(12), 1000, 0,
			[]int{0, 1}, 701},
		{"a partition that reaches past the cutoff is kept", []LogPartition{part(10, 500), part(11, 700)}, at(11).Add(30 * time.Minute), 1000, 0,
			[]int{0}, 501},
		{"a writer at the mark keeps its partition", []LogPartition{part(10, 500), part(11, 1000)}, at(12), 1000, 0,
			[]int{0}, 501},
		{"an older partition held by a long writer does not hold back a newer one", []LogPartition{part(10, 1200), part(11, 700)}, at(12), 1000, 0,
			[]int{1}, 701},
		{"an empty partition goes and leaves the horizon", []LogPartition{part(10, 0)}, at(12), 1000, 300,
			[]int{0}, 300},
		{"the horizon never moves back", []LogPartition{part(10, 500)}, at(12), 1000, 900,
			[]int{0}, 900},
		{"nothing expired, nothing dropped", []LogPartition{part(10, 500)}, at(10), 1000, 42,
			nil, 42},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, horizon := LogPartitionsToDrop(tc.parts, tc.cutoff, tc.mark, tc.from)
			if !reflect.DeepEqual(got, tc.want) || horizon != tc.wantHorizon {
				t.Fatalf("got %v and horizon %d, want %v and %d", got, horizon, tc.want, tc.wantHorizon)
			}
		})
	}
}

func TestSignalKeyRotationDue(t *testing.T) {
	since := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	week := 7 * 24 * time.Hour
	for _, tc := range []struct {
		name string
		now  time.Time
		keep time.Duration
		want bool
	}{
		{"just made current", since, week, false},
		{"a second short of the window", since.Add(week - time.Second), week, false},
		{"the window reached", since.Add(week), week, true},
		{"long past (the rotator was down)", since.Add(5 * week), week, true},
		{"a clock behind since", since.Add(-time.Hour), week, false},
		{"no window: never", since.Add(5 * week), 0, false},
	} {
		if got := SignalKeyRotationDue(since, tc.now, tc.keep); got != tc.want {
			t.Errorf("%s: due %v, want %v", tc.name, got, tc.want)
		}
	}
}
