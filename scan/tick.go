package scan

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"gcos"
	"gcos/evaluate"
	"gcos/postgres"
)

// ScanOptions parameterise one scan tick.
type ScanOptions struct {
	Mode     string
	RunID    string // one run may span several ticks; empty starts a new run
	Limit    int    // groups per tick; 0 = configured batch size
	Debounce bool   // event mode: a group scanned within the coalesce window waits out the window (see claimDirtySQL)
	Expired  bool   // also groups past stale_after
	// Groups, when set, claims just these groups when they are dirty or past stale_after (the gate's synchronous
	// re-scan), waiting for a scanner that holds one: whatever it commits is then re-checked, not scanned twice.
	Groups []string

	// placed is set on the tick that follows one which recorded the groups its members moved to: it does not
	// record (and follow itself) again.
	placed bool
	// moved is set on the attempts that follow one whose counts did not add up (errCountsMoved): they take the
	// groups counted above the count with their own (movedCounts).
	moved bool
	// dirty, when set, is the dirty set's size as the previous tick of the run counted it when it ended: the storm
	// throttle takes it instead of counting again.
	dirty *int64
}

// ScanResult reports one tick.
type ScanResult struct {
	RunID          string `json:"run_id"`
	Mode           string `json:"mode"`
	RulesetVersion string `json:"ruleset_version"`
	Claimed        int    `json:"claimed"`
	Scanned        int    `json:"scanned"`
	Seeded         int    `json:"seeded"`
	Unchanged      int    `json:"unchanged"` // scans whose result equalled the stored one (early cutoff)
	Retired        int    `json:"retired"`   // groups retired: no member left, or their members moved to another key
	VerdictChanges int    `json:"verdict_changes"`
	Failed         int    `json:"failed"`
	Deferred       int    `json:"deferred"` // claimed groups left dirty: a row they need was held by another transaction
	Storm          bool   `json:"storm"`
	Remaining      int64  `json:"remaining"` // dirty groups left after this tick

	dirty int64 // the dirty set's size when the tick ended (Remaining less the pending marks held)
}

// claimDirtySQL claims dirty groups under the current ruleset (through the partial index on dirty rows), skipping
// rows another scanner holds and rows waiting out a retry backoff; high-risk groups go first, so a storm cannot
// starve them. It claims either the groups dirty for their membership alone ($6 true, $5 the membership reasons) or
// the others: a tick never holds a verdict-relevant mark behind hundreds of member-count refreshes (the gate waits
// for that tick's commit, SPEC §12). With a debounce window ($2) a dirty group is claimed at once when its last scan is older than the
// window (leading edge: an isolated change is re-scanned without waiting) and otherwise once its mark is as old as
// the window (trailing edge), so one group is re-scanned at most once per window however many marks arrive.
const claimDirtySQL = `
SELECT c.group_key, c.candidate_verdict, c.evidence_fingerprint, c.lifecycle_status
FROM governance_candidate_state c
WHERE c.dirty AND c.ruleset_version = $1
  AND coalesce(c.dirty_reason = ANY($5), false) = $6
  AND (c.dirtied_at <= now() - $2::interval OR c.scan_time <= now() - $2::interval)
  AND NOT EXISTS (SELECT 1 FROM candidate_scan_attempt a
                  WHERE a.group_key = c.group_key AND a.ruleset_version = c.ruleset_version AND a.next_attempt_at > now())
ORDER BY (c.risk_class = ANY($3)), c.dirtied_at, c.group_key
LIMIT $4
FOR UPDATE OF c SKIP LOCKED`

// claimExpiredSQL claims rows past stale_after (through the stale_after index); one pass re-scans an expired row
// once ($4 is the run).
const claimExpiredSQL = `
SELECT c.group_key, c.candidate_verdict, c.evidence_fingerprint, c.lifecycle_status
FROM governance_candidate_state c
WHERE c.stale_after <= now() AND c.ruleset_version = $1 AND c.last_run_id IS DISTINCT FROM $4
  AND NOT (c.group_key = ANY($5))
  AND NOT EXISTS (SELECT 1 FROM candidate_scan_attempt a
                  WHERE a.group_key = c.group_key AND a.ruleset_version = c.ruleset_version AND a.next_attempt_at > now())
ORDER BY (c.risk_class = ANY($2)), c.stale_after, c.group_key
LIMIT $3
FOR UPDATE OF c SKIP LOCKED`

// claimUnseededSQL claims groups of the registry that have no row under the current ruleset (new groups). Only
// groups first seen at or after $3 are considered: the event mode passes the moment the current ruleset took
// effect (its activation carried a row for every group seen before, so only later groups can lack one), the
// incremental and full passes pass -infinity and sweep every group.
//
// A retired group with no row is a placeholder a tick recorded for a group its members moved to
// (postgres.RecordPlaceholderGroups): the tick that moves them seeds it, so the members are never counted twice.
const claimUnseededSQL = `
SELECT g.group_key FROM governance_group g
WHERE g.first_seen_at >= $3 AND g.retired_at IS NULL
  AND NOT EXISTS (SELECT 1 FROM governance_candidate_state c WHERE c.group_key = g.group_key AND c.ruleset_version = $1)
ORDER BY g.group_key
LIMIT $2
FOR NO KEY UPDATE OF g SKIP LOCKED`

// liveOfBasesSQL lists the live groups of the bases ($1 classes, $2 registries, $3 lifecycles) through the partial
// live-base index, with their scope and whether they have a candidate row under ruleset $4. One base and scope has
// one live group: when its owner or axis family moves, a birth handed off before the move's change row records the
// new group (counting that birth alone), and a tick may claim it first. The tick then takes the old group too and
// retires it in the transaction that counts the new one, so the ledger never counts the members twice.
const liveOfBasesSQL = `
SELECT s.group_key, s.object_class, s.source_registry, s.lifecycle_status, coalesce(s.scope, ''),
       EXISTS (SELECT 1 FROM governance_candidate_state c WHERE c.group_key = s.group_key AND c.ruleset_version = $4)
FROM unnest($1::text[], $2::text[], $3::text[]) AS b(class, coll, status)
JOIN governance_group s ON s.object_class = b.class AND s.source_registry = b.coll AND s.lifecycle_status = b.status
WHERE s.retired_at IS NULL`

// claimSiblingsSQL claims the candidate rows of those siblings, whatever their state, without waiting: a sibling
// another transaction holds defers the claimed groups of its base and scope (lockWrites).
const claimSiblingsSQL = `
SELECT c.group_key, c.candidate_verdict, c.evidence_fingerprint, c.lifecycle_status
FROM governance_candidate_state c
WHERE c.group_key = ANY($2) AND c.ruleset_version = $1
ORDER BY c.group_key
FOR UPDATE OF c SKIP LOCKED`

// claimGroupsSQL claims the named groups that are dirty or past stale_after under the current ruleset, except rows
// waiting out a retry backoff (a failing group is not re-scanned at the gate's pace). It waits for a row another
// scanner holds: read committed re-checks the condition on the row that scanner commits, so a group it cleaned is
// skipped, not scanned again.
const claimGroupsSQL = `
SELECT c.group_key, c.candidate_verdict, c.evidence_fingerprint, c.lifecycle_status
FROM governance_candidate_state c
WHERE c.group_key = ANY($2) AND c.ruleset_version = $1 AND (c.dirty OR c.stale_after <= now())
  AND NOT EXISTS (SELECT 1 FROM candidate_scan_attempt a
                  WHERE a.group_key = c.group_key AND a.ruleset_version = c.ruleset_version AND a.next_attempt_at > now())
ORDER BY c.group_key
FOR UPDATE OF c`

// liveSiblings lists the live groups that share a base and scope with one of the claimed groups and are not claimed
// themselves (liveOfBasesSQL): those with a candidate row under ruleset, for the tick to claim (claimSiblingsSQL),
// and those without one, judged as unseeded groups. Both in group-key order.
func liveSiblings(ctx context.Context, tx pgx.Tx, ruleset string, claimed map[string]gcos.Group) (seeded, unseeded []string, err error) {
	type baseScope struct {
		base  postgres.BirthBase
		scope string
	}
	scopes, bases := map[baseScope]bool{}, map[postgres.BirthBase]bool{}
	var classes, colls, statuses []string
	for _, g := range claimed {
		b := postgres.BaseOf(g)
		if !bases[b] {
			bases[b] = true
			classes, colls, statuses = append(classes, b.Class), append(colls, b.Coll), append(statuses, b.Status)
		}
		scopes[baseScope{b, postgres.Deref(g.Scope)}] = true
	}
	rows, err := tx.Query(ctx, liveOfBasesSQL, classes, colls, statuses, ruleset)
	if err != nil {
		return nil, nil, fmt.Errorf("find live siblings: %w", err)
	}
	var key string
	var at baseScope
	var hasRow bool
	if _, err := pgx.ForEachRow(rows, []any{&key, &at.base.Class, &at.base.Coll, &at.base.Status, &at.scope, &hasRow}, func() error {
		if _, isClaimed := claimed[key]; isClaimed || !scopes[at] {
			return nil
		}
		if hasRow {
			seeded = append(seeded, key)
		} else {
			unseeded = append(unseeded, key)
		}
		return nil
	}); err != nil {
		return nil, nil, fmt.Errorf("find live siblings: %w", err)
	}
	slices.Sort(seeded)
	slices.Sort(unseeded)
	return seeded, unseeded, nil
}

// ScanTick claims a bounded batch of dirty (and, when asked, expired or never-seeded) groups, re-evaluates them
// under the current ruleset and writes scan_time, stale_after, evidence and verdict, clearing dirty — all in the
// transaction that holds the claim, so a crash at any point leaves the groups dirty (nothing lost) and a finished
// scan is committed once (nothing duplicated). A group whose evaluation fails is marked failed, keeps its dirty
// mark and is retried with exponential backoff. A tick whose counts of a collection and scope would not add up when
// it commits runs again (collection.go).
func (s *Stage) ScanTick(ctx context.Context, opts ScanOptions) (ScanResult, error) {
	for attempt := 1; ; attempt++ {
		res, err := s.scanTick(ctx, opts)
		if !errors.Is(err, errCountsMoved) {
			return res, err
		}
		opts.moved = true
		if attempt == countAttempts {
			// Left as they are, dirty: a later tick counts again. Not a failure of the groups, nor of the scan.
			s.logger.Info("scan: counts kept moving under the tick; its groups wait for a later tick", "mode", opts.Mode, "attempts", attempt, "why", err)
			return ScanResult{Mode: opts.Mode, RunID: opts.RunID, RulesetVersion: res.RulesetVersion, Deferred: res.Claimed + res.Deferred}, nil
		}
	}
}

// countAttempts is how many times a tick runs while its counts do not add up when it commits (errCountsMoved):
// each attempt after the first counts again and takes the groups counted above its count.
const countAttempts = 3

// scanTick is one attempt of ScanTick.
func (s *Stage) scanTick(ctx context.Context, opts ScanOptions) (ScanResult, error) {
	start := time.Now()
	res := ScanResult{Mode: opts.Mode, RunID: opts.RunID}
	switch opts.Mode {
	case postgres.ModeEvent, postgres.ModeIncremental, postgres.ModeFullAudit:
	default:
		return res, gcos.Errorf(gcos.EINVALID, "scan mode %s is not one of event, incremental, full_audit", gcos.Quote(opts.Mode))
	}
	rs, err := s.core.CurrentRuleset(ctx)
	if err != nil {
		return res, err
	}
	res.RulesetVersion = rs.Version
	limit := opts.Limit
	if limit <= 0 {
		limit = s.cfg.Scan.BatchSize
	}
	targeted := len(opts.Groups) > 0
	storm := false
	if !targeted { // a few named groups are no storm's batch
		if storm, err = s.stormThrottle(ctx, rs.Version, opts.dirty); err != nil {
			return res, err
		}
	}
	if storm {
		res.Storm = true
		limit = min(limit, s.cfg.Scan.StormBatch)
	}
	// A tick that claims nothing leaves no trace; the first tick of a run that claims something records the run
	// (candidate_scan_run) in the transaction that writes its verdicts, and every tick adds its counts to it.
	newRun := res.RunID == ""
	if newRun {
		res.RunID = postgres.NewRunID("gov-" + opts.Mode)
	}
	var debounce time.Duration
	if opts.Debounce {
		debounce = s.cfg.Scan.CoalesceWindow.Duration()
	}
	// An event or incremental tick inserts no birth, so the births tail does not wait for its transactions
	// (postgres.Store.InScanTx). A full audit is not latency-bound, and its cut is reasoned with the tail waiting for it.
	inTx := s.core.InScanTx
	if opts.Mode == postgres.ModeFullAudit {
		inTx = s.core.InTx
	}
	var pending postgres.PendingMarks
	if !targeted {
		// Membership marks that found their rows dirty (postgres.ApplyPendingMarks): a row a scan cleared over a
		// count from before the mark is marked again, in a transaction of its own, so the rows it marks are held no
		// longer than the marking (a handoff marking them waits for no scan) and the claim below finds them dirty.
		if err := inTx(ctx, func(tx pgx.Tx) error {
			var err error
			pending, err = postgres.ApplyPendingMarks(ctx, tx, rs.Version, postgres.PendingMarkBatch)
			return err
		}); err != nil {
			return res, err
		}
	}
	var recordLater []gcos.Group // groups members moved to that the registry lacks (placement.lockWrites)
	err = inTx(ctx, func(tx pgx.Tx) error {
		recordLater, res.Deferred = nil, 0
		previous := map[string]storedResult{}
		var keys []string
		claim := func(what, sql string, args ...any) error {
			rows, err := tx.Query(ctx, sql, args...)
			if err != nil {
				return fmt.Errorf("claim %s groups: %w", what, err)
			}
			for rows.Next() {
				var key string
				var was storedResult
				if err := rows.Scan(&key, &was.verdict, &was.evidence, &was.lifecycle); err != nil {
					rows.Close()
					return err
				}
				previous[key] = was
				keys = append(keys, key)
			}
			if err := rows.Err(); err != nil {
				return fmt.Errorf("claim %s groups: %w", what, err)
			}
			return nil
		}
		if targeted {
			if err := claim("named", claimGroupsSQL, rs.Version, opts.Groups); err != nil {
				return err
			}
		} else {
			// Verdict-relevant marks first, in a tick of their own; member-count refreshes when there are none.
			if err := claim("dirty", claimDirtySQL, rs.Version, debounce, s.cfg.LowRiskClasses, limit, gcos.MembershipDirtyReasons, false); err != nil {
				return err
			}
			if len(keys) == 0 {
				if err := claim("dirty", claimDirtySQL, rs.Version, debounce, s.cfg.LowRiskClasses, limit, gcos.MembershipDirtyReasons, true); err != nil {
					return err
				}
			}
		}
		if room := limit - len(keys); opts.Expired && !targeted && room > 0 {
			if err := claim("expired", claimExpiredSQL, rs.Version, s.cfg.LowRiskClasses, room, res.RunID, append([]string{}, keys...)); err != nil {
				return err
			}
		}
		var unseeded []string
		if room := limit - len(keys); room > 0 && !targeted {
			since := pgtype.Timestamptz{Valid: true, InfinityModifier: pgtype.NegativeInfinity}
			if opts.Mode == postgres.ModeEvent {
				since = pgtype.Timestamptz{Valid: true, Time: rs.ProposedAt}
				if rs.ActivatedAt != nil {
					since.Time = *rs.ActivatedAt
				}
			}
			rows, err := tx.Query(ctx, claimUnseededSQL, rs.Version, room, since)
			if err != nil {
				return fmt.Errorf("claim unseeded groups: %w", err)
			}
			if unseeded, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
				return fmt.Errorf("claim unseeded groups: %w", err)
			}
		}
		if len(keys)+len(unseeded) == 0 {
			return nil
		}
		groups, err := postgres.GroupsByKey(ctx, tx, append(slices.Clone(keys), unseeded...))
		if err != nil {
			return err
		}
		// The tick counts; after a check that did not add up it claims with its own the groups of their collections
		// and scopes that count births the count found elsewhere (collection.go); one another transaction holds
		// defers its collection and scope.
		drop := func(busy map[collScope]bool) {
			for k, g := range groups {
				if busy[collScopeOf(g)] {
					delete(groups, k)
					res.Deferred++
				}
			}
			keys = slices.DeleteFunc(keys, func(k string) bool { _, ok := groups[k]; return !ok })
			unseeded = slices.DeleteFunc(unseeded, func(k string) bool { _, ok := groups[k]; return !ok })
		}
		counted, err := s.core.CountGroups(ctx, tx, groups)
		if err != nil {
			return err
		}
		var movedSeeded, movedUnseeded []string
		if opts.moved {
			if movedSeeded, movedUnseeded, err = movedCounts(ctx, tx, rs.Version, groups, counted.Members); err != nil {
				return err
			}
		}
		if len(movedSeeded)+len(movedUnseeded) > 0 {
			before := len(keys)
			if len(movedSeeded) > 0 {
				if err := claim("moved count", claimSiblingsSQL, rs.Version, movedSeeded); err != nil {
					return err
				}
			}
			more, err := postgres.GroupsByKey(ctx, tx, slices.Concat(keys[before:], movedUnseeded, movedSeeded))
			if err != nil {
				return err
			}
			unseeded = append(unseeded, movedUnseeded...)
			busy := map[collScope]bool{}
			for _, k := range movedSeeded {
				if _, claimed := previous[k]; !claimed {
					busy[collScopeOf(more[k])] = true // another transaction holds its candidate row
				}
			}
			for k, g := range more {
				if _, claimed := previous[k]; claimed || slices.Contains(movedUnseeded, k) {
					groups[k] = g
				}
			}
			drop(busy)
			if len(groups) == 0 {
				return nil
			}
		}
		// The stale live groups of the claimed groups' bases and scopes are judged with them (liveOfBasesSQL); a
		// sibling another transaction holds defers its base and scope (lockWrites).
		siblings, unseededSiblings, err := liveSiblings(ctx, tx, rs.Version, groups)
		if err != nil {
			return err
		}
		var held []string
		var heldGroups map[string]gcos.Group
		if len(siblings)+len(unseededSiblings) > 0 {
			before := len(keys)
			if len(siblings) > 0 {
				if err := claim("sibling", claimSiblingsSQL, rs.Version, siblings); err != nil {
					return err
				}
				held = slices.DeleteFunc(siblings, func(k string) bool { _, claimed := previous[k]; return claimed })
			}
			unseeded = append(unseeded, unseededSiblings...)
			more, err := postgres.GroupsByKey(ctx, tx, slices.Concat(keys[before:], unseededSiblings, held))
			if err != nil {
				return err
			}
			heldGroups = map[string]gcos.Group{}
			for k, g := range more {
				if slices.Contains(held, k) {
					heldGroups[k] = g
				} else {
					groups[k] = g
				}
			}
		}
		res.Claimed = len(keys) + len(unseeded)
		snapshotID, err := postgres.LatestFullSnapshotID(ctx, tx)
		if err != nil {
			return err
		}
		ev, err := evaluate.New(ctx, s.core, tx, rs)
		if err != nil {
			return err
		}
		place := s.placeGroups(ev, groups, counted)
		// The rows the tick writes beyond its claim are taken without waiting (postgres.LockOrder); a group whose
		// rows another transaction holds is left as it is, dirty, for a later tick.
		deferred, absent, err := place.lockWrites(ctx, tx, rs.Version, groups, heldGroups)
		if err != nil {
			return err
		}
		res.Deferred += len(deferred)
		recordLater = absent
		if len(deferred) > 0 {
			keys = slices.DeleteFunc(keys, func(k string) bool { return deferred[k] })
			unseeded = slices.DeleteFunc(unseeded, func(k string) bool { return deferred[k] })
			for k := range deferred {
				delete(groups, k)
			}
			if len(keys)+len(unseeded) == 0 {
				return nil
			}
		}
		if newRun {
			phase := postgres.PhaseScanning
			if opts.Mode == postgres.ModeFullAudit {
				phase = postgres.PhaseAuditing
			}
			if _, err := tx.Exec(ctx, `INSERT INTO candidate_scan_run (run_id, mode, phase, ruleset_version) VALUES ($1, $2, $3, $4)`,
				res.RunID, opts.Mode, phase, rs.Version); err != nil {
				return fmt.Errorf("record run %s: %w", res.RunID, err)
			}
		}
		// Every row the tick writes records what its count read (placeGroups), so a pending mark the count includes
		// is settled by it (postgres.ApplyPendingMarks).
		judge := func(key string) (postgres.CandidateValues, error) {
			if why, gone := place.retired[key]; gone {
				v, err := ev.Retire(groups[key], why)
				return place.countedIn(groups[key], v), err
			}
			v, err := ev.Evaluate(place.live[key], "")
			return place.countedIn(place.live[key], v), err
		}
		var ok, seeds []postgres.CandidateValues
		unchanged := map[string]bool{}
		var failed []failedGroup
		for _, key := range keys {
			v, err := judge(key)
			if err != nil {
				failed = append(failed, failedGroup{key, err})
				continue
			}
			was := previous[key]
			if string(v.Verdict) != was.verdict {
				res.VerdictChanges++
			}
			if was.evidence != nil && *was.evidence == v.Evidence && was.lifecycle == cmp.Or(v.Lifecycle, postgres.LifecycleActive) {
				res.Unchanged++
				unchanged[key] = true
			}
			ok = append(ok, v)
		}
		for _, key := range unseeded {
			v, err := judge(key)
			if err != nil {
				// Never seeded and not evaluable: it stays unseeded (unknown, fail closed) and is retried next tick.
				s.logger.Warn("scan: evaluate unseeded group", "group_key", key, "err", err)
				continue
			}
			seeds = append(seeds, v)
		}
		// The groups the claimed groups' members moved to (a new owner or axis family) are judged in the same
		// transaction, so the gate never sees the old group retired without the new one in place.
		for _, g := range place.moved {
			v, err := ev.Evaluate(g, "")
			if err != nil {
				return fmt.Errorf("judge group %s: %w", g.Key, err)
			}
			v = place.countedIn(g, v)
			seeds = append(seeds, v)
		}
		if err := place.record(ctx, tx, rs.Version); err != nil {
			return err
		}
		if err := postgres.WriteVerdicts(ctx, tx, rs.Version, snapshotID, res.RunID, ok); err != nil {
			return err
		}
		if len(seeds) > 0 {
			if _, err := postgres.SeedCandidates(ctx, tx, snapshotID, rs.Version, res.RunID, seeds); err != nil {
				return err
			}
		}
		if err := s.recordFailures(ctx, tx, rs.Version, res.RunID, failed); err != nil {
			return err
		}
		// Object rows follow their group: the rows of every base judged here are re-derived with its verdicts.
		bases := map[postgres.BirthBase]bool{}
		for _, v := range append(ok, seeds...) {
			if g, found := groups[v.GroupKey]; found {
				bases[postgres.BaseOf(g)] = true
			}
		}
		for _, g := range place.moved {
			bases[postgres.BaseOf(g)] = true
		}
		if err := ev.FollowObjects(ctx, tx, snapshotID, res.RunID, bases); err != nil {
			return err
		}
		written := maps.Clone(groups)
		for _, g := range place.moved {
			written[g.Key] = g
		}
		// An unchanged result raises nothing again (it did when it was new); it still closes what it settles, such
		// as the finding a failed or expired scan of the same group raised.
		if err := s.candidateFindings(ctx, tx, rs.Version, res.RunID, append(ok, seeds...), written, unchanged); err != nil {
			return err
		}
		res.Scanned, res.Seeded, res.Failed, res.Retired = len(ok), len(seeds), len(failed), len(place.retired)
		// A scan run is complete with each tick; a full audit's run completes only when the audit does (FinishRun).
		if _, err := tx.Exec(ctx, `UPDATE candidate_scan_run SET groups_scanned = groups_scanned + $2,
			verdict_changes = verdict_changes + $3, groups_unchanged = groups_unchanged + $5,
			status = CASE WHEN mode = 'full_audit' THEN status ELSE 'succeeded' END,
			finished_at = CASE WHEN mode = 'full_audit' THEN finished_at ELSE clock_timestamp() END,
			source_snapshot_ref = CASE WHEN mode = 'full_audit' THEN source_snapshot_ref ELSE $4 END
			WHERE run_id = $1`, res.RunID, res.Scanned+res.Seeded, res.VerdictChanges, snapshotID, res.Unchanged); err != nil {
			return fmt.Errorf("account run %s: %w", res.RunID, err)
		}
		if opts.Mode != postgres.ModeFullAudit { // the audit's run is recorded once, when it finishes (FinishRun)
			if err := postgres.RecordRunTx(ctx, tx, postgres.RunSummary{RunID: res.RunID, Mode: opts.Mode,
				Status: postgres.RunSucceeded, Ruleset: rs.Version, Snapshot: snapshotID,
				Scanned: int64(res.Scanned + res.Seeded), Changed: int64(res.VerdictChanges), Failed: int64(res.Failed),
				Retired: int64(res.Retired)}); err != nil {
				return err
			}
		}
		// Last, holding nothing it waits for: the counts of every collection and scope written add up (collection.go).
		return s.checkCounts(ctx, tx, rs.Version, written)
	})
	if err != nil {
		if errors.Is(err, errCountsMoved) {
			return res, err // nothing was written: the tick runs again (ScanTick)
		}
		if opts.Mode == postgres.ModeFullAudit && postgres.IsPgCode(err, "40P01", "40001") {
			return res, err // the audit retries the tick; if it gives up, its run ends failed (runFullAudit)
		}
		// The tick's writes are gone with its transaction; the failure is recorded on the run, never hidden.
		if ferr := s.recordRunFailure(context.WithoutCancel(ctx), res.RunID, opts.Mode, rs.Version, start, err); ferr != nil {
			err = errors.Join(err, ferr)
		}
		return res, err
	}
	if len(recordLater) > 0 {
		// In a transaction of its own, holding nothing else: the tick that next claims the groups whose members
		// moved there finds them and moves the members in one transaction. That tick follows at once (once).
		if err := s.core.InTx(ctx, func(tx pgx.Tx) error { return postgres.RecordPlaceholderGroups(ctx, tx, recordLater) }); err != nil {
			return res, err
		}
		if !opts.placed && res.Scanned+res.Seeded == 0 {
			next := opts
			next.placed = true
			if newRun {
				next.RunID = ""
			}
			return s.ScanTick(ctx, next)
		}
	}
	if newRun && (res.Claimed == 0 || res.Scanned+res.Seeded+res.Failed == 0) {
		res.RunID = ""
	}
	if res.Claimed > 0 && opts.Mode != postgres.ModeFullAudit {
		s.core.ObserveRun(opts.Mode, postgres.RunSucceeded, time.Since(start))
	}
	if targeted {
		return res, nil // the gate waits for it: the dirty set's size is the loops' business
	}
	if err := s.pool.QueryRow(ctx, dirtyCountSQL, rs.Version).Scan(&res.dirty); err != nil {
		return res, fmt.Errorf("count dirty set: %w", err)
	}
	// A group owed a pending mark whose row was held when this tick settled it waits for a tick too.
	res.Remaining = res.dirty + pending.Held
	return res, nil
}

type failedGroup struct {
	key string
	err error
}

// recordFailures marks failed re-evaluations visible (recompute_status failed, finding) and schedules a retry.
func (s *Stage) recordFailures(ctx context.Context, tx pgx.Tx, ruleset, runID string, failed []failedGroup) error {
	for _, f := range failed {
		var attempts int
		if err := tx.QueryRow(ctx, `
			INSERT INTO candidate_scan_attempt (group_key, ruleset_version, attempts, last_error) VALUES ($1, $2, 1, $3)
			ON CONFLICT (group_key, ruleset_version) DO UPDATE SET attempts = candidate_scan_attempt.attempts + 1,
			    last_error = EXCLUDED.last_error, updated_at = now()
			RETURNING attempts`, f.key, ruleset, f.err.Error()).Scan(&attempts); err != nil {
			return fmt.Errorf("record scan failure: %w", err)
		}
		backoff := s.scanBackoff(attempts)
		if _, err := tx.Exec(ctx, `UPDATE candidate_scan_attempt SET next_attempt_at = now() + $3::interval WHERE group_key = $1 AND ruleset_version = $2`, f.key, ruleset, backoff); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE governance_candidate_state SET recompute_status = 'failed', last_run_id = $3, updated_at = now() WHERE group_key = $1 AND ruleset_version = $2`, f.key, ruleset, runID); err != nil {
			return err
		}
		if _, err := postgres.RaiseFindingTx(ctx, tx, gcos.Finding{Type: gcos.IssueCandidateUnknown, Subject: f.key, Group: f.key, RunID: runID, RulesetVersion: ruleset,
			Evidence: map[string]any{"group_key": f.key, "recompute_status": "failed", "attempts": attempts, "error": f.err.Error(), "next_attempt_in": backoff.String()}}); err != nil {
			return err
		}
	}
	return nil
}

// scanBackoff is retry_base·2^(attempts-1), capped at retry_max.
func (s *Stage) scanBackoff(attempts int) time.Duration {
	base, maxBackoff := s.cfg.Scan.RetryBase.Duration(), s.cfg.Scan.RetryMax.Duration()
	d := time.Duration(float64(base) * math.Pow(2, float64(attempts-1)))
	if d <= 0 || d > maxBackoff {
		d = maxBackoff
	}
	return d
}

// candidateFindings raises candidate_unknown for groups the scan could not decide and owner_dispute for groups whose
// ownership rows disagree, and auto-closes candidate_unknown and candidate_stale for groups it settled, owner_dispute
// for groups no longer disputed, and coverage_orphan for groups that are no longer orphans, keyed by the current
// ruleset. Groups in quiet are not raised again. Orphans are raised by the detection pass (detect.go): a raise in the
// tick would be paid while the tick holds its groups.
func (s *Stage) candidateFindings(ctx context.Context, tx pgx.Tx, ruleset, runID string, vs []postgres.CandidateValues,
	groups map[string]gcos.Group, quiet map[string]bool) error {
	type pending struct {
		t       gcos.IssueType
		subject string
	}
	var settled []pending
	var keys []string
	for _, v := range vs {
		if v.Verdict == gcos.VerdictUnknown {
			if quiet[v.GroupKey] {
				continue
			}
			if _, err := postgres.RaiseFindingTx(ctx, tx, gcos.Finding{Type: gcos.IssueCandidateUnknown, Subject: v.GroupKey, Group: v.GroupKey, RunID: runID, RulesetVersion: ruleset,
				Evidence: map[string]any{"group_key": v.GroupKey, "rule": v.Rule, "risk_class": v.RiskClass}}); err != nil {
				return err
			}
			continue
		}
		for _, t := range []gcos.IssueType{gcos.IssueCandidateUnknown, gcos.IssueCandidateStale} {
			settled = append(settled, pending{t, v.GroupKey})
			keys = append(keys, gcos.CoalesceKey(t, v.GroupKey))
		}
		if len(v.OwnerDispute) > 0 && !quiet[v.GroupKey] {
			if _, err := postgres.RaiseFindingTx(ctx, tx, gcos.Finding{Type: gcos.IssueOwnerDispute, Subject: v.GroupKey, Group: v.GroupKey,
				RunID: runID, RulesetVersion: ruleset, Evidence: map[string]any{"group_key": v.GroupKey, "claimants": v.OwnerDispute,
					"routed_to": gcos.CouncilOwner, "reason": "equally specific active ownership rows name different owners: no owner until one is retired"}}); err != nil {
				return err
			}
		} else if len(v.OwnerDispute) == 0 {
			settled = append(settled, pending{gcos.IssueOwnerDispute, v.GroupKey})
			keys = append(keys, gcos.CoalesceKey(gcos.IssueOwnerDispute, v.GroupKey))
		}
		cg := coverageGroup(v, groups[v.GroupKey])
		if !cg.IsOrphan() {
			// It has an owner, an exception, or needs none: an orphan finding on it (the pass's or gate's) closes.
			settled = append(settled, pending{gcos.IssueCoverageOrphan, v.GroupKey})
			keys = append(keys, gcos.CoalesceKey(gcos.IssueCoverageOrphan, v.GroupKey))
		}
	}
	if len(keys) == 0 {
		return nil
	}
	// One look for the open ones (usually none), then the locked resolve for each of those only. system_issues has
	// no index on the key GCOS may add: the keys are joined by hash, one pass over the table whatever their number
	// (= ANY on a parameter compares every row with every key).
	rows, err := tx.Query(ctx, openKeysSQL, keys)
	if err != nil {
		return fmt.Errorf("read open candidate findings: %w", err)
	}
	open, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("read open candidate findings: %w", err)
	}
	isOpen := make(map[string]bool, len(open))
	for _, k := range open {
		isOpen[k] = true
	}
	for i, p := range settled {
		if !isOpen[keys[i]] {
			continue
		}
		if _, err := postgres.ResolveFindingTx(ctx, tx, p.t, p.subject, ""); err != nil {
			return err
		}
	}
	return nil
}

// openKeysSQL returns which of the coalesce keys $1 have an open finding.
const openKeysSQL = `SELECT DISTINCT s.coalesce_key FROM system_issues s
	JOIN (SELECT DISTINCT key FROM unnest($1::text[]) AS k(key)) k ON k.key = s.coalesce_key
	WHERE s.status = 'open'`

// coverageGroup is what the coverage detections read of a group a tick judged.
func coverageGroup(v postgres.CandidateValues, g gcos.Group) gcos.CoverageGroup {
	deref := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	return gcos.CoverageGroup{GroupKey: v.GroupKey, Scope: deref(g.Scope), ObjectClass: deref(g.ObjectClass),
		SourceRegistry: deref(g.SourceRegistry), Verdict: v.Verdict, Coverage: v.Coverage, RiskClass: v.RiskClass,
		Members: v.MemberCount}
}

// stormThrottle reports whether the scan is throttled to its storm batch: a group_invalidation_storm is open (the
// tail's storm rule raised it: one of its ticks dirtied more than scan.storm_fraction of all groups, intake's
// WatchStorm) and more than that share of the groups is still dirty. Once the dirty set is back under the share the
// storm is over and resolved. A large dirty set with no storm open (a wide ruleset activation) is drained at the
// full batch, high risk first. With no storm open the finding is looked for at most every stormRecheck.
func (s *Stage) stormThrottle(ctx context.Context, ruleset string, counted *int64) (bool, error) {
	if time.Since(time.Unix(0, s.stormClear.Load())) < stormRecheck {
		return false, nil
	}
	var open bool
	if err := s.pool.QueryRow(ctx, stormOpenSQL, gcos.CoalesceKey(gcos.IssueGroupInvalidationStorm, gcos.StormSubject)).Scan(&open); err != nil {
		return false, fmt.Errorf("storm throttle: %w", err)
	}
	if !open {
		s.stormClear.Store(time.Now().UnixNano())
		return false, nil
	}
	_, groups, err := s.groups.Current(ctx, s.pool)
	if err != nil {
		return false, fmt.Errorf("storm throttle: %w", err)
	}
	var dirty int64
	if counted != nil {
		dirty = *counted
	} else if err := s.pool.QueryRow(ctx, dirtyCountSQL, ruleset).Scan(&dirty); err != nil {
		return false, fmt.Errorf("storm throttle: %w", err)
	}
	if gcos.StormDraining(dirty, groups, s.cfg.Scan.StormFraction) {
		return true, nil
	}
	if _, err := s.core.ResolveFinding(ctx, gcos.IssueGroupInvalidationStorm, gcos.StormSubject, ""); err != nil {
		return false, err
	}
	s.logger.Info("scan: the invalidation storm drained; the scan takes its full batch again", "dirty", dirty, "groups", groups)
	s.stormClear.Store(time.Now().UnixNano())
	return false, nil
}

// stormRecheck is how long a stage that found no storm open goes before it looks again: a storm raised meanwhile
// (by this process's tail or another's) throttles the scan from the next look on.
const stormRecheck = time.Second

// stormOpenSQL reports whether the storm finding ($1: its coalesce key) is open.
const stormOpenSQL = `SELECT EXISTS (SELECT 1 FROM system_issues WHERE coalesce_key = $1 AND status = 'open')`

// dirtyCountSQL counts the dirty groups of ruleset $1 through the partial index on dirty rows.
const dirtyCountSQL = `SELECT count(*) FROM governance_candidate_state WHERE dirty AND ruleset_version = $1`

// recordRunFailure marks a run failed with its error, creating the row when the failed tick was the run's first.
func (s *Stage) recordRunFailure(ctx context.Context, runID, mode, ruleset string, started time.Time, runErr error) error {
	var took float64
	err := s.pool.QueryRow(ctx, `
		INSERT INTO candidate_scan_run (run_id, mode, phase, ruleset_version, status, started_at, finished_at, error)
		VALUES ($1, $2, CASE WHEN $2 = 'full_audit' THEN 'auditing' ELSE 'scanning' END, $3, 'failed', $5, clock_timestamp(), $4)
		ON CONFLICT (run_id) DO UPDATE SET status = 'failed', finished_at = clock_timestamp(), error = excluded.error
		RETURNING extract(epoch FROM finished_at - started_at)::float8`,
		runID, mode, ruleset, runErr.Error(), started).Scan(&took)
	if err != nil {
		return fmt.Errorf("record failed run %s: %w", runID, err)
	}
	s.core.ObserveRun(mode, postgres.RunFailed, time.Duration(took*float64(time.Second)))
	return nil
}

// ExpireStale marks every row past stale_after dirty (reason ttl) and raises candidate_stale for the high-risk
// ones. It returns how many rows it dirtied.
func (s *Stage) ExpireStale(ctx context.Context) (int64, error) {
	var n int64
	err := s.core.InTx(ctx, func(tx pgx.Tx) error {
		if err := dirtyLapsedExceptions(ctx, tx); err != nil {
			return err
		}
		// Locked in group-key order first (postgres.LockOrder), as every marking writer does.
		rows, err := tx.Query(ctx, `
			WITH locked AS (
			    SELECT c.group_key, c.ruleset_version FROM governance_candidate_state c JOIN v_current_ruleset cr USING (ruleset_version)
			    WHERE c.stale_after <= now() AND (NOT c.dirty OR c.dirty_reason = ANY($1))
			    ORDER BY c.group_key FOR UPDATE OF c
			)
			UPDATE governance_candidate_state c SET dirty = true, dirty_reason = 'ttl', dirtied_at = clock_timestamp(),
			    recompute_status = CASE WHEN recompute_status = 'ok' THEN 'dirty' ELSE recompute_status END, updated_at = now()
			FROM locked l
			WHERE c.group_key = l.group_key AND c.ruleset_version = l.ruleset_version
			  AND c.stale_after <= now() AND (NOT c.dirty OR c.dirty_reason = ANY($1))
			RETURNING c.group_key, c.risk_class, c.ruleset_version, c.stale_after`, gcos.MembershipDirtyReasons)
		if err != nil {
			return fmt.Errorf("expire stale rows: %w", err)
		}
		type expired struct {
			key, risk, ruleset string
			staleAfter         time.Time
		}
		var list []expired
		for rows.Next() {
			var e expired
			if err := rows.Scan(&e.key, &e.risk, &e.ruleset, &e.staleAfter); err != nil {
				rows.Close()
				return err
			}
			list = append(list, e)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		n = int64(len(list))
		for _, e := range list {
			if !gcos.IsHighRisk(e.risk, s.cfg.LowRiskClasses) {
				continue
			}
			if _, err := postgres.RaiseFindingTx(ctx, tx, gcos.Finding{Type: gcos.IssueCandidateStale, Subject: e.key, Group: e.key, RulesetVersion: e.ruleset,
				Evidence: map[string]any{"group_key": e.key, "risk_class": e.risk, "stale_after": e.staleAfter}}); err != nil {
				return err
			}
		}
		if n > 0 {
			_, err = tx.Exec(ctx, `SELECT pg_notify($1, 'ttl')`, postgres.NotifyChannel)
		}
		return err
	})
	return n, err
}

// lapsedExceptionGroupsSQL finds the groups of active object rows materialized for an exception that the registry
// no longer approves now ($1: whether the registry exists; without it nothing is excepted). An exception lapses by
// the clock alone, with no change row to dirty anything: the periodic pass finds it so the object's row is
// re-derived (its reason gone, a tombstone or the class's row) instead of waiting for the full audit.
const lapsedExceptionGroupsSQL = `
SELECT DISTINCT o.group_key FROM governance_candidate_object o
JOIN v_current_ruleset cr ON cr.ruleset_version = o.ruleset_version
WHERE o.lifecycle_status = 'active' AND o.materialization_reason = 'exception'
  AND NOT (gcos_exception_held(o.object_ref, now()))
ORDER BY 1`

// dirtyLapsedExceptions marks dirty (authority) the groups of object rows whose exception lapsed.
func dirtyLapsedExceptions(ctx context.Context, tx pgx.Tx) error {
	rows, err := tx.Query(ctx, lapsedExceptionGroupsSQL)
	if err != nil {
		return fmt.Errorf("find lapsed object exceptions: %w", err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("find lapsed object exceptions: %w", err)
	}
	if len(keys) == 0 {
		return nil
	}
	_, err = postgres.MarkKeysDirtyTx(ctx, tx, keys, gcos.DirtyAuthority)
	return err
}

// storedResult is what a claimed group's row said before the scan: its verdict, evidence and lifecycle.
type storedResult struct {
	verdict   string
	evidence  *string
	lifecycle string
}

// RescanGroups re-scans the named groups now when they are dirty or past stale_after: the gate's synchronous
// re-evaluation (gate.New takes it from the daemon), an event-mode run of its own.
func (s *Stage) RescanGroups(ctx context.Context, groups []string) error {
	_, err := s.ScanTick(ctx, ScanOptions{Mode: postgres.ModeEvent, Groups: groups})
	return err
}
