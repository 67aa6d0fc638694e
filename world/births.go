package world

import (
	"math/rand/v2"
	"strconv"
	"time"
)

// Births: the content of birth_registry, computed in memory as compact arrays (15 bytes per birth) and streamed
// to COPY row by row.

// Lifecycle statuses of birth_registry.
const (
	statusActive     = "active"
	statusRetired    = "retired"
	statusSuperseded = "superseded"
	statusMerged     = "merged"
	statusDraft      = "draft"
	statusPending    = "pending"
)

// statuses indexes the status column; birthPlan.status holds indexes into it.
var statuses = []string{statusActive, statusRetired, statusSuperseded, statusMerged, statusDraft, statusPending}

// Source systems and actors of births and changes.
const (
	sourceBirthAPI     = "birth-api"
	sourceRegistrySync = "registry-sync"
	sourceImport       = "import-2024"
)

// provenances are the (source_system, actor_ref) pairs of births; birthPlan.prov holds indexes into it.
var provenances = []struct{ source, actor string }{
	{sourceImport, "import-runner"},
	{sourceBirthAPI, "birth-gateway"},
	{sourceBirthAPI, "ops:lan.nguyen"},
	{sourceBirthAPI, "ops:minh.tran"},
	{sourceBirthAPI, "ops:hoa.pham"},
	{sourceRegistrySync, "registry-sync-bot"},
}

// Time line of a generated world: births and changes lie in [baseTime, endTime); the first importShare of the births
// are an initial bulk import during the first importWindow.
var (
	baseTime = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	endTime  = time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
)

const (
	importShare  = 0.35
	importWindow = 72 * time.Hour
	codeWidth    = 7 // digits of an entity code's sequence number
)

// Seed streams: each kind of content draws from its own PCG stream, so changing one never shifts another.
const (
	streamBirths    = 0xb1b1_0001
	streamChangelog = 0xc4a9_0002
	streamChildren  = 0xc41d_0003
	streamChurn     = 0xc8a5_0004
)

// birthPlan is the content of birth_registry rows 1..n; row i has id i+1.
type birthPlan struct {
	shape  *shape
	typ    []uint8 // entity type index
	seq    []int32 // sequence number of the birth within its type (1-based)
	status []uint8 // index into statuses
	prov   []uint8 // index into provenances
	at     []int64 // born_at as microseconds after baseTime, non-decreasing
}

// newBirthPlan draws the births of a world of n births from seed.
func newBirthPlan(n int, seed uint64) *birthPlan {
	s := newShape(n)
	r := rand.New(rand.NewPCG(seed, streamBirths))
	p := &birthPlan{
		shape:  s,
		typ:    make([]uint8, n),
		seq:    make([]int32, n),
		status: make([]uint8, n),
		prov:   make([]uint8, n),
		at:     make([]int64, n),
	}
	// Which type each birth has: exact per-type counts, in random order.
	i := 0
	for t, size := range s.typeSizes {
		for range size {
			p.typ[i] = uint8(t)
			i++
		}
	}
	r.Shuffle(n, func(a, b int) { p.typ[a], p.typ[b] = p.typ[b], p.typ[a] })

	// When: a bulk import in the first days, then a steady stream with exponential gaps up to endTime.
	nImport := int(float64(n) * importShare)
	spread(p.at[:nImport], 0, importWindow.Microseconds(), r)
	spread(p.at[nImport:], importWindow.Microseconds(), endTime.Sub(baseTime).Microseconds(), r)

	counters := make([]int32, len(s.types))
	for i := range n {
		t := p.typ[i]
		counters[t]++
		p.seq[i] = counters[t]

		// Older objects are more likely to have left the live set; drafts and pending ones are recent.
		pos := float64(i) / float64(n)
		age := 1.6 - 1.2*pos
		u := r.Float64()
		switch {
		case u < 0.060*age:
			p.status[i] = 1 // retired
		case u < 0.085*age:
			p.status[i] = 2 // superseded
		case u < 0.097*age:
			p.status[i] = 3 // merged
		case u > 1-0.020*pos:
			p.status[i] = 4 // draft
		case u > 1-0.032*pos:
			p.status[i] = 5 // pending
		}

		switch {
		case i < nImport:
			p.prov[i] = 0
		case r.IntN(100) < 22:
			p.prov[i] = 5
		case r.IntN(100) < 85:
			p.prov[i] = 1
		default:
			p.prov[i] = uint8(2 + r.IntN(3))
		}
	}
	return p
}

// spread fills at with non-decreasing microsecond offsets in [from, to) separated by exponential gaps.
func spread(at []int64, from, to int64, r *rand.Rand) {
	if len(at) == 0 {
		return
	}
	cum := make([]float64, len(at))
	var sum float64
	for i := range cum {
		sum += r.ExpFloat64()
		cum[i] = sum
	}
	sum += r.ExpFloat64() // the gap after the last one keeps it below to
	span := float64(to - from)
	for i, c := range cum {
		at[i] = from + int64(c/sum*span)
	}
}

// entityCode formats the code of the seq-th birth of an entity type: "<type>-<seq, zero-padded to 7 digits>".
func entityCode(typeName string, seq int) string {
	return string(appendEntityCode(make([]byte, 0, len(typeName)+1+codeWidth), typeName, seq))
}

func appendEntityCode(b []byte, typeName string, seq int) []byte {
	b = append(b, typeName...)
	b = append(b, '-')
	var digits [20]byte
	d := strconv.AppendInt(digits[:0], int64(seq), 10)
	for k := len(d); k < codeWidth; k++ {
		b = append(b, '0')
	}
	return append(b, d...)
}

// n is the number of births.
func (p *birthPlan) n() int { return len(p.typ) }

// bornAt returns the born_at of birth i.
func (p *birthPlan) bornAt(i int) time.Time {
	return baseTime.Add(time.Duration(p.at[i]) * time.Microsecond)
}

// code returns the entity_code of birth i.
func (p *birthPlan) code(i int) string {
	return entityCode(p.shape.types[p.typ[i]].name, int(p.seq[i]))
}

// birthColumns are the birth_registry columns written by COPY; canonical_address and parent_code stay NULL.
var birthColumns = []string{"id", "entity_code", "collection_name", "entity_type", "status", "born_at",
	"source_system", "actor_ref"}

// birthSource streams a birthPlan to pgx.CopyFrom.
type birthSource struct {
	p      *birthPlan
	i, end int // current row and end of the range (exclusive)
	vals   []any
	buf    []byte
	ticker ticker
}

// newBirthSource streams births lo..hi-1 (ids lo+1..hi).
func newBirthSource(p *birthPlan, lo, hi int, progress func(int)) *birthSource {
	return &birthSource{p: p, i: lo - 1, end: hi, vals: make([]any, len(birthColumns)),
		ticker: ticker{report: progress}}
}

func (s *birthSource) Next() bool {
	if s.i+1 == s.end {
		s.ticker.done()
		return false
	}
	s.i++
	s.ticker.tick()
	return true
}

// Boxed once, so streaming a row allocates only its id, code and born_at.
var (
	boxedTypes, boxedCollections = func() (types, colls []any) {
		for _, et := range entityTypes {
			types = append(types, et.name)
			colls = append(colls, bornCollections[et.collection].name)
		}
		return types, colls
	}()
	boxedStatuses             = boxStrings(statuses)
	boxedSources, boxedActors = func() (src, act []any) {
		for _, p := range provenances {
			src, act = append(src, p.source), append(act, p.actor)
		}
		return src, act
	}()
)

func boxStrings(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

func (s *birthSource) Values() ([]any, error) {
	i := s.i
	t := s.p.typ[i]
	s.buf = appendEntityCode(s.buf[:0], s.p.shape.types[t].name, int(s.p.seq[i]))
	s.vals[0] = int64(i + 1)
	s.vals[1] = string(s.buf)
	s.vals[2] = boxedCollections[t]
	s.vals[3] = boxedTypes[t]
	s.vals[4] = boxedStatuses[s.p.status[i]]
	s.vals[5] = s.p.bornAt(i)
	s.vals[6] = boxedSources[s.p.prov[i]]
	s.vals[7] = boxedActors[s.p.prov[i]]
	return s.vals, nil
}

func (s *birthSource) Err() error { return nil }
