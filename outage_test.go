package gcos_test

import (
	"testing"
	"time"

	"gcos"
)

// TestOutage: the wait doubles from Base to Max while tries fail; one note when the failures start, one per Every
// while they last, one on recovery, and silence in between; after a recovery the wait starts from Base again.
func TestOutage(t *testing.T) {
	t.Parallel()
	o := gcos.Outage{Base: 100 * time.Millisecond, Max: time.Second, Every: time.Minute}
	t0 := time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)
	if note := o.Succeed(t0); note != gcos.NoteNone {
		t.Fatalf("a success with no outage says %v", note)
	}
	type step struct {
		at   time.Duration
		fail bool
		wait time.Duration
		note gcos.OutageNote
	}
	for i, s := range []step{
		{0, true, 100 * time.Millisecond, gcos.NoteDown},
		{100 * time.Millisecond, true, 200 * time.Millisecond, gcos.NoteNone},
		{300 * time.Millisecond, true, 400 * time.Millisecond, gcos.NoteNone},
		{700 * time.Millisecond, true, 800 * time.Millisecond, gcos.NoteNone},
		{1500 * time.Millisecond, true, time.Second, gcos.NoteNone}, // capped
		{2500 * time.Millisecond, true, time.Second, gcos.NoteNone},
		{60 * time.Second, true, time.Second, gcos.NoteStillDown}, // a minute after the first note
		{61 * time.Second, true, time.Second, gcos.NoteNone},
		{120 * time.Second, true, time.Second, gcos.NoteStillDown},
		{121 * time.Second, false, 0, gcos.NoteRecovered},
		{122 * time.Second, false, 0, gcos.NoteNone},
		{123 * time.Second, true, 100 * time.Millisecond, gcos.NoteDown}, // a new outage starts from Base
	} {
		now := t0.Add(s.at)
		if s.fail {
			wait, note := o.Fail(now)
			if wait != s.wait || note != s.note {
				t.Fatalf("step %d (fail at %s): wait %s note %v, want %s %v", i, s.at, wait, note, s.wait, s.note)
			}
			continue
		}
		if note := o.Succeed(now); note != s.note {
			t.Fatalf("step %d (success at %s): note %v, want %v", i, s.at, note, s.note)
		}
	}
	if down, since, n := o.Down(); !down || !since.Equal(t0.Add(123*time.Second)) || n != 1 {
		t.Fatalf("Down() = %v %v %d", down, since, n)
	}
}
