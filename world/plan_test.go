package world

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestShapeSizes(t *testing.T) {
	t.Parallel()
	if len(entityTypes) != numEntityTypes {
		t.Fatalf("%d entity types, want %d", len(entityTypes), numEntityTypes)
	}
	names := map[string]bool{}
	for _, et := range entityTypes {
		if names[et.name] {
			t.Fatalf("duplicate entity type %s", et.name)
		}
		names[et.name] = true
	}
	for _, n := range []int{MinBirths, 170, 1000, 50_000, DefaultBirths, 10_000_000} {
		s := newShape(n)
		total := 0
		for c, size := range s.collectionSizes {
			total += size
			if size < len(s.typesOf[c]) {
				t.Errorf("n=%d: collection %s has %d births for %d types", n, bornCollections[c].name, size,
					len(s.typesOf[c]))
			}
			typeTotal := 0
			for _, ti := range s.typesOf[c] {
				typeTotal += s.typeSizes[ti]
				if s.typeSizes[ti] < 1 {
					t.Errorf("n=%d: type %s has no births", n, s.types[ti].name)
				}
			}
			if typeTotal != size {
				t.Errorf("n=%d: types of %s sum to %d, want %d", n, bornCollections[c].name, typeTotal, size)
			}
			if c > 0 && size > s.collectionSizes[c-1] {
				t.Errorf("n=%d: collection rank %d larger than rank %d", n, c+1, c)
			}
		}
		if total != n {
			t.Errorf("n=%d: collections sum to %d", n, total)
		}
	}
	// The live shape: a few collections of hundreds of thousands, many of hundreds.
	s := newShape(DefaultBirths)
	var big, hundreds int
	for _, size := range s.collectionSizes {
		if size >= 100_000 {
			big++
		}
		if size < 1000 {
			hundreds++
		}
	}
	if big < 2 || big > 5 || hundreds < 20 {
		t.Errorf("live shape: %d collections ≥ 100k, %d below 1000; want a few and many", big, hundreds)
	}
}

func TestApportion(t *testing.T) {
	t.Parallel()
	got := apportion(10, []float64{1, 1, 1}, []int{0, 0, 0}, 100)
	if diff := cmp.Diff([]int{4, 3, 3}, got); diff != "" {
		t.Errorf("apportion (-want +got):\n%s", diff)
	}
	got = apportion(10, []float64{100, 1, 1}, []int{1, 1, 1}, 5)
	if diff := cmp.Diff([]int{5, 3, 2}, got); diff != "" {
		t.Errorf("apportion with cap (-want +got):\n%s", diff)
	}
}

func TestEntityCode(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		typ  string
		seq  int
		want string
	}{
		{"order", 1, "order-0000001"},
		{"order_line", 1234567, "order_line-1234567"},
		{"order", 12345678, "order-12345678"},
	} {
		if got := entityCode(c.typ, c.seq); got != c.want {
			t.Errorf("entityCode(%q, %d) = %q, want %q", c.typ, c.seq, got, c.want)
		}
	}
}

func TestBirthPlanDeterministic(t *testing.T) {
	t.Parallel()
	a, b, c := newBirthPlan(20_000, 5), newBirthPlan(20_000, 5), newBirthPlan(20_000, 6)
	if !cmp.Equal(a.typ, b.typ) || !cmp.Equal(a.at, b.at) || !cmp.Equal(a.status, b.status) ||
		!cmp.Equal(a.prov, b.prov) || !cmp.Equal(a.seq, b.seq) {
		t.Fatal("same seed, different plans")
	}
	if cmp.Equal(a.typ, c.typ) || cmp.Equal(a.at, c.at) {
		t.Fatal("different seeds, same plan")
	}
	for i := 1; i < a.n(); i++ {
		if a.at[i] < a.at[i-1] {
			t.Fatalf("born_at decreases at id %d", i+1)
		}
	}
	if end := a.bornAt(a.n() - 1); !end.Before(endTime) {
		t.Fatalf("last birth at %v, not before %v", end, endTime)
	}
}

func TestChangeMakerVocabulary(t *testing.T) {
	t.Parallel()
	m := newChangeMaker(rand.New(rand.NewPCG(1, 2)))
	actions := map[string]bool{}
	for _, a := range []string{actionCreate, actionUpdate, actionRegister, actionRetire, actionSupersede,
		actionMerge, actionCountChanged, actionSourceChanged, actionOwnerChanged, actionApprovalChanged,
		actionExceptionChanged, actionAxisIntroduced, actionPolicyChanged} {
		actions[a] = true
	}
	seen := map[string]bool{}
	for i := range 20_000 {
		var c change
		if i%2 == 0 {
			c = m.registryChange(endTime, func(int) int { return 10 })
		} else {
			c = m.objectChange("order", "order-0000001", "commerce_orders", statuses[(i/2)%len(statuses)], "birth-gateway")
		}
		if !actions[c.action] {
			t.Fatalf("action %q is not in the vocabulary", c.action)
		}
		if c.level != alertInfo && c.level != alertWarning && c.level != alertCritical {
			t.Fatalf("alert level %q", c.level)
		}
		if c.entityType == "" || c.entityCode == "" || c.changedBy == "" || c.detail == "" {
			t.Fatalf("incomplete change %+v", c)
		}
		seen[c.action] = true
	}
	if len(seen) != len(actions) {
		var missing []string
		for a := range actions {
			if !seen[a] {
				missing = append(missing, a)
			}
		}
		t.Fatalf("actions never drawn: %s", strings.Join(missing, ", "))
	}
}

func TestOptionsNormalize(t *testing.T) {
	t.Parallel()
	o := Options{}
	if err := o.normalize(); err != nil {
		t.Fatal(err)
	}
	if o.Births != DefaultBirths || o.Changes != DefaultChanges || o.Seed != 1 || o.Logger == nil {
		t.Fatalf("defaults: %+v", o)
	}
	for _, bad := range []Options{{Births: MinBirths - 1}, {Births: -5}, {Births: 1000, Children: -1}} {
		if err := bad.normalize(); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
	o = Options{Births: 1000, Changes: -1}
	if err := o.normalize(); err != nil || o.Changes != 0 {
		t.Fatalf("Changes -1: %v, %d", err, o.Changes)
	}
}
