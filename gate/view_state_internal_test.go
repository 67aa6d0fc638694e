package gate

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"

	"gcos"
	"gcos/postgres"
)

// The counts a catch-up reads its referenced rows by are kept as rows are applied: after any run of deltas (rows
// added, replaced, gone, unchanged) they name exactly the snapshots and exceptions a walk of every row finds.
func TestViewStateKeepsItsReferences(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 5))
	st := &viewState{groups: map[string]viewGroup{}, states: map[string]gcos.CandidateRow{}, objects: map[string]viewObject{},
		coverage: map[string]gcos.CoverageRecord{}, objectOfCandidate: map[string]string{}, snapshotRefs: map[int64]int{},
		exceptionRefs: map[string]int{}, baseGen: map[postgres.BirthBase]uint64{}, objectGen: map[postgres.ObjectRef]uint64{}}
	for step := range 400 {
		d := newViewDelta()
		for range 1 + rnd.IntN(6) {
			key := fmt.Sprintf("g%d", rnd.IntN(12))
			switch rnd.IntN(4) {
			case 0:
				d.states[key] = nil
			default:
				d.states[key] = &gcos.CandidateRow{GroupKey: key, SnapshotRef: int64(1 + rnd.IntN(4))}
			}
			ref := fmt.Sprintf("objects:o-%d", rnd.IntN(8))
			switch rnd.IntN(3) {
			case 0:
				d.objects[ref] = nil
			default:
				d.objects[ref] = &viewObject{group: key, row: gcos.CandidateRow{GroupKey: "object:" + ref, SnapshotRef: int64(1 + rnd.IntN(4))}}
			}
			switch rnd.IntN(3) {
			case 0:
				d.coverage[key] = nil
			case 1:
				d.coverage[key] = &gcos.CoverageRecord{Outcome: gcos.CoverageOutcome("covered")}
			default:
				id := fmt.Sprintf("EXC-%d", rnd.IntN(3))
				d.coverage[key] = &gcos.CoverageRecord{Outcome: gcos.CoverageOutcome("approved_exception"), ExceptionID: &id}
			}
		}
		st.applyRows(d)

		wantSnaps, wantExc := map[int64]bool{}, map[string]bool{}
		for _, r := range st.states {
			wantSnaps[r.SnapshotRef] = true
		}
		for _, o := range st.objects {
			wantSnaps[o.row.SnapshotRef] = true
		}
		for _, c := range st.coverage {
			if c.ExceptionID != nil {
				wantExc[*c.ExceptionID] = true
			}
		}
		gotSnaps, gotExc := map[int64]bool{}, map[string]bool{}
		st.referenced(gotSnaps, gotExc)
		if !maps.Equal(gotSnaps, wantSnaps) || !maps.Equal(gotExc, wantExc) {
			t.Fatalf("step %d: referenced snapshots %v exceptions %v, the rows reference %v and %v", step, gotSnaps, gotExc, wantSnaps, wantExc)
		}
	}
}
