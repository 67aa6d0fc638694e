package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
)

// The read side of the store: what the API, the dashboard and the status commands show. Every query here reads
// the summary views (v_candidate_effective, v_scan_health, v_current_ruleset) or small bookkeeping tables
// (queue_heartbeat, gov_worker_cursor, system_issues); none walks the raw candidate store row by row.

// Page limits: how many rows one read answers when asked for none, and the most it answers. The API and the CLI
// state the same bounds and refuse a request beyond them (EINVALID) rather than cap it in silence.
const (
	DefaultGroupLimit    = 100
	MaxGroupLimit        = 500
	DefaultSnapshotLimit = 50
	MaxSnapshotLimit     = 1000
	DefaultFindingLimit  = 100
	MaxFindingLimit      = 1000
	DefaultChangeLimit   = 50
	MaxChangeLimit       = 500
)

// CheckLimit applies a page limit: 0 is def, 1..max is taken, anything else is EINVALID naming the bounds.
func CheckLimit(name string, n, def, max int) (int, error) {
	switch {
	case n == 0:
		return def, nil
	case n < 0 || n > max:
		return 0, gcos.Errorf(gcos.EINVALID, "%s %d: want 1..%d", name, n, max)
	}
	return n, nil
}

// maxFilterValue bounds a filter value; dimension values are registry names, far shorter.
const maxFilterValue = 256

// GroupFilter narrows ListGroups. Empty fields do not filter. The dimension filters match exactly; a group whose
// dimension is null never matches a non-empty filter.
type GroupFilter struct {
	Scope          string `json:"scope,omitempty"`
	ObjectClass    string `json:"object_class,omitempty"`
	SourceRegistry string `json:"source_registry,omitempty"`
	Verdict        string `json:"verdict,omitempty"` // the effective verdict (a stored verdict, or stale)
	Dirty          *bool  `json:"dirty,omitempty"`
	After          string `json:"after,omitempty"` // keyset cursor: the last group_key of the previous page
	Limit          int    `json:"limit,omitempty"` // 0 means DefaultGroupLimit; 1..MaxGroupLimit
}

// Validate checks the filter values and normalises the limit; bad values are EINVALID.
func (f *GroupFilter) Validate() error {
	for name, v := range map[string]string{"scope": f.Scope, "object_class": f.ObjectClass, "source_registry": f.SourceRegistry} {
		if len(v) > maxFilterValue {
			return gcos.Errorf(gcos.EINVALID, "%s: longer than %d bytes", name, maxFilterValue)
		}
		if strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return gcos.Errorf(gcos.EINVALID, "%s %s contains control characters", name, gcos.Quote(v))
		}
	}
	if f.Verdict != "" {
		if _, err := gcos.ParseVerdict(f.Verdict); err != nil {
			return gcos.Errorf(gcos.EINVALID, "verdict %s: want one of %v or %s", gcos.Quote(f.Verdict), gcos.StoredVerdicts, gcos.Quote(gcos.VerdictStale))
		}
	}
	if f.After != "" && !gcos.IsGroupKey(f.After) {
		return gcos.Errorf(gcos.EINVALID, "after %s: want a group key (32 lowercase hex digits)", gcos.Quote(f.After))
	}
	var err error
	f.Limit, err = CheckLimit("limit", f.Limit, DefaultGroupLimit, MaxGroupLimit)
	return err
}

// checkFilterValues refuses a filter value that names nothing: a scope that is not a responsibility scope, or an
// object class or source registry no group has. An empty answer would read as "none of those", which is not true.
func (s *Store) checkFilterValues(ctx context.Context, f GroupFilter) error {
	if err := s.CheckScope(ctx, f.Scope); err != nil {
		return err
	}
	for _, d := range []struct{ name, column, value string }{
		{"object_class", "object_class", f.ObjectClass}, {"source_registry", "source_registry", f.SourceRegistry},
	} {
		if d.value == "" {
			continue
		}
		var known bool
		if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM governance_group WHERE `+d.column+` = $1)`, d.value).Scan(&known); err != nil {
			return fmt.Errorf("check %s filter: %w", d.name, err)
		}
		if !known {
			return gcos.Errorf(gcos.EINVALID, "%s %s: no group has it", d.name, gcos.Quote(d.value))
		}
	}
	return nil
}

// CheckScope refuses a scope that is not a responsibility scope (governance_responsibility_scope) with EINVALID
// naming the known ones; "" (every scope) passes.
func (s *Store) CheckScope(ctx context.Context, scope string) error {
	if scope == "" {
		return nil
	}
	var known []string
	if err := s.pool.QueryRow(ctx, `SELECT coalesce(array_agg(scope_code ORDER BY scope_code), '{}') FROM governance_responsibility_scope`).
		Scan(&known); err != nil {
		return fmt.Errorf("read responsibility scopes: %w", err)
	}
	if !slices.Contains(known, scope) {
		return gcos.Errorf(gcos.EINVALID, "scope %s: not a responsibility scope (known: %s)", gcos.Quote(scope), strings.Join(known, ", "))
	}
	return nil
}

// GroupView is one group as of now under the current ruleset: its dimensions, its stored candidate row (fields
// are null when the group was never seeded under that ruleset) and its effective verdict.
type GroupView struct {
	GroupKey string `json:"group_key"`
	gcos.Dimensions
	GroupMemberCount  int64      `json:"group_member_count"` // objects in the group (registry count)
	SnapshotRef       *int64     `json:"source_snapshot_ref"`
	SnapshotExists    bool       `json:"snapshot_exists"`
	RulesetVersion    string     `json:"ruleset_version"`
	RulesetStatus     string     `json:"ruleset_status"`
	ScanTime          *time.Time `json:"scan_time"`
	CandidateVerdict  *string    `json:"candidate_verdict"` // as stored
	EffectiveVerdict  string     `json:"effective_verdict"` // as of now: the stored verdict only while clean
	Clean             bool       `json:"clean"`
	Reasons           []string   `json:"reasons"` // why it is not clean
	InputQualityState *string    `json:"input_quality_state"`
	Dirty             bool       `json:"dirty"`
	DirtyReason       *string    `json:"dirty_reason"`
	DirtiedAt         *time.Time `json:"dirtied_at"`
	StaleAfter        *time.Time `json:"stale_after"`
	RecomputeStatus   *string    `json:"recompute_status"`
	RiskClass         *string    `json:"risk_class"`
	CoverageRequired  *bool      `json:"coverage_required"`
	CoverageScanRef   *string    `json:"coverage_scan_ref"`
	CoverageOutcome   *string    `json:"coverage_outcome"`
	IssueRef          *string    `json:"issue_ref"`
	LastRunID         *string    `json:"last_run_id"`
	UpdatedAt         *time.Time `json:"updated_at"`
}

// GroupPage is one page of ListGroups; Next is the After of the following page, empty on the last one.
type GroupPage struct {
	Groups []GroupView `json:"groups"`
	Next   string      `json:"next"`
}

const groupViewColumns = `group_key, object_class, source_registry, axis_family, scope, lifecycle_status, owner_scope,
	group_member_count, source_snapshot_ref, snapshot_exists, ruleset_version, ruleset_status, scan_time,
	candidate_verdict, effective_verdict, coalesce(clean, false), coalesce(reasons, ARRAY[]::text[]), input_quality_state, coalesce(dirty, false), dirty_reason,
	dirtied_at, stale_after, recompute_status, risk_class, coverage_required, coverage_scan_ref, coverage_outcome,
	issue_ref, last_run_id, updated_at`

func scanGroupView(row pgx.Row) (GroupView, error) {
	var g GroupView
	err := row.Scan(&g.GroupKey, &g.ObjectClass, &g.SourceRegistry, &g.AxisFamily, &g.Scope, &g.LifecycleStatus,
		&g.OwnerScope, &g.GroupMemberCount, &g.SnapshotRef, &g.SnapshotExists, &g.RulesetVersion, &g.RulesetStatus,
		&g.ScanTime, &g.CandidateVerdict, &g.EffectiveVerdict, &g.Clean, &g.Reasons, &g.InputQualityState, &g.Dirty,
		&g.DirtyReason, &g.DirtiedAt, &g.StaleAfter, &g.RecomputeStatus, &g.RiskClass, &g.CoverageRequired,
		&g.CoverageScanRef, &g.CoverageOutcome, &g.IssueRef, &g.LastRunID, &g.UpdatedAt)
	if g.Reasons == nil {
		g.Reasons = []string{}
	}
	return g, err
}

// ListGroups returns one page of groups from v_candidate_effective, ordered by group_key, starting after
// f.After (keyset pagination: pages stay consistent and cheap however deep the caller goes). Before any ruleset
// exists there is nothing to read verdicts under, and the page is empty.
func (s *Store) ListGroups(ctx context.Context, f GroupFilter) (GroupPage, error) {
	page := GroupPage{Groups: []GroupView{}}
	if err := f.Validate(); err != nil {
		return page, err
	}
	if err := s.checkFilterValues(ctx, f); err != nil {
		return page, err
	}
	rows, err := s.pool.Query(ctx, `
		SELECT `+groupViewColumns+`
		FROM v_candidate_effective
		WHERE group_key > $1
		  AND ($2 = '' OR scope = $2)
		  AND ($3 = '' OR object_class = $3)
		  AND ($4 = '' OR source_registry = $4)
		  AND ($5 = '' OR effective_verdict = $5)
		  AND ($6::boolean IS NULL OR coalesce(dirty, false) = $6::boolean)
		ORDER BY group_key
		LIMIT $7`, f.After, f.Scope, f.ObjectClass, f.SourceRegistry, f.Verdict, f.Dirty, f.Limit+1)
	if err != nil {
		return page, fmt.Errorf("list groups: %w", err)
	}
	groups, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (GroupView, error) { return scanGroupView(r) })
	if err != nil {
		return page, fmt.Errorf("list groups: %w", err)
	}
	if len(groups) > f.Limit {
		groups = groups[:f.Limit]
		page.Next = groups[len(groups)-1].GroupKey
	}
	if groups != nil {
		page.Groups = groups
	}
	return page, nil
}

// GetGroup returns one group as of now (ENOTFOUND when it is not in the group registry, or no ruleset exists yet).
func (s *Store) GetGroup(ctx context.Context, key string) (GroupView, error) {
	if !gcos.IsGroupKey(key) {
		return GroupView{}, gcos.Errorf(gcos.EINVALID, "group key %s: want 32 lowercase hex digits", gcos.Quote(key))
	}
	g, err := scanGroupView(s.pool.QueryRow(ctx, `SELECT `+groupViewColumns+` FROM v_candidate_effective WHERE group_key = $1`, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return GroupView{}, gcos.Errorf(gcos.ENOTFOUND, "group %s: not found (not in the group registry, or no ruleset yet)", key)
	}
	if err != nil {
		return GroupView{}, fmt.Errorf("get group %s: %w", key, err)
	}
	return g, nil
}

// VerdictCount is the size of one effective verdict: in groups, and in objects (the groups' member counts; an
// object is counted once per scope it belongs to).
type VerdictCount struct {
	Groups  int64 `json:"groups"`
	Objects int64 `json:"objects"`
}

// ScopeVerdicts is the effective-verdict distribution of one scope, where objects are counted exactly once.
type ScopeVerdicts struct {
	Scope    *string                 `json:"scope"`
	Groups   int64                   `json:"groups"`
	Objects  int64                   `json:"objects"`
	Verdicts map[string]VerdictCount `json:"verdicts"`
}

// ScanHealth is v_scan_health plus the scan lag derived from it.
type ScanHealth struct {
	Groups         int64      `json:"groups"`
	DirtyGroups    int64      `json:"dirty_groups"`
	OldestDirtyAt  *time.Time `json:"oldest_dirty_at"`
	ScanLagSeconds float64    `json:"scan_lag_seconds"` // how long the oldest dirty mark has waited; 0 with no dirty set
	FailedGroups   int64      `json:"failed_groups"`
	ExpiredGroups  int64      `json:"expired_groups"`
	UnseededGroups int64      `json:"unseeded_groups"`
	// LastRuns is the last scan run per mode (backfill, event, incremental, full_audit).
	LastRuns map[string]ScanRunBrief `json:"last_runs"`
}

// ScanRunBrief is the last candidate_scan_run of one mode.
type ScanRunBrief struct {
	RunID         string     `json:"run_id"`
	StartedAt     *time.Time `json:"started_at"`
	FinishedAt    *time.Time `json:"finished_at"`
	Status        string     `json:"status"`
	GroupsScanned *int64     `json:"groups_scanned"`
}

// RulesetBrief is a ruleset version's lifecycle: what the summary names of the ruleset verdicts are read under (the
// active one, else, before any activation, the newest draft, whose status says so) and the head of a RulesetRow.
type RulesetBrief struct {
	Version     string     `json:"ruleset_version"`
	Status      string     `json:"status"`
	ProposedBy  string     `json:"proposed_by"`
	ProposedAt  time.Time  `json:"proposed_at"`
	ActivatedAt *time.Time `json:"activated_at"`
	ActivatedBy *string    `json:"activated_by"`
	ApprovalRef *string    `json:"approval_ref"`
}

// SnapshotBrief names the newest governance snapshot.
type SnapshotBrief struct {
	ID         int64     `json:"id"`
	SnapshotAt time.Time `json:"snapshot_at"`
	Scope      string    `json:"scope"`
}

// GroupsWithMembers is what GCOS counts as a group wherever it counts groups (summary, status, dashboard,
// metrics), as a condition on v_candidate_effective: a group of the registry with members, as its candidate row
// under the current ruleset counts them (or, never scanned, the registry's row) — the groups a snapshot and a
// from-scratch evaluation find. A group retired (no member left, or its members moved) is kept for history only.
const GroupsWithMembers = `coalesce(member_count, group_member_count) > 0`

// Summary is the one-read picture of GCOS the dashboard, /metrics and `gcos status` show, read in a single
// repeatable-read transaction so its numbers agree with one another.
type Summary struct {
	At                time.Time               `json:"at"` // the database clock at the read
	Groups            int64                   `json:"groups"`
	Objects           int64                   `json:"objects"` // sum of group member counts (objects × scopes)
	Verdicts          map[string]VerdictCount `json:"verdicts"`
	Scopes            []ScopeVerdicts         `json:"scopes"`
	DirtyGroups       int64                   `json:"dirty_groups"`
	ScanHealth        ScanHealth              `json:"scan_health"`
	Ruleset           *RulesetBrief           `json:"ruleset"` // nil before any ruleset was computed
	LastSnapshot      *SnapshotBrief          `json:"last_snapshot"`
	OpenFindings      map[string]int64        `json:"open_findings"` // by issue type
	OpenFindingsTotal int64                   `json:"open_findings_total"`
	Cover             *CoverBrief             `json:"cover"` // nil before any audit proved a slice
}

// CoverBrief is where the full audits' rotating cover stands: the last proof, and since when every slice of the
// cover (at the last proof's number of slices) has been proven.
type CoverBrief struct {
	RunID       string     `json:"run_id"`
	VerifiedAt  time.Time  `json:"verified_at"`
	Slice       int        `json:"slice"`
	Slices      int        `json:"slices"`
	Collections int        `json:"collections"`
	Mismatches  int        `json:"mismatches"`
	Proven      int        `json:"slices_proven"`     // distinct slices proven at this number of slices
	WholeSince  *time.Time `json:"whole_cover_since"` // the oldest of each slice's latest proof, once all are proven
}

// Summary reads the verdict distribution (groups and objects, overall and per scope), the dirty set and scan
// health, the current ruleset, the newest snapshot and the open findings by type.
func (s *Store) Summary(ctx context.Context) (Summary, error) {
	sum := Summary{Verdicts: map[string]VerdictCount{}, Scopes: []ScopeVerdicts{}, OpenFindings: map[string]int64{},
		ScanHealth: ScanHealth{LastRuns: map[string]ScanRunBrief{}}}
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT now()`).Scan(&sum.At); err != nil {
			return err
		}
		// A group is one with members under the current ruleset (GroupsWithMembers): what a snapshot, verify and the
		// ledger count. A retired group, kept for history, is not one.
		rows, err := tx.Query(ctx, `
			SELECT scope, effective_verdict, count(*), coalesce(sum(coalesce(member_count, group_member_count)), 0)::bigint
			FROM v_candidate_effective WHERE `+GroupsWithMembers+`
			GROUP BY scope, effective_verdict ORDER BY scope NULLS FIRST, effective_verdict`)
		if err != nil {
			return err
		}
		var cur *ScopeVerdicts
		for rows.Next() {
			var scope *string
			var verdict string
			var n VerdictCount
			if err := rows.Scan(&scope, &verdict, &n.Groups, &n.Objects); err != nil {
				rows.Close()
				return err
			}
			if cur == nil || !sameScope(cur.Scope, scope) {
				sum.Scopes = append(sum.Scopes, ScopeVerdicts{Scope: scope, Verdicts: map[string]VerdictCount{}})
				cur = &sum.Scopes[len(sum.Scopes)-1]
			}
			cur.Verdicts[verdict] = n
			cur.Groups += n.Groups
			cur.Objects += n.Objects
			total := sum.Verdicts[verdict]
			total.Groups += n.Groups
			total.Objects += n.Objects
			sum.Verdicts[verdict] = total
			sum.Groups += n.Groups
			sum.Objects += n.Objects
		}
		if err := rows.Err(); err != nil {
			return err
		}

		var lastRuns []byte
		h := &sum.ScanHealth
		if err := tx.QueryRow(ctx, `
			SELECT groups, dirty_groups, oldest_dirty_at, coalesce(extract(epoch FROM now() - oldest_dirty_at), 0)::float8,
			       failed_groups, expired_groups, unseeded_groups, last_runs
			FROM v_scan_health`).Scan(&h.Groups, &h.DirtyGroups, &h.OldestDirtyAt, &h.ScanLagSeconds, &h.FailedGroups,
			&h.ExpiredGroups, &h.UnseededGroups, &lastRuns); err != nil {
			return err
		}
		if len(lastRuns) > 0 {
			if err := json.Unmarshal(lastRuns, &h.LastRuns); err != nil {
				return fmt.Errorf("scan health last runs: %w", err)
			}
		}
		if h.ScanLagSeconds < 0 {
			h.ScanLagSeconds = 0
		}
		// The same groups as above: the registry's rows include retired groups, kept for history.
		h.Groups = sum.Groups
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM v_candidate_effective WHERE member_count IS NULL AND `+GroupsWithMembers).
			Scan(&h.UnseededGroups); err != nil {
			return err
		}
		sum.DirtyGroups = h.DirtyGroups

		var rs RulesetBrief
		err = tx.QueryRow(ctx, `
			SELECT r.ruleset_version, r.status, r.proposed_by, r.proposed_at, r.activated_at, r.activated_by, r.approval_ref
			FROM v_current_ruleset cr JOIN governance_ruleset r USING (ruleset_version)`).Scan(&rs.Version, &rs.Status,
			&rs.ProposedBy, &rs.ProposedAt, &rs.ActivatedAt, &rs.ActivatedBy, &rs.ApprovalRef)
		switch {
		case err == nil:
			sum.Ruleset = &rs
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}

		var snap SnapshotBrief
		err = tx.QueryRow(ctx, `SELECT id, snapshot_at, scope FROM evolution_snapshots
			WHERE scope LIKE 'governance.%' ORDER BY id DESC LIMIT 1`).Scan(&snap.ID, &snap.SnapshotAt, &snap.Scope)
		switch {
		case err == nil:
			sum.LastSnapshot = &snap
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}

		var cover CoverBrief
		err = tx.QueryRow(ctx, `
			WITH last AS (SELECT run_id, verified_at, verify_slice, verify_slices, cardinality(verify_collections) AS n,
			                     verify_mismatches FROM candidate_scan_run WHERE verified_at IS NOT NULL
			              ORDER BY verified_at DESC LIMIT 1),
			     slices AS (SELECT verify_slice, max(verified_at) AS at FROM candidate_scan_run
			                WHERE verify_slices = (SELECT verify_slices FROM last) GROUP BY 1)
			SELECT l.run_id, l.verified_at, l.verify_slice, l.verify_slices, coalesce(l.n, 0), coalesce(l.verify_mismatches, 0),
			       (SELECT count(*) FROM slices),
			       CASE WHEN (SELECT count(*) FROM slices) >= l.verify_slices THEN (SELECT min(at) FROM slices) END
			FROM last l`).Scan(&cover.RunID, &cover.VerifiedAt, &cover.Slice, &cover.Slices, &cover.Collections,
			&cover.Mismatches, &cover.Proven, &cover.WholeSince)
		switch {
		case err == nil:
			sum.Cover = &cover
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}

		rows, err = tx.Query(ctx, `SELECT coalesce(issue_type, ''), count(*) FROM system_issues
			WHERE status = 'open' AND coalesce_key LIKE 'gov:%' GROUP BY 1`)
		if err != nil {
			return err
		}
		for rows.Next() {
			var typ string
			var n int64
			if err := rows.Scan(&typ, &n); err != nil {
				rows.Close()
				return err
			}
			sum.OpenFindings[typ] = n
			sum.OpenFindingsTotal += n
		}
		return rows.Err()
	})
	if err != nil {
		return sum, fmt.Errorf("summary: %w", err)
	}
	return sum, nil
}

func sameScope(a, b *string) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// Worker heartbeat states.
const (
	HeartbeatOK     = "ok"     // ticked within intake.silent_gap_threshold
	HeartbeatSilent = "silent" // last tick older than the threshold: quiet is not dead, this may be dead
	HeartbeatNever  = "never"  // registered but never ticked
	// HeartbeatFailing: ticking, but its last run failed (its loop backs off and retries): alive is not healthy.
	HeartbeatFailing = "failing"
)

// WorkerView is one GCOS executor's queue_heartbeat row.
type WorkerView struct {
	Name           string     `json:"executor_name"`
	Kind           *string    `json:"executor_kind"`
	LastTickAt     *time.Time `json:"last_tick_at"`
	AgeSeconds     *float64   `json:"age_seconds"` // since the last tick, by the database clock
	TickStatus     *string    `json:"last_tick_status"`
	State          string     `json:"state"`                // HeartbeatOK, HeartbeatFailing, HeartbeatSilent or HeartbeatNever
	SilentAfter    float64    `json:"silent_after_seconds"` // SilenceLimit: the threshold plus this executor's tick cadence
	LeaseOwner     *string    `json:"lease_owner"`
	LeaseExpiresAt *time.Time `json:"lease_expires_at"`
	LeaseHeld      bool       `json:"lease_held"` // a lease owner is set and its lease has not expired
}

// CursorView is one intake cursor (gov_worker_cursor) as the status views show it.
type CursorView struct {
	WorkerName         string     `json:"worker_name"`
	Source             string     `json:"source"`
	PositionAt         *time.Time `json:"position_at"` // the cursor position as an instant
	PositionID         *string    `json:"position_id"`
	PositionAgeSeconds *float64   `json:"position_age_seconds"` // now − position_at: how old the last handed-off row is
	LastHorizon        *time.Time `json:"last_horizon"`
	EventsSeen         int64      `json:"events_seen"`
	AttemptsWritten    int64      `json:"attempts_written"`
	DeadLettered       int64      `json:"dead_lettered"`
	LastRunAt          *time.Time `json:"last_run_at"`
	LastRunAgeSeconds  *float64   `json:"last_run_age_seconds"`
}

// WorkersReport is every GCOS worker's heartbeat and every intake cursor.
type WorkersReport struct {
	At                     time.Time    `json:"at"`
	SilentThresholdSeconds float64      `json:"silent_threshold_seconds"`
	Workers                []WorkerView `json:"workers"`
	// Leases are the singleton roles (full audit, backfill, event promotion, the silent-gap monitor): who holds
	// each and until when. A lease is not a worker: it is renewed, not ticked, so it has no silence.
	Leases  []LeaseView  `json:"leases"`
	Cursors []CursorView `json:"cursors"`
}

// LeaseView is one role lease (governance_role_lease) by the database clock.
type LeaseView struct {
	Role      string     `json:"role"`
	Holder    *string    `json:"holder"` // nil: free (released, or never taken)
	Held      bool       `json:"held"`   // a holder whose lease has not expired
	Epoch     int64      `json:"epoch"`  // how many times the role was taken
	TakenAt   *time.Time `json:"taken_at"`
	RenewedAt *time.Time `json:"renewed_at"`
	ExpiresAt *time.Time `json:"expires_at"`
}

// Workers reads queue_heartbeat rows of GCOS executors (names starting "gcos.") with their age by the database
// clock, and the intake cursors when gov_worker_cursor exists.
func (s *Store) Workers(ctx context.Context) (WorkersReport, error) {
	threshold := s.cfg.Intake.SilentGapThreshold.Duration()
	if threshold <= 0 {
		threshold = 30 * time.Second
	}
	rep := WorkersReport{SilentThresholdSeconds: threshold.Seconds(), Workers: []WorkerView{}, Cursors: []CursorView{}}
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var hasCursors bool
		if err := tx.QueryRow(ctx, `SELECT now(), to_regclass('gov_worker_cursor') IS NOT NULL`).Scan(&rep.At, &hasCursors); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `
			SELECT executor_name, executor_kind, last_tick_at, extract(epoch FROM now() - last_tick_at)::float8,
			       last_tick_status, lease_owner, lease_expires_at,
			       coalesce(lease_owner IS NOT NULL AND lease_expires_at > now(), false)
			FROM queue_heartbeat WHERE executor_name LIKE 'gcos.%' AND coalesce(executor_kind, '') <> 'lease'
			ORDER BY executor_name`)
		if err != nil {
			return err
		}
		rep.Workers, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (WorkerView, error) {
			var w WorkerView
			err := r.Scan(&w.Name, &w.Kind, &w.LastTickAt, &w.AgeSeconds, &w.TickStatus, &w.LeaseOwner,
				&w.LeaseExpiresAt, &w.LeaseHeld)
			w.SilentAfter = s.SilenceLimit(w.Name).Seconds()
			switch {
			case w.AgeSeconds == nil:
				w.State = HeartbeatNever
			case *w.AgeSeconds > s.SilenceLimit(w.Name).Seconds(): // the same limit the silent-gap monitor uses
				w.State = HeartbeatSilent
			case w.TickStatus != nil && *w.TickStatus == "error":
				w.State = HeartbeatFailing
			default:
				w.State = HeartbeatOK
			}
			return w, err
		})
		if err != nil {
			return err
		}
		if !hasCursors {
			return nil
		}
		rows, err = tx.Query(ctx, `SELECT role, owner, coalesce(owner IS NOT NULL AND expires_at > now(), false), epoch,
			taken_at, renewed_at, expires_at FROM governance_role_lease ORDER BY role`)
		if err != nil {
			return err
		}
		rep.Leases, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (LeaseView, error) {
			var l LeaseView
			err := r.Scan(&l.Role, &l.Holder, &l.Held, &l.Epoch, &l.TakenAt, &l.RenewedAt, &l.ExpiresAt)
			return l, err
		})
		if err != nil {
			return err
		}
		rows, err = tx.Query(ctx, `
			SELECT worker_name, source, last_created_at, last_event_id, extract(epoch FROM now() - last_created_at)::float8,
			       last_horizon, events_seen, attempts_written, dead_lettered, last_run_at,
			       extract(epoch FROM now() - last_run_at)::float8
			FROM gov_worker_cursor ORDER BY source`)
		if err != nil {
			return err
		}
		rep.Cursors, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (CursorView, error) {
			var c CursorView
			err := r.Scan(&c.WorkerName, &c.Source, &c.PositionAt, &c.PositionID, &c.PositionAgeSeconds, &c.LastHorizon,
				&c.EventsSeen, &c.AttemptsWritten, &c.DeadLettered, &c.LastRunAt, &c.LastRunAgeSeconds)
			return c, err
		})
		return err
	})
	if err != nil {
		return rep, fmt.Errorf("workers: %w", err)
	}
	if rep.Leases == nil {
		rep.Leases = []LeaseView{}
	}
	if rep.Workers == nil {
		rep.Workers = []WorkerView{}
	}
	if rep.Cursors == nil {
		rep.Cursors = []CursorView{}
	}
	return rep, nil
}

// The executors the silent-gap monitor watches are named by these prefixes in queue_heartbeat.
const (
	IntakeExecutorPrefix = "gcos.intake." // gcos.intake.<source>
	ScanExecutorPrefix   = "gcos.scan."   // gcos.scan.<mode>
)

// SilenceThreshold is intake.silent_gap_threshold (30 s when unset).
func (s *Store) SilenceThreshold() time.Duration {
	if d := s.cfg.Intake.SilentGapThreshold.Duration(); d > 0 {
		return d
	}
	return 30 * time.Second
}

// tickCadence is how long an executor legitimately waits between two ticks by its own schedule; the monitor allows
// it on top of the threshold, so a loop that ticks once a minute by design is not called silent after 30 s. The
// scan loops tick after each pass: the full audit's holder once per min(interval, 1 min), the incremental loop once
// per interval, the event loop at least once per 20 notification waits. The intake ticks after every poll.
func (s *Store) tickCadence(executor string) time.Duration {
	sc := s.cfg.Scan
	switch executor {
	case ScanExecutorPrefix + ModeFullAudit:
		return min(sc.FullAuditInterval.Duration(), time.Minute)
	case ScanExecutorPrefix + ModeIncremental:
		return sc.IncrementalInterval.Duration()
	case ScanExecutorPrefix + ModeEvent:
		w := sc.CoalesceWindow.Duration()
		return 21*max(w, 50*time.Millisecond) + w
	}
	if strings.HasPrefix(executor, IntakeExecutorPrefix) {
		return s.cfg.Intake.PollInterval.Duration()
	}
	return 0
}

// SilenceLimit is how old an executor's last tick may be before CheckSilence calls it silent:
// intake.silent_gap_threshold plus the executor's own tick cadence. Status views should use it too, so that they
// and the findings agree on who is silent.
func (s *Store) SilenceLimit(executor string) time.Duration {
	return s.SilenceThreshold() + s.tickCadence(executor)
}
