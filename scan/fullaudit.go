package scan

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
	"gcos/evaluate"
	"gcos/postgres"
)

// AuditResult reports a periodic full audit.
type AuditResult struct {
	RunID           string   `json:"run_id"`
	SnapshotID      int64    `json:"snapshot_id"`
	PreviousID      *int64   `json:"previous_snapshot_id"`
	RulesetVersion  string   `json:"ruleset_version"`
	ProposedRuleset string   `json:"proposed_ruleset,omitempty"`
	ChangedGroups   int      `json:"changed_groups"`
	Signalled       int      `json:"signalled_groups"` // changed groups a handoff had already dirtied
	Pending         int      `json:"pending_groups"`   // changed groups whose new births the tail has not reached yet
	LostSignals     []string `json:"lost_signal_groups"`
	// Nondeterministic lists the groups whose two captures differ although their births are provably the same row
	// versions (postgres.SameRowsHashedApart): the hash, not the source, moved (snapshot_nondeterministic).
	Nondeterministic []string `json:"nondeterministic_groups,omitempty"`
	// RegistryDrift is, per registry that feeds verdicts besides births (gcos.GroupInputs), the groups whose
	// inputs from it changed since the previous snapshot and how many of those no change row had signalled.
	RegistryDrift map[string]RegistryDrift `json:"registry_drift,omitempty"`
	// CountDrift is the number of groups whose member count the incremental state held differed from the
	// snapshot's (re-scanned, their collections recounted); KeptCountDrift the collections whose counts kept by the
	// births handoff differed from the snapshot's (recounted).
	CountDrift          int               `json:"count_drift_groups"`
	KeptCountDrift      []string          `json:"kept_count_drift,omitempty"`
	Expired             int64             `json:"expired_rows"`
	Dangling            []int64           `json:"dangling_snapshots"` // referenced by candidate rows but no longer stored
	Scanned             int               `json:"scanned"`
	ObjectsMaterialized int64             `json:"objects_materialized"`
	ObjectsRetired      int64             `json:"objects_retired"`
	Ledger              gcos.LedgerReport `json:"ledger"`     // zero (not closing) when the stage reads no ledger (WithLedger)
	Detections          DetectResult      `json:"detections"` // the coverage detections over the audited estate
	Elapsed             time.Duration     `json:"elapsed_ns"`
	// CutAt is the audit's instant (the capture's): the source as it was then is compared with GCOS's state once
	// the intake has handed off every row committed before it. InFlight counts the groups whose state moved after
	// it (written by a later transaction, or dirty): their counts are not compared. NotHandedOff says why the wait
	// for the intake ended early; rows it had not handed off then may be reported as lost signals (fail closed).
	CutAt        *time.Time `json:"cut_at,omitempty"`
	InFlight     int        `json:"in_flight_groups"`
	NotHandedOff string     `json:"not_handed_off,omitempty"`
}

// FullAudit is the periodic safety net (doc 34 §5): a fresh snapshot and ruleset hash, a reconciliation that
// finds groups whose fingerprint changed without any dirty mark (a lost signal: dirtied with snapshot_drift and a
// finding), expiry of every row past stale_after, a scan of the whole dirty set and the invariant check.
// It runs as the holder of RoleFullAudit (ECONFLICT while another process holds it).
func (s *Stage) FullAudit(ctx context.Context, progress func(done, total int64)) (res AuditResult, err error) {
	err = s.core.AsRole(ctx, postgres.RoleFullAudit, func(ctx context.Context) error {
		var err error
		res, err = s.runFullAudit(ctx, progress)
		return err
	})
	return res, err
}

// FullAuditIfDue runs the full audit when the last completed one (or backfill) finished longer than interval ago,
// deciding that as the role's holder, so two processes never both find it due and run it back to back. ran is
// false when it was not due; ECONFLICT when another process holds the role.
func (s *Stage) FullAuditIfDue(ctx context.Context, interval time.Duration, progress func(done, total int64)) (res AuditResult, ran bool, err error) {
	err = s.core.AsRole(ctx, postgres.RoleFullAudit, func(ctx context.Context) error {
		due, err := s.FullAuditDue(ctx, interval)
		if err != nil || !due {
			return err
		}
		ran = true
		res, err = s.runFullAudit(ctx, progress)
		return err
	})
	return res, ran, err
}

func (s *Stage) runFullAudit(ctx context.Context, progress func(done, total int64)) (AuditResult, error) {
	start := time.Now()
	res := AuditResult{RunID: postgres.NewRunID("gov-audit")}
	if err := s.core.StartRun(ctx, res.RunID, postgres.ModeFullAudit, postgres.PhaseAuditing); err != nil {
		return res, err
	}
	err := s.fullAudit(ctx, progress, &res)
	if ferr := s.core.FinishRun(context.WithoutCancel(ctx), res.RunID, postgres.RunCounts{Snapshot: res.SnapshotID, Ruleset: res.RulesetVersion,
		Scanned: int64(res.Scanned), Dirtied: int64(len(res.LostSignals)) + res.Expired}, err); ferr != nil {
		err = errors.Join(err, ferr)
	}
	res.Elapsed = time.Since(start)
	return res, err
}

func (s *Stage) fullAudit(ctx context.Context, progress func(done, total int64), res *AuditResult) error {
	rs, proposed, err := s.core.RulesetForScan(ctx, "gcos")
	if err != nil {
		return err
	}
	res.RulesetVersion, res.ProposedRuleset = rs.Version, proposed
	prev, err := latestFullSnapshot(ctx, s.pool)
	if err != nil && gcos.ErrorCode(err) != gcos.ENOTFOUND {
		return err
	}
	snap, err := s.core.CaptureSnapshot(ctx, postgres.CaptureOptions{Scope: postgres.SnapshotAudit, RunID: res.RunID, RulesetVersion: rs.Version, Progress: progress,
		CheckKeptCounts: true})
	if err != nil {
		return err
	}
	res.SnapshotID = snap.ID
	if cut := snap.Metrics.Cut; cut != nil {
		res.CutAt = &cut.At
		// One cut (SPEC §13): the source at the capture's instant against GCOS's state once every row committed
		// before it has been handed off, so a row in flight is never a lost signal, a drift or a mismatch.
		if s.settle != nil {
			if err := s.settle(ctx, cut.At); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				res.NotHandedOff = err.Error()
				s.logger.Warn("full audit: the intake has not handed off what the audit's instant saw; what it moves may be reported as lost signals",
					"run_id", res.RunID, "err", err)
			}
		}
	}
	record := func(tx pgx.Tx) error {
		// A retried attempt starts from nothing: what an aborted one counted is gone with its transaction.
		res.ObjectsMaterialized, res.ObjectsRetired, res.CountDrift, res.KeptCountDrift, res.PreviousID = 0, 0, 0, nil, nil
		res.ChangedGroups, res.Signalled, res.Pending, res.LostSignals, res.RegistryDrift, res.InFlight = 0, 0, 0, nil, nil, 0
		// The whole estate, in postgres.LockOrder: no scan writes while the audit records, so the object rows and
		// counts below are derived from rows nobody moves.
		if err := postgres.LockGroups(ctx, tx); err != nil {
			return err
		}
		moved, err := postgres.MovedAfter(ctx, tx, snap.Metrics.Cut)
		if err != nil {
			return err
		}
		// The group registry takes the snapshot's groups it does not hold live: new ones (seeded below, so their
		// members are counted under a verdict at once) and retired ones with members again (marked dirty, so a scan
		// judges them), except where a later transaction wrote them and where a stale group of the same base and
		// scope still counts the members (a scan moves them). A live group's count is the scans' to write: the
		// audit compares it (count drift) and never overwrites it, so the intake's comparison of the registry's
		// counts with the source (which finds births moved between bases) is never fed the source's own answer.
		held, err := postgres.RegistryRetired(ctx, tx, slices.Collect(maps.Keys(snap.Metrics.Groups)))
		if err != nil {
			return err
		}
		var fresh []gcos.Group
		var reactivated []string
		for _, g := range snap.Groups {
			retired, known := held[g.Key]
			if moved[g.Key] || (known && !retired) {
				continue
			}
			fresh = append(fresh, g)
		}
		if fresh, err = postgres.WithoutLiveSiblings(ctx, tx, fresh); err != nil {
			return err
		}
		var born []gcos.Group
		for _, g := range fresh {
			if _, known := held[g.Key]; known {
				reactivated = append(reactivated, g.Key)
			} else {
				born = append(born, g)
			}
		}
		if err := postgres.UpsertGroups(ctx, tx, fresh); err != nil {
			return err
		}
		if err := postgres.LockCandidates(ctx, tx, rs.Version); err != nil {
			return err
		}
		// With every row held, every pending membership mark is settled onto its row: the checks below see a row a
		// scan cleared over a count from before a mark as dirty (in flight, signalled), never as drift.
		if _, err := postgres.ApplyPendingMarks(ctx, tx, rs.Version, 0); err != nil {
			return err
		}
		ev, err := evaluate.New(ctx, s.core, tx, rs)
		if err != nil {
			return err
		}
		if err := s.seedNew(ctx, tx, ev, snap.ID, rs.Version, res.RunID, born); err != nil {
			return err
		}
		if _, err := postgres.MarkKeysDirtyTx(ctx, tx, reactivated, gcos.DirtySnapshotDrift); err != nil {
			return err
		}
		// The audit re-reads every birth, silent updates included: the gate's views drop every birth they hold.
		if err := postgres.NoteBirthsTx(ctx, tx, []string{postgres.AllBirths}); err != nil {
			return err
		}
		counts, err := heldCounts(ctx, tx)
		if err != nil {
			return err
		}
		// Read again after the counts: a group first recorded (and seeded) by a transaction that committed while
		// the audit took its locks is not locked, and its count is compared only if no later transaction wrote it.
		if moved, err = postgres.MovedAfter(ctx, tx, snap.Metrics.Cut); err != nil {
			return err
		}
		// Who owns the ruleset verdicts are read under, and whether every group's axis is registered.
		if err := postgres.CheckRulesetOwnerTx(ctx, tx, s.cfg.Principals, res.RunID); err != nil {
			return err
		}
		if err := postgres.CheckAxesTx(ctx, tx, s.cfg.Binding, res.RunID, rs.Version); err != nil {
			return err
		}
		// Object rows are re-qualified with every audit (the scans work at group grain), so an object row never
		// outlives its TTL in a running daemon, and lapsed reasons become tombstones.
		if res.ObjectsMaterialized, res.ObjectsRetired, err = ev.MaterializeObjects(ctx, tx, snap, res.RunID); err != nil {
			return err
		}
		// The snapshot's groups are those of its cut: a scan that committed since may have retired a group or moved
		// its members (MovedAfter). The bases of those groups are derived again from the registry as it is now
		// (locked), as the scan itself derives them, so that no row stays linked to a group retired meanwhile.
		if len(moved) > 0 {
			now, err := postgres.GroupsByKey(ctx, tx, slices.Collect(maps.Keys(moved)))
			if err != nil {
				return err
			}
			bases := map[postgres.BirthBase]bool{}
			for _, g := range now {
				bases[postgres.BaseOf(g)] = true
			}
			if err := ev.FollowObjects(ctx, tx, snap.ID, res.RunID, bases); err != nil {
				return err
			}
		}
		if err := postgres.LinkAudit(ctx, tx, "governance_candidate_object", rs.Version, snap.AuditID, `last_run_id = $3`, res.RunID); err != nil {
			return err
		}
		// The counts are checked against the snapshot itself, not only against the previous one: a change behind the
		// tail's back can restore the content the previous audit saw while the incremental state counted what came
		// between (a birth handed off, then retired or deleted with no change row).
		off, offColls, inFlight := counts.differFrom(snap, moved)
		kept, err := postgres.KeptDriftSettled(ctx, tx, snap)
		if err != nil {
			return err
		}
		res.CountDrift, res.KeptCountDrift, res.InFlight = len(off), kept, inFlight
		if err := postgres.RequestRecount(ctx, tx, sortedUnion(offColls, kept), gcos.DirtySnapshotDrift); err != nil {
			return err
		}
		if prev == nil {
			_, err := postgres.MarkKeysDirtyTx(ctx, tx, off, gcos.DirtySnapshotDrift)
			return err
		}
		res.PreviousID = &prev.ID
		cursor, err := birthCursorPosition(ctx, tx)
		if err != nil {
			return err
		}
		var changed []string
		for key, g := range snap.Metrics.Groups {
			if p, ok := prev.Metrics.Groups[key]; !ok || p.ContentHash != g.ContentHash || p.Count != g.Count {
				changed = append(changed, key)
			}
		}
		for key := range prev.Metrics.Groups {
			if _, ok := snap.Metrics.Groups[key]; !ok {
				changed = append(changed, key)
			}
		}
		sort.Strings(changed)
		res.ChangedGroups = len(changed)
		// The registries besides births: a group whose inputs from one of them changed is re-scanned too.
		drifted := map[string][]string{}
		for key, g := range snap.Metrics.Groups {
			if p, ok := prev.Metrics.Groups[key]; ok {
				for _, reg := range gcos.DriftedInputs(p.Inputs, g.Inputs) {
					drifted[reg] = append(drifted[reg], key)
				}
			}
		}
		rescan := append(slices.Clone(changed), off...)
		for _, keys := range drifted {
			rescan = append(rescan, keys...)
		}
		slices.Sort(rescan)
		rescan = slices.Compact(rescan)
		since := prev.SnapshotAt // a snapshot captured before cuts were recorded: its row's time
		if prev.Metrics.Cut != nil {
			since = prev.Metrics.Cut.At
		}
		signalled, err := dirtiedSince(ctx, tx, snap, prev, rescan, since)
		if err != nil {
			return err
		}
		for _, key := range changed {
			switch {
			case postgres.SameRowsHashedApart(prev.Metrics, snap.Metrics, key):
				res.Nondeterministic = append(res.Nondeterministic, key)
			case signalled[key]:
				res.Signalled++
			case cursor != nil && snap.Metrics.Groups[key].MaxBornAt.After(*cursor):
				res.Pending++ // the tail will hand these births off; not a lost signal
			default:
				res.LostSignals = append(res.LostSignals, key)
			}
		}
		// Every changed group is re-scanned, a signalled one too: its mark may have been scanned before the change
		// it is credited with (a scan counts members now, so a re-scan that finds nothing new changes nothing).
		// Births may have moved between base groups behind the tail's back: the changed groups' collections are
		// recounted from the source.
		var drift []string
		for _, key := range changed {
			g, ok := snap.Metrics.Groups[key]
			if !ok {
				g = prev.Metrics.Groups[key]
			}
			drift = append(drift, g.SourceRegistry)
		}
		slices.Sort(drift)
		if err := postgres.RequestRecount(ctx, tx, slices.Compact(drift), gcos.DirtySnapshotDrift); err != nil {
			return err
		}
		if _, err := postgres.MarkKeysDirtyTx(ctx, tx, rescan, gcos.DirtySnapshotDrift); err != nil {
			return err
		}
		if err := s.reportRegistryDrift(ctx, tx, res, drifted, signalled, snap.ID, prev.ID, rs.Version); err != nil {
			return err
		}
		if len(res.Nondeterministic) > 0 {
			// Two captures of unchanged births disagree: no snapshot hashed this way can be trusted to say what
			// changed. Ruleset activation is frozen while the finding is open (SPEC §5); an operator resolves it.
			if _, err := postgres.RaiseFindingTx(ctx, tx, gcos.Finding{Type: gcos.IssueSnapshotNondeterministic, Subject: "snapshot-drift",
				RunID: res.RunID, RulesetVersion: rs.Version, Evidence: map[string]any{"kind": "same_rows_hashed_apart",
					"groups": len(res.Nondeterministic), "sample": res.Nondeterministic[:min(len(res.Nondeterministic), 20)],
					"snapshot_id": snap.ID, "previous_snapshot_id": prev.ID, "effect": "ruleset activation frozen until resolved"}}); err != nil {
				return err
			}
		}
		if len(res.LostSignals) == 0 {
			return nil
		}
		// A fingerprint moved with no handoff to explain it: a change reached the source without a governance
		// signal. That is an event gap, not a nondeterministic capture (which would freeze ruleset activation).
		_, err = postgres.RaiseFindingTx(ctx, tx, gcos.Finding{Type: gcos.IssueIssueEventGap, Subject: "snapshot-drift", RunID: res.RunID, RulesetVersion: rs.Version,
			Evidence: map[string]any{"kind": "lost_signal", "groups": len(res.LostSignals), "sample": res.LostSignals[:min(len(res.LostSignals), 20)],
				"snapshot_id": snap.ID, "previous_snapshot_id": prev.ID}})
		return err
	}
	err = retryOnConflict(ctx, s.logger, "record the snapshot's groups", func() error { return s.core.InTx(ctx, record) })
	if err != nil {
		return err
	}
	if res.Dangling, err = s.checkDangling(ctx, res.RunID); err != nil {
		return err
	}
	if res.Expired, err = s.ExpireStale(ctx); err != nil {
		return err
	}
	for {
		var tick ScanResult
		err := retryOnConflict(ctx, s.logger, "scan", func() (err error) {
			tick, err = s.ScanTick(ctx, ScanOptions{Mode: postgres.ModeFullAudit, RunID: res.RunID, Expired: true})
			return err
		})
		if err != nil {
			return err
		}
		res.Scanned += tick.Scanned + tick.Seeded
		if tick.Claimed == 0 || tick.Scanned+tick.Seeded == 0 {
			break
		}
	}
	// With every group judged, the coverage detections over the whole estate: raised where they hold, resolved where
	// they no longer do.
	if res.Detections, err = s.Detect(ctx, res.RunID); err != nil {
		return err
	}
	if s.ledger == nil {
		return nil
	}
	if res.Ledger, err = s.ledger(ctx, ""); err != nil {
		return err
	}
	return nil
}

// seedNew writes a candidate row for each group the audit recorded (new to the registry), judged now: the audit
// holds every group and candidate row, so the new group is counted under a verdict in the transaction that records
// it (as the backfill does).
func (s *Stage) seedNew(ctx context.Context, tx pgx.Tx, ev *evaluate.Evaluator, snapshotID int64, ruleset, runID string, groups []gcos.Group) error {
	if len(groups) == 0 {
		return nil
	}
	values := make([]postgres.CandidateValues, 0, len(groups))
	for _, g := range groups {
		v, err := ev.Evaluate(g, "")
		if err != nil {
			return fmt.Errorf("judge new group %s: %w", g.Key, err)
		}
		values = append(values, v)
	}
	_, err := postgres.SeedCandidates(ctx, tx, snapshotID, ruleset, runID, values)
	return err
}

// RegistryDrift counts, for one registry, the groups whose inputs from it drifted between two full snapshots.
type RegistryDrift struct {
	Groups      int `json:"groups"`
	Unsignalled int `json:"unsignalled"` // no dirty mark since the previous snapshot: the change came with no change row
}

// reportRegistryDrift records the drift per registry on the audit and raises, for each registry that drifted
// under groups no change row had signalled, an issue_event_gap naming the registry and the count.
func (s *Stage) reportRegistryDrift(ctx context.Context, tx pgx.Tx, res *AuditResult, drifted map[string][]string,
	signalled map[string]bool, snapID, prevID int64, ruleset string) error {
	regs := make([]string, 0, len(drifted))
	for reg := range drifted {
		regs = append(regs, reg)
	}
	sort.Strings(regs)
	for _, reg := range regs {
		keys := drifted[reg]
		sort.Strings(keys)
		var silent []string
		for _, k := range keys {
			if !signalled[k] {
				silent = append(silent, k)
			}
		}
		if res.RegistryDrift == nil {
			res.RegistryDrift = map[string]RegistryDrift{}
		}
		res.RegistryDrift[reg] = RegistryDrift{Groups: len(keys), Unsignalled: len(silent)}
		if len(silent) == 0 {
			continue
		}
		if _, err := postgres.RaiseFindingTx(ctx, tx, gcos.Finding{Type: gcos.IssueIssueEventGap, Subject: "registry-drift:" + reg, RunID: res.RunID,
			RulesetVersion: ruleset, Evidence: map[string]any{"kind": "registry_drift", "registry": reg, "groups": len(keys),
				"unsignalled": len(silent), "sample": silent[:min(len(silent), 20)], "snapshot_id": snapID, "previous_snapshot_id": prevID}}); err != nil {
			return err
		}
	}
	return nil
}

// latestFullSnapshot is the baseline of the next audit: the snapshot of the last audit (or backfill) that completed.
// A snapshot whose audit did not complete (killed, failed, abandoned) is never a baseline: the changes it saw are
// still to be reconciled.
func latestFullSnapshot(ctx context.Context, q postgres.Querier) (*postgres.Snapshot, error) {
	snap, err := postgres.ScanSnapshot(q.QueryRow(ctx, `SELECT `+postgres.SnapshotColumns+` FROM evolution_snapshots WHERE id = (
		SELECT source_snapshot_ref FROM candidate_scan_run WHERE status = 'succeeded' AND mode IN ('full_audit', 'backfill')
		ORDER BY finished_at DESC LIMIT 1)`))
	if err != nil {
		return nil, postgres.MapError(err, "latest full snapshot")
	}
	return &snap, nil
}

// dirtiedSince returns the groups (of keys) that a change signalled after t: the group received a dirty mark after
// t under the current ruleset, is dirty now, or, new since the previous snapshot, the registry recorded it after t (a
// handoff or a scan recorded a group the change created; an audit records only groups its snapshot saw, and the
// audit's own transaction, which records what nothing signalled, does not count). A
// group in one of the two snapshots only (its members came from, or went to, another key of the same base and
// scope: an owner or axis family moved) is signalled by a mark on any group of that base and scope: a change that
// moved members signals the group they left, and the group they join is that change's too.
// A mark and a recorded group are stamped with the clock when they are written, after the change they signal was
// read (the intake reads no row younger than its horizon guard), so a change committed after the previous audit's
// cut is signalled by a stamp after it. A group dirty now was signalled too: a later change found it dirty and left
// the mark it had (markDirtySQL); its scan will read that change.
func dirtiedSince(ctx context.Context, tx pgx.Tx, snap postgres.Snapshot, prev *postgres.Snapshot, keys []string, t time.Time) (map[string]bool, error) {
	known := make(map[string]gcos.Group, len(snap.Groups))
	for _, g := range snap.Groups {
		known[g.Key] = g
	}
	var gone []string // keys the snapshot no longer has: their place is the registry's
	for _, k := range keys {
		if _, ok := known[k]; !ok {
			gone = append(gone, k)
		}
	}
	if len(gone) > 0 {
		reg, err := postgres.GroupsByKey(ctx, tx, gone)
		if err != nil {
			return nil, err
		}
		for k, g := range reg {
			known[k] = g
		}
	}
	n := len(keys)
	classes, regs, statuses, scopes := make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n)
	rekeyed := make([]bool, n)  // in one snapshot only: its members may have come from (or gone to) another key
	appeared := make([]bool, n) // in this snapshot only: no audit recorded it before, so a record of it is a signal
	for i, k := range keys {
		g := known[k]
		classes[i], regs[i], statuses[i], scopes[i] = g.ObjectClass, g.SourceRegistry, g.LifecycleStatus, g.Scope
		_, now := snap.Metrics.Groups[k]
		_, before := prev.Metrics.Groups[k]
		rekeyed[i], appeared[i] = now != before, now && !before
	}
	rows, err := tx.Query(ctx, `
		WITH ch AS (SELECT * FROM unnest($1::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::bool[], $8::bool[])
		            AS u(k, cls, reg, st, scope, rekeyed, appeared)),
		sig AS (
		    SELECT g.group_key, g.object_class, g.source_registry, g.lifecycle_status, g.scope,
		           coalesce(c.dirtied_at >= $2 OR c.dirty, false) AS marked,
		           (g.first_seen_at >= $2 AND g.first_seen_at < now()) AS recorded
		    FROM governance_group g
		    LEFT JOIN governance_candidate_state c ON c.group_key = g.group_key
		         AND c.ruleset_version = (SELECT ruleset_version FROM v_current_ruleset)
		    WHERE (g.group_key = ANY($1) OR g.source_registry IN (SELECT reg FROM ch))
		      AND (c.dirtied_at >= $2 OR c.dirty OR (g.first_seen_at >= $2 AND g.first_seen_at < now()))
		)
		SELECT ch.k FROM ch WHERE EXISTS (
		    SELECT 1 FROM sig WHERE (sig.group_key = ch.k AND (sig.marked OR (sig.recorded AND ch.appeared)))
		       OR (ch.rekeyed AND sig.object_class = ch.cls AND sig.source_registry = ch.reg AND sig.lifecycle_status = ch.st
		           AND sig.scope IS NOT DISTINCT FROM ch.scope))`, keys, t, classes, regs, statuses, scopes, rekeyed, appeared)
	if err != nil {
		return nil, fmt.Errorf("read dirty marks: %w", err)
	}
	list, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read dirty marks: %w", err)
	}
	out := map[string]bool{}
	for _, k := range list {
		out[k] = true
	}
	return out, nil
}

// birthCursorPosition is how far the intake has handed births off (nil when no births cursor exists).
func birthCursorPosition(ctx context.Context, q postgres.Querier) (*time.Time, error) {
	var pos *time.Time
	err := q.QueryRow(ctx, `SELECT max(position_tstz) FROM gov_worker_cursor WHERE ts_type = 'timestamptz'`).Scan(&pos)
	if err != nil {
		return nil, fmt.Errorf("read intake cursor: %w", err)
	}
	return pos, nil
}

// FullAuditDue reports whether the last successful full audit (or backfill) finished longer than interval ago.
func (s *Stage) FullAuditDue(ctx context.Context, interval time.Duration) (bool, error) {
	var due bool
	err := s.pool.QueryRow(ctx, `
		SELECT coalesce(max(finished_at) < now() - $1::interval, true)
		FROM candidate_scan_run WHERE mode IN ('full_audit', 'backfill') AND status = 'succeeded'`, interval).Scan(&due)
	if err != nil {
		return false, fmt.Errorf("full audit schedule: %w", err)
	}
	return due, nil
}

// checkDangling finds candidate rows under the current ruleset whose source snapshot no longer exists (pruned or
// deleted behind GCOS's back) or no longer matches the seal taken at its capture (changed behind GCOS's back: a
// captured snapshot is immutable): each such snapshot raises snapshot_ref_dangling, and its rows are dirtied so a
// re-scan re-qualifies them under the current snapshot. Until then they read as stale (fail closed). A snapshot's
// digest is computed once per audit, however many rows are keyed to it.
func (s *Stage) checkDangling(ctx context.Context, runID string) ([]int64, error) {
	var missing []int64
	err := s.core.InTx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
			WITH refs AS MATERIALIZED (
			    SELECT DISTINCT c.source_snapshot_ref AS id FROM governance_candidate_state c JOIN v_current_ruleset cr USING (ruleset_version)
			), bad AS MATERIALIZED (
			    SELECT r.id, s.id IS NOT NULL AS present FROM refs r
			    LEFT JOIN evolution_snapshots s ON s.id = r.id
			    LEFT JOIN gcos_snapshot_seal z ON z.snapshot_id = r.id
			    WHERE s.id IS NULL
			       OR gcos_snapshot_digest(s.id, s.snapshot_at, s.scope, s.metrics, s.delta_previous, s.notes) <> z.digest
			)
			SELECT b.id, b.present, array_agg(c.group_key ORDER BY c.group_key)
			FROM bad b JOIN governance_candidate_state c ON c.source_snapshot_ref = b.id JOIN v_current_ruleset cr USING (ruleset_version)
			GROUP BY 1, 2 ORDER BY 1`)
		if err != nil {
			return fmt.Errorf("find dangling snapshot references: %w", err)
		}
		groups, altered := map[int64][]string{}, map[int64]bool{}
		for rows.Next() {
			var id int64
			var present bool
			var keys []string
			if err := rows.Scan(&id, &present, &keys); err != nil {
				rows.Close()
				return err
			}
			missing = append(missing, id)
			groups[id], altered[id] = keys, present
		}
		if err := rows.Err(); err != nil {
			return err
		}
		for _, id := range missing {
			if _, err := postgres.MarkKeysDirtyTx(ctx, tx, groups[id], gcos.DirtySnapshotDrift); err != nil {
				return err
			}
			if _, err := postgres.RaiseFindingTx(ctx, tx, gcos.Finding{Type: gcos.IssueSnapshotRefDangling, Subject: fmt.Sprint(id), RunID: runID,
				Evidence: map[string]any{"snapshot_id": id, "groups": len(groups[id]), "effect": danglingEffect(altered[id])}}); err != nil {
				return err
			}
		}
		// References that no longer dangle (re-scanned rows) close their findings.
		keys := make([]string, len(missing))
		for i, id := range missing {
			keys[i] = gcos.CoalesceKey(gcos.IssueSnapshotRefDangling, fmt.Sprint(id))
		}
		_, err = postgres.ResolveFindingsExceptTx(ctx, tx, gcos.IssueSnapshotRefDangling, keys)
		return err
	})
	return missing, err
}

// danglingEffect is what a snapshot_ref_dangling finding says of its snapshot and of the rows keyed to it.
func danglingEffect(altered bool) string {
	if altered {
		return "the snapshot row was changed after capture (it no longer matches its seal): rows read as stale until re-scanned"
	}
	return "rows read as stale until re-scanned"
}

// heldCount is a group's member count as the incremental state holds it, the group's collection, and whether it
// is dirty (its scan will count it again).
type heldCount struct {
	Coll    string
	members int64
	dirty   bool
}

type heldCountMap map[string]heldCount

// heldCounts reads the member count of every group with members that has a candidate row under the current
// ruleset (what the gate and the ledger read).
func heldCounts(ctx context.Context, tx pgx.Tx) (heldCountMap, error) {
	rows, err := tx.Query(ctx, `
		SELECT g.group_key, g.source_registry, coalesce(c.member_count, g.member_count), c.dirty
		FROM governance_group g
		JOIN governance_candidate_state c ON c.group_key = g.group_key
		JOIN v_current_ruleset cr ON cr.ruleset_version = c.ruleset_version
		WHERE coalesce(c.member_count, g.member_count) > 0 AND g.source_registry IS NOT NULL`)
	if err != nil {
		return nil, fmt.Errorf("read held member counts: %w", err)
	}
	defer rows.Close()
	out := heldCountMap{}
	for rows.Next() {
		var key string
		var h heldCount
		if err := rows.Scan(&key, &h.Coll, &h.members, &h.dirty); err != nil {
			return nil, fmt.Errorf("read held member counts: %w", err)
		}
		out[key] = h
	}
	return out, rows.Err()
}

// differFrom returns the groups whose held count differs from the snapshot's (a group the snapshot does not have
// counts 0), sorted, and their collections; and how many groups were in flight at the snapshot's cut and are not
// compared: a group written by a transaction that committed after the cut (moved) holds a count the snapshot cannot
// have, and a dirty group's count is the next scan's to set.
func (h heldCountMap) differFrom(snap postgres.Snapshot, moved map[string]bool) (keys, colls []string, inFlight int) {
	for key, held := range h {
		if held.dirty || moved[key] {
			inFlight++
			continue
		}
		if g, ok := snap.Metrics.Groups[key]; !ok || g.Count != held.members {
			keys, colls = append(keys, key), append(colls, held.Coll)
		}
	}
	sort.Strings(keys)
	return keys, colls, inFlight
}

// sortedUnion is the sorted, duplicate-free union of string lists.
func sortedUnion(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		out = append(out, l...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// conflictAttempts bounds how often the audit retries a step PostgreSQL aborted on a deadlock or a serialization
// failure, after a short random pause rather than its loop's back-off: the audit's long transactions meet the scans'
// short ones (each conflict is still counted in gcos_tx_retries_total and logged).
const conflictAttempts = 10

func retryOnConflict(ctx context.Context, log *slog.Logger, what string, fn func() error) error {
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil || attempt == conflictAttempts || ctx.Err() != nil || !postgres.IsPgCode(err, "40P01", "40001") {
			return err
		}
		log.Warn("full audit: transaction conflict; retrying the step", "step", what, "attempt", attempt, "err", err)
		t := time.NewTimer(time.Duration(50+rand.IntN(200)) * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}
