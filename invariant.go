package gcos

// Bucket is one term of the per-scope coverage invariant (SPEC §12).
type Bucket string

// The invariant's buckets: every object of a scope is counted in exactly one.
const (
	BucketCovered            Bucket = "covered"             // relevant, an owner resolves
	BucketOrphans            Bucket = "orphans"             // relevant, no owner
	BucketApprovedExceptions Bucket = "approved_exceptions" // relevant, under an approved unexpired exception
	BucketRetiredOrIgnored   Bucket = "retired_or_ignored"  // retired or not_relevant
	BucketStale              Bucket = "stale"               // stale, unknown or needs_input
	BucketDeferredBirth      Bucket = "deferred_birth"
	BucketClass0             Bucket = "class_0"
)

// Buckets lists the buckets in ledger order.
var Buckets = []Bucket{
	BucketCovered, BucketOrphans, BucketApprovedExceptions, BucketRetiredOrIgnored,
	BucketStale, BucketDeferredBirth, BucketClass0,
}

// CoverageOutcome is how a relevant object's coverage resolves.
type CoverageOutcome string

// Coverage outcomes.
const (
	CoverageCovered           CoverageOutcome = "covered"
	CoverageOrphan            CoverageOutcome = "orphan"
	CoverageApprovedException CoverageOutcome = "approved_exception"
)

// CoverageOutcomes lists every coverage outcome (the CHECK list of governance_candidate_coverage.outcome).
var CoverageOutcomes = []CoverageOutcome{CoverageCovered, CoverageOrphan, CoverageApprovedException}

// ResolveCoverage decides a relevant object's coverage. An approved, unexpired exception wins over an owner: it
// is an explicit, time-bounded decision about the object and must stay visible in the ledger until it lapses, when
// the owner (covered) or its absence (orphan) takes over. An empty owner reference is no owner.
func ResolveCoverage(owner *string, hasApprovedException bool) CoverageOutcome {
	switch {
	case hasApprovedException:
		return CoverageApprovedException
	case owner != nil && *owner != "":
		return CoverageCovered
	default:
		return CoverageOrphan
	}
}

// BucketFor places an object by its effective verdict (and, when relevant, its coverage). Anything not provably
// elsewhere lands in stale: a relevant object without a known coverage outcome is an orphan, and an unrecognised
// verdict counts as stale, so the ledger can never look better than the data.
func BucketFor(effective Verdict, coverage CoverageOutcome) Bucket {
	switch effective {
	case VerdictRelevant:
		switch coverage {
		case CoverageCovered:
			return BucketCovered
		case CoverageApprovedException:
			return BucketApprovedExceptions
		default:
			return BucketOrphans
		}
	case VerdictNotRelevant, VerdictRetired:
		return BucketRetiredOrIgnored
	case VerdictDeferredBirth:
		return BucketDeferredBirth
	case VerdictClass0:
		return BucketClass0
	default: // stale, unknown, needs_input, or anything unrecognised
		return BucketStale
	}
}

// Ledger is the invariant of one scope, in objects: Total must equal the sum of the buckets.
type Ledger struct {
	Scope              string `json:"scope"`
	Total              int64  `json:"total"`
	Covered            int64  `json:"covered"`
	Orphans            int64  `json:"orphans"`
	ApprovedExceptions int64  `json:"approved_exceptions"`
	RetiredOrIgnored   int64  `json:"retired_or_ignored"`
	Stale              int64  `json:"stale"`
	DeferredBirth      int64  `json:"deferred_birth"`
	Class0             int64  `json:"class_0"`
	// Uncounted is the part of Stale no group has counted yet: objects born, or moved, since their group's last
	// scan. The rest of Stale is the members of groups whose verdict is stale (dirty, expired, failed, or read under
	// a ruleset that is not active). Informational: it is not a bucket of its own.
	Uncounted int64 `json:"uncounted"`
}

// Add counts n objects into bucket b (Total is counted separately, from the source, so the check means something).
func (l *Ledger) Add(b Bucket, n int64) {
	switch b {
	case BucketCovered:
		l.Covered += n
	case BucketOrphans:
		l.Orphans += n
	case BucketApprovedExceptions:
		l.ApprovedExceptions += n
	case BucketRetiredOrIgnored:
		l.RetiredOrIgnored += n
	case BucketDeferredBirth:
		l.DeferredBirth += n
	case BucketClass0:
		l.Class0 += n
	default:
		l.Stale += n
	}
}

// Sum is the right-hand side of the invariant.
func (l Ledger) Sum() int64 {
	return l.Covered + l.Orphans + l.ApprovedExceptions + l.RetiredOrIgnored + l.Stale + l.DeferredBirth + l.Class0
}

// Difference is Total - Sum: positive when objects are uncounted, negative when some are counted twice.
func (l Ledger) Difference() int64 { return l.Total - l.Sum() }

// Closes reports whether the invariant holds; a ledger that does not close raises governance_schema_drift.
func (l Ledger) Closes() bool { return l.Difference() == 0 }

// LedgerReport is the invariant ledger of every scope (or one), against one snapshot.
type LedgerReport struct {
	SnapshotID *int64   `json:"snapshot_id"`
	Ledgers    []Ledger `json:"ledgers"`
	Closes     bool     `json:"closes"`
}
