package intake

import "testing"

// The storm rule counts groups, not marks: a group its tick marked on two pages (scanned in between), or from two
// sources, is one group.
func TestTickDirtiedCountsEachGroupOnce(t *testing.T) {
	passes := []SourceTick{
		{Dirtied: 3, marked: []string{"g1", "g2", "g3"}},
		{Dirtied: 2, marked: []string{"g2", "g4"}},
	}
	rt := RegistryTick{marked: []string{"g4", "g5"}}
	if n := tickDirtied(passes, rt); n != 5 {
		t.Fatalf("tickDirtied = %d, want the 5 groups g1..g5", n)
	}
	if n := tickDirtied(nil, RegistryTick{}); n != 0 {
		t.Fatalf("an empty tick dirtied %d", n)
	}
}
