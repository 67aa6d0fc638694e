package scan

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"gcos"
	"gcos/postgres"
)

// The coverage detections (gcos.DetectCoverageGaps, gcos.DetectRegistryGaps) over the whole estate: each incremental
// pass and each full audit derives the set of conditions that hold now, raises a finding for each one not open (or
// whose counts moved) and resolves every open one that no longer holds. The ticks close the orphans of the groups
// they judge covered as they judge them (candidateFindings); raising is this pass's alone, so a tick never pays for
// it while it holds its groups.

// DetectResult reports one detection pass.
type DetectResult struct {
	Conditions int  `json:"conditions"` // conditions that hold now
	Raised     int  `json:"raised"`     // findings opened or reopened
	Refreshed  int  `json:"refreshed"`  // open findings whose counts moved, brought up to date
	Resolved   int  `json:"resolved"`   // findings whose condition is gone
	Deferred   int  `json:"deferred"`   // writes left to the next pass: a scan held the key
	Left       int  `json:"left"`       // writes past scan.detect_writes, left to the next pass
	Skipped    bool `json:"skipped"`    // another process was running the pass
}

// detectLockTimeout bounds a pass's wait for a lock a scan tick holds (a finding's key, a candidate row the
// resolution unlinks): the pass defers that key to its next run instead of queueing behind, or deadlocking with, a
// tick.
const detectLockTimeout = 200 * time.Millisecond

// coverageGroupsSQL reads every live group with a verdict under the current ruleset, its coverage at read time.
const coverageGroupsSQL = `
SELECT e.group_key, coalesce(e.scope, ''), coalesce(e.object_class, ''), coalesce(e.source_registry, ''),
       e.candidate_verdict, coalesce(e.coverage_outcome, ''), coalesce(e.risk_class, ''),
       coalesce(e.member_count, e.group_member_count, 0)
FROM v_candidate_effective e
WHERE e.group_key IN (SELECT group_key FROM governance_group WHERE retired_at IS NULL)`

// openDetectionsSQL reads the open findings of the detection types a pass owns: a group orphan the gate raised is
// one of them; an object row's orphan (gov:coverage:orphan:object:…) is the gate's alone.
const openDetectionsSQL = `
SELECT coalesce_key, issue_type, evidence_snapshot::jsonb, now() - last_seen_at < $2::interval FROM system_issues
WHERE issue_type = ANY($1) AND status = 'open' AND coalesce_key LIKE 'gov:%'
  AND coalesce_key NOT LIKE 'gov:coverage:orphan:object:%'`

// Detect runs one detection pass; runID names the run it belongs to ("" for none).
func (s *Stage) Detect(ctx context.Context, runID string) (res DetectResult, err error) {
	start := time.Now()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return res, fmt.Errorf("detect: %w", err)
	}
	// One pass at a time across processes: two passes reading at different instants would resolve what the other
	// just raised. A session lock, released at the end (or with the connection, should the unlock fail).
	unlock := false
	defer func() {
		if unlock {
			if _, uerr := conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(hashtextextended('gcos.detect', 0))`); uerr != nil {
				_ = conn.Conn().Close(context.WithoutCancel(ctx))
			}
		}
		conn.Release()
	}()
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtextextended('gcos.detect', 0))`).Scan(&unlock); err != nil {
		return res, fmt.Errorf("detect: lock: %w", err)
	}
	if !unlock {
		res.Skipped = true
		return res, nil
	}
	var want []gcos.Detection
	var ruleset string
	var undecided map[string]bool
	open := map[string]openDetection{}
	err = pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		want, ruleset, undecided, err = s.detections(ctx, tx)
		if err != nil {
			return err
		}
		rows, err := tx.Query(ctx, openDetectionsSQL, issueTypes(gcos.CoverageGapTypes), s.cfg.Scan.DetectRefresh.Duration())
		if err != nil {
			return fmt.Errorf("read open detections: %w", err)
		}
		var o openDetection
		_, err = pgx.ForEachRow(rows, []any{&o.key, &o.issueType, &o.evidence, &o.recent}, func() error {
			open[o.key] = o
			return nil
		})
		return err
	})
	if err != nil {
		return res, fmt.Errorf("detect: %w", err)
	}
	res.Conditions = len(want)
	// Raises first, then resolutions, then count updates: a pass bounded by scan.detect_writes never lets a churn of
	// moving counts starve a condition that opened or closed.
	var raises, resolves, refreshes []func(tx pgx.Tx) error
	wanted := map[string]bool{}
	for _, d := range want {
		wanted[d.Key()] = true
		if o, ok := open[d.Key()]; ok {
			if o.recent || o.current(d) {
				continue
			}
			// The same condition with its counts moved: the open row is brought up to date (at most once per
			// scan.detect_refresh), no occurrence counted.
			refreshes = append(refreshes, func(tx pgx.Tx) error {
				ok, err := postgres.RefreshFindingTx(ctx, tx, d.Type, d.Subject, d.Evidence)
				if ok {
					res.Refreshed++
				}
				return err
			})
			continue
		}
		f := gcos.NewFinding(d.Type, d.Subject, runID, ruleset, d.Evidence)
		raises = append(raises, func(tx pgx.Tx) error {
			if still, err := stillHolds(ctx, tx, d.Type, d.Subject, true); err != nil || !still {
				return err
			}
			_, err := postgres.RaiseFindingTx(ctx, tx, f)
			res.Raised++
			return err
		})
	}
	for _, key := range slices.Sorted(maps.Keys(open)) {
		if wanted[key] {
			continue
		}
		// A group not judged yet under the current ruleset is unknown: its orphan, and its class's owner gap, stay.
		if t := gcos.IssueType(open[key].issueType); undecided[open[key].subject()] && (t == gcos.IssueCoverageOrphan || t == gcos.IssueCoverageOwnerGap) {
			continue
		}
		o := open[key]
		resolves = append(resolves, func(tx pgx.Tx) error {
			if still, err := stillHolds(ctx, tx, gcos.IssueType(o.issueType), o.subject(), false); err != nil || still {
				return err
			}
			closed, err := postgres.ResolveFindingTx(ctx, tx, gcos.IssueType(o.issueType), o.subject(), "")
			if closed {
				res.Resolved++
			}
			return err
		})
	}
	work := slices.Concat(raises, resolves, refreshes)
	if limit := s.cfg.Scan.DetectWrites; limit > 0 && len(work) > limit {
		res.Left = len(work) - limit
		work = work[:limit]
	}
	for _, item := range work {
		if err := s.detectWrite(ctx, conn, item, &res); err != nil {
			return res, err
		}
	}
	if res.Raised+res.Resolved+res.Deferred+res.Left > 0 {
		s.logger.Info("coverage detections", "run_id", runID, "conditions", res.Conditions, "raised", res.Raised,
			"refreshed", res.Refreshed, "resolved", res.Resolved, "deferred", res.Deferred, "left", res.Left, "elapsed", time.Since(start))
	}
	return res, nil
}

// detectWrite makes one write of the pass in a transaction of its own, so the pass holds a finding's lock (and the
// candidate rows a resolution unlinks) for that write alone: a scan tick skips or waits for those rows for
// milliseconds, never for the rest of the pass. A write that waits past the lock timeout is rolled back and
// deferred. The commit need not reach the disk before the next write: a write a crash loses is derived again by the
// next pass, with its announcement (one transaction).
func (s *Stage) detectWrite(ctx context.Context, conn *pgxpool.Conn, item func(tx pgx.Tx) error, res *DetectResult) error {
	raised, refreshed, resolved := res.Raised, res.Refreshed, res.Resolved
	err := pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf(`SET LOCAL lock_timeout = '%dms'; SET LOCAL synchronous_commit = off`,
			detectLockTimeout.Milliseconds())); err != nil {
			return err
		}
		return item(tx)
	})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "55P03" || pgErr.Code == "40P01") {
		res.Raised, res.Refreshed, res.Resolved = raised, refreshed, resolved
		res.Deferred++ // a scan holds it: the next pass tries again
		return nil
	}
	if err != nil {
		return fmt.Errorf("detect: %w", err)
	}
	return nil
}

// orphanNowSQL says whether group $1 is an orphan in the committed state (coverageGroupsSQL and gcos.IsOrphan for one
// group).
const orphanNowSQL = `SELECT EXISTS (SELECT 1 FROM v_candidate_effective e WHERE e.group_key = $1
	AND e.candidate_verdict = 'relevant' AND e.coverage_outcome = 'orphan' AND coalesce(e.member_count, e.group_member_count, 0) > 0
	AND e.group_key IN (SELECT group_key FROM governance_group WHERE retired_at IS NULL))`

// stillHolds takes the finding's lock and reports whether an orphan is (held) or is no longer (!held) what the pass
// read: a scan tick may have judged the group since, and raised or closed its finding with it; the pass then leaves
// it as the tick did. Other detections are aggregates of the whole estate: the pass's reading stands, and its next
// run corrects a change that came between.
func stillHolds(ctx context.Context, tx pgx.Tx, t gcos.IssueType, subject string, held bool) (bool, error) {
	if t != gcos.IssueCoverageOrphan {
		return held, nil
	}
	if err := postgres.LockFindingTx(ctx, tx, t, subject); err != nil {
		return false, err
	}
	var orphan bool
	if err := tx.QueryRow(ctx, orphanNowSQL, subject).Scan(&orphan); err != nil {
		return false, fmt.Errorf("read group %s: %w", subject, err)
	}
	return orphan, nil
}

// detections derives the conditions that hold now, and the ruleset they are judged under.
// undecided holds the subjects of the orphans and owner gaps that no pass can resolve now: the live groups with no
// verdict under the current ruleset (a ruleset being activated, a group just recorded) and their scope and class.
func (s *Stage) detections(ctx context.Context, tx pgx.Tx) (_ []gcos.Detection, ruleset string, undecided map[string]bool, err error) {
	if err := tx.QueryRow(ctx, `SELECT coalesce((SELECT ruleset_version FROM v_current_ruleset), '')`).Scan(&ruleset); err != nil {
		return nil, "", nil, fmt.Errorf("read the current ruleset: %w", err)
	}
	rows, err := tx.Query(ctx, coverageGroupsSQL)
	if err != nil {
		return nil, "", nil, fmt.Errorf("read coverage: %w", err)
	}
	var groups []gcos.CoverageGroup
	var g gcos.CoverageGroup
	var verdict *string
	undecided = map[string]bool{}
	if _, err := pgx.ForEachRow(rows, []any{&g.GroupKey, &g.Scope, &g.ObjectClass, &g.SourceRegistry, &verdict,
		&g.Coverage, &g.RiskClass, &g.Members}, func() error {
		if verdict == nil {
			undecided[g.GroupKey], undecided[g.Scope+":"+g.ObjectClass] = true, true // unknown, never resolved
			return nil
		}
		g.Verdict = gcos.Verdict(*verdict)
		groups = append(groups, g)
		return nil
	}); err != nil {
		return nil, "", nil, fmt.Errorf("read coverage: %w", err)
	}
	out := gcos.DetectCoverageGaps(groups)
	regs, err := s.core.DimensionRegistries(ctx, tx, "")
	if err != nil {
		return nil, "", nil, err
	}
	var now time.Time
	if err := tx.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return nil, "", nil, err
	}
	born := map[gcos.ExceptionObject]bool{}
	b := s.core.BirthBinding()
	for _, o := range gcos.PhantomProbes(regs, now) {
		var ok bool
		if err := tx.QueryRow(ctx, b.SQL(`SELECT EXISTS (SELECT 1 FROM {t} WHERE {coll} = $1 AND {code} = $2)`), o.Collection, o.Code).Scan(&ok); err != nil {
			return nil, "", nil, fmt.Errorf("read the birth of %s:%s: %w", o.Collection, o.Code, err)
		}
		born[o] = ok
	}
	out = append(out, gcos.DetectRegistryGaps(regs, now, func(o gcos.ExceptionObject) bool { return born[o] })...)
	return out, ruleset, undecided, nil
}

// openDetection is an open finding of a detection type.
type openDetection struct {
	key, issueType string
	evidence       map[string]any
	recent         bool // raised or brought up to date within scan.detect_refresh
}

// subject is the finding's subject: its key after gov:<family>:<state>:.
func (o openDetection) subject() string {
	prefix := gcos.CoalesceKey(gcos.IssueType(o.issueType), "") + ":"
	return o.key[min(len(prefix), len(o.key)):]
}

// current reports whether the open finding already says what d says: the same counts, risk and scope, so raising it
// again would only count a repeat.
func (o openDetection) current(d gcos.Detection) bool {
	for _, k := range []string{"objects", "groups", "risk_class", "risk_classes", "scope", "field", "value"} {
		want, ok := d.Evidence[k]
		if !ok {
			continue
		}
		got, _ := json.Marshal(o.evidence[k])
		exp, _ := json.Marshal(want)
		if string(got) != string(exp) {
			return false
		}
	}
	return true
}

func issueTypes(ts []gcos.IssueType) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = string(t)
	}
	return out
}
