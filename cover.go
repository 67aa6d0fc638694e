package gcos

import "hash/fnv"

// CoverSlice is the slice of the full audit's rotating cover that proves the groups of collection: every group of a
// collection, in every scope, is proven by the same audit, because a group's members can only be counted from its
// own collection (a child's anchor is born in the child's collection). The slice is the collection name's FNV-1a
// hash modulo slices, so it never moves while the number of slices stays.
func CoverSlice(collection string, slices int) int {
	if slices <= 1 {
		return 0
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(collection))
	return int(h.Sum64() % uint64(slices))
}

// NextCoverSlice is the slice the next audit proves, after the last slice an audit proved (last < 0: none yet):
// the slices are proven in turn, so after any `slices` proven audits every collection has been proven once.
func NextCoverSlice(last, slices int) int {
	if slices <= 1 || last < 0 {
		return 0
	}
	return (last + 1) % slices
}

// CoverSample is how many objects an audit's verification asks the gate about: the whole verification's sample
// spread over the cover, so that one turn of the cover asks about as many as one `gcos verify`, and at least one.
func CoverSample(sample, slices int) int {
	if slices <= 1 {
		return sample
	}
	return max(1, (sample+slices-1)/slices)
}

// ProofBatches splits the collections an audit proves into batches of at most budget object rows each (rows: per
// collection; an unknown collection weighs nothing), in the given order. A batch is read and compared in one
// transaction and dropped before the next, so the proof holds one batch's object rows at a time; a collection
// heavier than the budget is a batch of its own (its groups can only be counted whole).
func ProofBatches(collections []string, rows map[string]int64, budget int64) [][]string {
	var out [][]string
	var batch []string
	var weight int64
	for _, c := range collections {
		w := rows[c]
		if len(batch) > 0 && weight+w > budget {
			out, batch, weight = append(out, batch), nil, 0
		}
		batch, weight = append(batch, c), weight+w
	}
	if len(batch) > 0 {
		out = append(out, batch)
	}
	return out
}
