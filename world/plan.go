package world

import (
	"math"
	"sort"
)

// The shape of a world: which entity types exist, which collection each belongs to, and how many births each type
// and collection gets. The shape is a pure function of the number of births.

// entityType is one row of meta_catalog.
type entityType struct {
	name       string
	collection int // index into bornCollections
	suffix     int // index into typeSuffixes
}

// shape is the deterministic, seed-independent skeleton of a world of n births.
type shape struct {
	births          int
	types           []entityType // 169, grouped by collection rank, base type first
	typesOf         [][]int      // per born collection: indexes into types
	collectionSizes []int        // per born collection: births
	typeSizes       []int        // per type: births
}

// Zipf–Mandelbrot parameters of the collection sizes: weight(rank) = (rank+collectionQ)^-collectionS. With 1,037,724
// births the largest collections hold a few hundred thousand rows each and the smallest a few hundred.
const (
	collectionS = 1.9
	collectionQ = 1.2
	typeS       = 1.3 // weight of the j-th type of a collection: (j+1)^-typeS
)

// entityTypes is the fixed list of the 169 entity types.
var entityTypes, typesOfCollection = buildEntityTypes()

func buildEntityTypes() ([]entityType, [][]int) {
	extra := numEntityTypes - numBirthCollections
	weights := make([]float64, numBirthCollections)
	for i := range weights {
		weights[i] = 1 / math.Sqrt(float64(i+1))
	}
	// Each collection has its base type, plus a share of the extra types (at most len(typeSuffixes)-1).
	counts := apportion(extra, weights, make([]int, numBirthCollections), len(typeSuffixes)-1)
	var types []entityType
	typesOf := make([][]int, numBirthCollections)
	for c, spec := range bornCollections {
		for j := 0; j <= counts[c]; j++ {
			typesOf[c] = append(typesOf[c], len(types))
			types = append(types, entityType{name: spec.base + typeSuffixes[j], collection: c, suffix: j})
		}
	}
	return types, typesOf
}

// newShape computes the births per collection and per type for a world of n births (n ≥ MinBirths).
func newShape(n int) *shape {
	s := &shape{births: n, types: entityTypes, typesOf: typesOfCollection}
	weights := make([]float64, numBirthCollections)
	mins := make([]int, numBirthCollections)
	for c := range weights {
		weights[c] = math.Pow(float64(c+1)+collectionQ, -collectionS)
		mins[c] = len(s.typesOf[c])
	}
	s.collectionSizes = apportion(n, weights, mins, math.MaxInt)
	s.typeSizes = make([]int, len(s.types))
	for c, ts := range s.typesOf {
		tw := make([]float64, len(ts))
		tm := make([]int, len(ts))
		for j := range ts {
			tw[j] = math.Pow(float64(j+1), -typeS)
			tm[j] = 1
		}
		for j, size := range apportion(s.collectionSizes[c], tw, tm, math.MaxInt) {
			s.typeSizes[ts[j]] = size
		}
	}
	return s
}

// apportion splits total into len(weights) integer parts proportional to weights, each at least mins[i] and at most
// capN, by the largest-remainder method (ties go to the lower index). It requires sum(mins) ≤ total and a feasible
// cap.
func apportion(total int, weights []float64, mins []int, capN int) []int {
	out := append([]int(nil), mins...)
	rest := total
	for _, m := range mins {
		rest -= m
	}
	for rest > 0 {
		var wsum float64
		for i, w := range weights {
			if out[i] < capN {
				wsum += w
			}
		}
		type rem struct {
			i int
			r float64
		}
		var rems []rem
		given := 0
		for i, w := range weights {
			if out[i] >= capN {
				continue
			}
			exact := float64(rest) * w / wsum
			whole := int(exact)
			if out[i]+whole > capN {
				whole = capN - out[i]
			}
			out[i] += whole
			given += whole
			if out[i] < capN {
				rems = append(rems, rem{i, exact - float64(int(exact))})
			}
		}
		left := rest - given
		sort.SliceStable(rems, func(a, b int) bool { return rems[a].r > rems[b].r })
		for k := 0; k < left && k < len(rems); k++ {
			out[rems[k].i]++
			given++
		}
		if given == 0 {
			break // infeasible cap; callers never ask for it
		}
		rest -= given
	}
	return out
}
