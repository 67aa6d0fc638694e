package intake

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"unsafe"
)

func TestBirthsBehind(t *testing.T) {
	base1 := []string{"g1", "g2"} // one base group's groups in two scopes
	base2 := []string{"g2", "g3"} // another base sharing g2 (a scope that does not tell them apart)
	tests := []struct {
		name string
		sigs []*signal
		want map[string][]int64
	}{
		{"a base's groups carry the births of all its signals",
			[]*signal{{groups: base1, births: []int64{1, 2}}, {groups: base1, births: []int64{9}}},
			map[string][]int64{"g1": {1, 2, 9}, "g2": {1, 2, 9}}},
		{"a group two bases name carries the births of both",
			[]*signal{{groups: base1, births: []int64{1}}, {groups: base2, births: []int64{5}}},
			map[string][]int64{"g1": {1}, "g2": {1, 5}, "g3": {5}}},
		{"a signal without births settles its groups by time",
			[]*signal{{groups: base1, births: []int64{1}}, {groups: []string{"g2"}}},
			map[string][]int64{"g1": {1}}},
		{"nothing", nil, map[string][]int64{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := birthsBehind(tt.sigs)
			for _, ids := range got {
				slices.Sort(ids)
			}
			if !maps.EqualFunc(got, tt.want, slices.Equal) {
				t.Fatalf("birthsBehind = %v, want %v", got, tt.want)
			}
		})
	}
	// Groups only one slice names share one list.
	got := birthsBehind([]*signal{{groups: base1, births: []int64{1}}, {groups: base1, births: []int64{2}}})
	if &got["g1"][0] != &got["g2"][0] {
		t.Fatal("the groups of one base do not share their list of births")
	}
}

func TestInterner(t *testing.T) {
	in := newInterner(2)
	a, b := in.get(0, []byte("coll")), in.get(0, []byte("coll"))
	if a != "coll" || !sameString(a, b) {
		t.Fatalf("a repeated value is not shared: %q %q", a, b)
	}
	if got := in.get(0, nil); got != "" {
		t.Fatalf("NULL read as %q", got)
	}
	// A column whose values do not repeat stops being interned, and still reads every value right.
	for i := range internMax + 10 {
		v := fmt.Sprintf("code-%d", i)
		if got := in.get(1, []byte(v)); got != v {
			t.Fatalf("value %d read as %q", i, got)
		}
	}
	if in.seen[1] != nil {
		t.Fatal("a column of distinct values is still interned")
	}
	if got := in.get(0, []byte("coll")); !sameString(got, a) {
		t.Fatal("the other column stopped being interned")
	}
}

// sameString reports whether two strings share their bytes.
func sameString(a, b string) bool {
	return len(a) > 0 && len(a) == len(b) && unsafe.StringData(a) == unsafe.StringData(b)
}
