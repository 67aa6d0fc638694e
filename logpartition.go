package gcos

import (
	"slices"
	"time"
)

// GCOS's growing logs (the verdict change log, the change feed) are partitioned by time, and retention drops whole
// partitions instead of deleting rows: a DELETE of a day's rows at 10⁸ births is a vacuum storm, a DROP is a catalog
// change. These are the decisions; the store runs them (postgres.MaintainLogTx).

// A Span is the half-open time range [From, To): one partition's bounds.
type Span struct {
	From, To time.Time
}

// LogPartitionsToCreate returns the partitions a log lacks, in order: the width-aligned bin of every instant in need
// (the time now and ahead of it, and each row its default partition caught), clipped to what the existing
// partitions leave free, so that a changed width never overlaps a partition already made. Bins are aligned to the
// zero time, as time.Truncate does (for a width that divides a day, to midnight UTC).
func LogPartitionsToCreate(existing []Span, need []time.Time, width time.Duration) []Span {
	if width <= 0 {
		return nil
	}
	taken := slices.Clone(existing)
	var out []Span
	for _, t := range need {
		from := t.UTC().Truncate(width)
		for _, free := range freeWithin(Span{from, from.Add(width)}, taken) {
			out = append(out, free)
			taken = append(taken, free)
		}
	}
	slices.SortFunc(out, func(a, b Span) int { return a.From.Compare(b.From) })
	return out
}

// freeWithin returns the parts of s no span of taken overlaps.
func freeWithin(s Span, taken []Span) []Span {
	free := []Span{s}
	for _, t := range taken {
		var next []Span
		for _, f := range free {
			if !t.From.Before(f.To) || !f.From.Before(t.To) { // disjoint
				next = append(next, f)
				continue
			}
			if f.From.Before(t.From) {
				next = append(next, Span{f.From, t.From})
			}
			if t.To.Before(f.To) {
				next = append(next, Span{t.To, f.To})
			}
		}
		free = next
	}
	return free
}

// A LogPartition is one partition of a log: its bounds, and the newest transaction that wrote a row in it (an xid8;
// 0 when it is empty).
type LogPartition struct {
	Span
	Newest uint64
}

// LogPartitionsToDrop returns the indexes of the partitions retention drops, and the log's horizon after: a
// partition goes when it holds only rows older than cutoff (its upper bound is at or before it) and every
// transaction that wrote it lies below mark (the transaction every reader of the log has read past). The horizon
// moves to just past the newest transaction dropped (never back), so a reader positioned below it is told it may
// have missed a row, and one at or above it misses none: every row of a transaction at or above the horizon is kept.
func LogPartitionsToDrop(parts []LogPartition, cutoff time.Time, mark, horizon uint64) ([]int, uint64) {
	var drop []int
	for i, p := range parts {
		if p.To.After(cutoff) || p.Newest >= mark {
			continue
		}
		drop = append(drop, i)
		if p.Newest > 0 {
			horizon = max(horizon, p.Newest+1)
		}
	}
	return drop, horizon
}

// SignalKeyRotationDue says whether the signal keys' two generations rotate at now (postgres.RotateSignalKeysTx):
// the current generation has been current since since for keep (the dedup window), so every key of the other one
// was first seen longer than keep ago and the other can be emptied to become the current one. A key is so kept for
// at least keep and less than twice keep.
func SignalKeyRotationDue(since, now time.Time, keep time.Duration) bool {
	return keep > 0 && !now.Before(since.Add(keep))
}
