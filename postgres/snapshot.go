package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
)

// Snapshot scopes (evolution_snapshots.scope) GCOS writes.
const (
	SnapshotBackfill = "governance.backfill"
	SnapshotAudit    = "governance.audit"
	SnapshotScan     = "governance.scan"
)

// SnapshotGroup is one group's entry in a snapshot's metrics.
type SnapshotGroup struct {
	Count          int64     `json:"count"`
	MaxBornAt      time.Time `json:"max_born_at"`
	MaxID          int64     `json:"max_id"`
	ContentHash    string    `json:"content_hash"`
	SourceRegistry string    `json:"source_registry"`
	// Inputs fingerprints, per registry, the rows besides births that feed the group's verdict (gcos.GroupInputs).
	Inputs map[string]string `json:"inputs,omitempty"`
	// NewestXID is the 64-bit id of the youngest transaction that wrote one of the group's births or their anchors
	// (baseAggregateSQL); 0 in a snapshot captured before it was recorded.
	NewestXID int64 `json:"newest_xid,omitempty"`
}

// UnchangedSince reports whether the group's births are provably the very row versions prev saw: as many, and none
// written by a transaction that was not finished at prev's cut (each is then a row version prev's snapshot saw,
// under the same anchor, so in the same group). Two captures of such a group must hash alike; when they do not, the
// hash depends on something besides content (SPEC's snapshot_nondeterministic). Without the evidence (a snapshot
// older than NewestXID or its cut) it reports false: a change is then presumed, never nondeterminism.
func (g SnapshotGroup) UnchangedSince(prev SnapshotGroup, prevCut *SnapshotCut) bool {
	if prevCut == nil || g.NewestXID <= 0 || g.Count != prev.Count {
		return false
	}
	xmin, ok := prevCut.xmin()
	return ok && g.NewestXID < xmin
}

// SnapshotTotals summarises a capture.
type SnapshotTotals struct {
	Births     int64 `json:"births"`
	Groups     int   `json:"groups"`
	BaseGroups int   `json:"base_groups"`
	Scopes     int   `json:"scopes"`
	Batches    int   `json:"batches"`
}

// SnapshotMetrics is evolution_snapshots.metrics.
type SnapshotMetrics struct {
	RunID          string                   `json:"run_id"`
	RulesetVersion string                   `json:"ruleset_version"`
	Totals         SnapshotTotals           `json:"totals"`
	Groups         map[string]SnapshotGroup `json:"groups"`
	// Cut is the capture's instant (absent in snapshots captured before it was recorded).
	Cut *SnapshotCut `json:"cut,omitempty"`
	// RowHash names the row hash the content hashes were computed with (RowHashExpr under the source binding): two
	// captures' hashes are comparable only under one definition. Absent in snapshots captured before it was recorded.
	RowHash string `json:"row_hash,omitempty"`
}

// SameRowsHashedApart reports whether the group key hashes differently in cur than in prev although its births
// are provably the very row versions prev saw (SnapshotGroup.UnchangedSince) under the same row hash: two captures
// of an unchanged group that differ, so the hash depends on something besides row content.
func SameRowsHashedApart(prev, cur SnapshotMetrics, key string) bool {
	p, ok := prev.Groups[key]
	g, ok2 := cur.Groups[key]
	if !ok || !ok2 || p.ContentHash == g.ContentHash || prev.RowHash == "" || prev.RowHash != cur.RowHash {
		return false
	}
	return g.UnchangedSince(p, prev.Cut)
}

// SnapshotCut is the instant a capture read the source at: what committed before it is in the snapshot, what
// committed after it is not. Every proof that compares GCOS's state with a snapshot takes this cut (SPEC §13).
type SnapshotCut struct {
	// At is the database clock once the capture's snapshot was taken: a row committed before the cut was stamped
	// (inside its transaction) before At, so waiting for the intake to hand off every row stamped up to At hands
	// off everything the capture saw.
	At time.Time `json:"at"`
	// Snapshot is the capture's pg_current_snapshot(): a transaction not visible in it committed after the cut.
	Snapshot string `json:"snapshot"`
}

// xmin is the cut's oldest transaction still running ("xmin:xmax:xip,…"): every transaction before it had finished.
func (c SnapshotCut) xmin() (int64, bool) {
	head, _, ok := strings.Cut(c.Snapshot, ":")
	if !ok {
		return 0, false
	}
	x, err := strconv.ParseInt(head, 10, 64)
	return x, err == nil && x > 0
}

// GroupDelta is one group's drift against the previous snapshot of the same scope.
type GroupDelta struct {
	CountDelta         int64 `json:"count_delta"`
	NewMaxID           int64 `json:"new_max_id"`
	FingerprintChanged bool  `json:"fingerprint_changed"`
	Appeared           bool  `json:"appeared"`
	Vanished           bool  `json:"vanished"`
}

// SnapshotDelta is evolution_snapshots.delta_previous; only changed groups are listed.
type SnapshotDelta struct {
	PreviousSnapshotID *int64                `json:"previous_snapshot_id"`
	Groups             map[string]GroupDelta `json:"groups"`
}

// Snapshot is a captured source snapshot with the groups it found.
type Snapshot struct {
	ID         int64           `json:"id"`
	SnapshotAt time.Time       `json:"snapshot_at"`
	Scope      string          `json:"scope"`
	Metrics    SnapshotMetrics `json:"metrics"`
	Delta      SnapshotDelta   `json:"delta_previous"`
	// Groups and Registries are what the capture saw, for the caller to seed from; they are not stored here.
	Groups     []gcos.Group    `json:"-"`
	Registries gcos.Registries `json:"-"`
	// AuditID is the registry_changelog row recording the capture (0 when not known, e.g. a snapshot read back).
	AuditID int64 `json:"audit_id,omitempty"`
	// Reused: the capture found the scope unchanged and returned its previous snapshot (CaptureOptions.ReuseUnchanged).
	Reused bool `json:"-"`
	// KeptDrift are the collections whose kept counts differ from the capture's (CaptureOptions.CheckKeptCounts);
	// keptCountedAt when each was last counted, as the cut saw it (KeptDriftSettled).
	KeptDrift     []string `json:"-"`
	keptCountedAt map[string]time.Time
}

// CaptureOptions parameterise a capture.
type CaptureOptions struct {
	Scope          string
	RunID          string
	RulesetVersion string
	Notes          string
	// BatchSize and StatementTimeout override the configuration (tests use tiny ones).
	BatchSize        int64
	StatementTimeout time.Duration
	Workers          int
	Progress         func(done, total int64)
	// ReuseUnchanged returns the previous snapshot of the scope instead of writing an identical one (a re-run over
	// unchanged sources writes no new row); the snapshot says Reused.
	ReuseUnchanged bool
	// CheckKeptCounts compares the counts the births handoff keeps with the snapshot's, in the capture's instant.
	CheckKeptCounts bool
}

// BirthBinding names the birth inventory's table and columns: the source binding mapped once, which every query
// over births is built from (SQL's placeholders: {t} {id} {code} {coll} {type} {status} {born} {parent} {canon}
// {src} {actor}).
type BirthBinding struct {
	Table, ID, Code, Collection, Type, Status, BornAt, Parent, Canonical, SourceSystem, Actor string
}

// NewBirthBinding maps the configured source binding onto the births' columns.
func NewBirthBinding(sb gcos.SourceBinding) BirthBinding {
	b := sb.Birth
	return BirthBinding{Table: b.Table, ID: b.ID, Code: b.EntityCode, Collection: sb.SourceRegistry.Column,
		Type: sb.ObjectClass.Column, Status: sb.LifecycleStatus.Column, BornAt: b.BornAt, Parent: b.ParentCode,
		Canonical: b.CanonicalAddress, SourceSystem: b.SourceSystem, Actor: b.ActorRef}
}

// BirthBinding is the configured source binding of the births.
func (s *Store) BirthBinding() BirthBinding { return NewBirthBinding(s.cfg.SourceBinding) }

// Names are the births' placeholders bound to their configured columns.
func (b BirthBinding) Names() Names {
	return Names{"t": {b.Table}, "id": {b.ID}, "code": {b.Code}, "coll": {b.Collection}, "type": {b.Type},
		"status": {b.Status}, "born": {b.BornAt}, "parent": {b.Parent}, "canon": {b.Canonical},
		"src": {b.SourceSystem}, "actor": {b.Actor}}
}

// SQL builds text over the births' placeholders (Names.SQL).
func (b BirthBinding) SQL(text string) string { return b.Names().SQL(text) }

// baseAggregateSQL aggregates one id range of births into (class, registry, lifecycle) base groups. An inherited
// child (parent_code set) is counted in its anchor's base group; its own row content still enters the hash. The
// per-row hash covers every bound column including the id; the two seeds give two 64-bit lanes. Rows are first
// aggregated with their parent code, so anchors are looked up once per (parent, group), never per row. OFFSET 0
// keeps the anchor lookup an index probe on the unique (collection, code) index per aggregate row: flattened into a
// join, the planner hashed the whole inventory for every batch, so a batch cost O(all births) instead of O(batch).
//
// The last column is the base group's newest row version: the 64-bit id of the youngest transaction that wrote one
// of its rows or their anchors (the capture's xmax, plus this transaction's reference for age(), minus the smallest
// age()). A row frozen or written more than 2³¹ transactions ago reads as old or as young, never as a wrong old
// value, so the proof of an unchanged group it feeds (SnapshotGroup.UnchangedSince) can fail, never lie. A child
// whose anchor is gone reads as written now: a deleted anchor leaves no row version behind, yet moves its children
// to their own class's group, so a group holding such a child is never proven unchanged.
func (b BirthBinding) baseAggregateSQL() string { return b.baseAggregateSQLOf(pgx.Identifier{b.Table}) }

// baseAggregateSQLOf is baseAggregateSQL over the births of one partition (or the whole table): the births are read
// from part, their anchors from the whole table, since a child's anchor may be born in another partition.
func (b BirthBinding) baseAggregateSQLOf(part pgx.Identifier) string {
	n := b.Names()
	n["part"] = part
	return n.SQL(`
SELECT coalesce(p.{type}, a.type), coalesce(p.{coll}, a.coll), coalesce(p.{status}, a.status),
       sum(a.n)::bigint, max(a.max_born), max(a.max_id), sum(a.h0)::text, sum(a.h1)::text,
       (SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint + age(xid(pg_snapshot_xmax(pg_current_snapshot()))))
           - min(CASE WHEN a.parent IS NOT NULL AND p.age IS NULL THEN -2147483648 ELSE least(a.age, p.age) END)
FROM (
    SELECT b.type, b.coll, b.status, b.parent, count(*) AS n, max(b.born) AS max_born, max(b.id) AS max_id,
           sum(b.h) AS h0, sum(hashint8extended(b.h, 1)) AS h1, min(b.age) AS age
    FROM (
        SELECT b.{type} AS type, b.{coll} AS coll, b.{status} AS status, b.{parent} AS parent, b.{born} AS born, b.{id} AS id,
               ` + RowHashExpr + ` AS h, age(b.xmin) AS age
        FROM {part} b
        WHERE b.{id} >= $1 AND b.{id} < $2
        OFFSET 0
    ) b
    GROUP BY 1, 2, 3, 4
    OFFSET 0
) a
LEFT JOIN LATERAL (
    SELECT p.{type}, p.{coll}, p.{status}, age(p.xmin) AS age FROM {t} p
    WHERE a.parent IS NOT NULL AND p.{coll} = a.coll AND p.{code} = a.parent
    OFFSET 0
) p ON true
GROUP BY 1, 2, 3`)
}

// RowHashExpr is one birth's 64-bit content hash: its text columns joined with a unit separator (NULL as a
// record-separator marker), mixed non-linearly with the id and the birth instant (epoch microseconds, independent
// of any session setting). It is computed once per row (the OFFSET 0 subquery keeps it from being inlined twice)
// and the second lane is derived from it; formatting the whole row as a record was 2× slower, because timestamp
// output is the costliest step.
const RowHashExpr = `hashint8extended(
               hashtextextended(concat_ws(chr(31), b.{code}, b.{coll}, b.{type}, b.{status}, coalesce(b.{canon}, chr(30)),
                                          coalesce(b.{parent}, chr(30)), coalesce(b.{src}, chr(30)), coalesce(b.{actor}, chr(30))), 0)
               # hashint8extended(b.{id}, 0) # hashfloat8extended(date_part('epoch', b.{born}), 0), 0)`

// ObjectFingerprintSQL reads one object's fingerprint by collection ($1) and code ($2): its birth row's hash in
// the two lanes of gcos.Fingerprint, rendered as Fingerprint.String (high lane, then low, 16 hex digits each), so
// SQL views can compare it with the fingerprint an exception pins (gcos_object_fingerprint). It is a definition, not
// state: the reference evaluator (package oracle) runs the same statement in its own transaction.
func (b BirthBinding) ObjectFingerprintSQL() string {
	return b.SQL(`SELECT lpad(to_hex(hashint8extended(f.h, 1)), 16, '0') || lpad(to_hex(f.h), 16, '0')
FROM {t} b CROSS JOIN LATERAL (SELECT ` + RowHashExpr + ` AS h) f
WHERE b.{coll} = $1 AND b.{code} = $2`)
}

// memberCountSQL counts the members of every base group of the collections $1, each inherited child in its
// anchor's base group as baseAggregateSQL places it (the rows of one base group may appear twice: the caller adds
// them up): every member, and those through a tail position ($2, $3; none when $2 is NULL), in one read. A base
// group's objects all live in its collection, so the count reads those collections and nothing else; objects
// without a parent (nearly all) are counted by a hash aggregate on three columns, children through a lookup of their
// parent.
func (b BirthBinding) memberCountSQL() string {
	return b.SQL(`
SELECT b.{type}, b.{coll}, b.{status}, count(*), count(*) FILTER (WHERE (b.{born}, b.{id}) <= ($2::timestamptz, $3::bigint))
FROM {t} b
WHERE b.{coll} = ANY($1) AND b.{parent} IS NULL
GROUP BY 1, 2, 3
UNION ALL
SELECT coalesce(p.{type}, b.{type}), b.{coll}, coalesce(p.{status}, b.{status}), count(*),
       count(*) FILTER (WHERE (b.{born}, b.{id}) <= ($2::timestamptz, $3::bigint))
FROM {t} b
LEFT JOIN {t} p ON p.{coll} = b.{coll} AND p.{code} = b.{parent}
WHERE b.{coll} = ANY($1) AND b.{parent} IS NOT NULL
GROUP BY 1, 2, 3`)
}

// birthBasesSQL counts the births $1 (ids) by the base group the source places them in now, each inherited child in
// its anchor's, as memberCountSQL does.
func (b BirthBinding) birthBasesSQL() string {
	return b.SQL(`
SELECT coalesce(p.{type}, b.{type}), b.{coll}, coalesce(p.{status}, b.{status}), count(*)
FROM {t} b
LEFT JOIN {t} p ON b.{parent} IS NOT NULL AND p.{coll} = b.{coll} AND p.{code} = b.{parent}
WHERE b.{id} = ANY($1)
GROUP BY 1, 2, 3`)
}

// bornAfterSQL counts, by anchor base group, the births of the collections $3 after the tail position ($1, $2):
// the births the tail has not handed off yet, and, when $4, lists their ids. It reads the (born_at, id) index over
// the tail's lag only.
func (b BirthBinding) bornAfterSQL() string {
	return b.SQL(`
SELECT coalesce(p.{type}, b.{type}), b.{coll}, coalesce(p.{status}, b.{status}), count(*), array_agg(b.{id}) FILTER (WHERE $4)
FROM {t} b
LEFT JOIN {t} p ON b.{parent} IS NOT NULL AND p.{coll} = b.{coll} AND p.{code} = b.{parent}
WHERE (b.{born}, b.{id}) > ($1::timestamptz, $2::bigint) AND b.{coll} = ANY($3)
GROUP BY 1, 2, 3`)
}

// basesBornAfterSQL lists the anchor base groups that have births after the tail position ($1, $2), through the
// (born_at, id) index.
func (b BirthBinding) basesBornAfterSQL() string {
	return b.SQL(`
SELECT DISTINCT coalesce(p.{type}, b.{type}), b.{coll}, coalesce(p.{status}, b.{status})
FROM {t} b
LEFT JOIN {t} p ON b.{parent} IS NOT NULL AND p.{coll} = b.{coll} AND p.{code} = b.{parent}
WHERE (b.{born}, b.{id}) > ($1::timestamptz, $2::bigint)`)
}

// RecordBindingStatements records, in tx, the statements the SQL views run under this source binding: the object
// fingerprint an exception's pin is checked with, and the estate count the ledger's total is (the backfill and the
// full audit record them with the object rows they derive).
func (s *Store) RecordBindingStatements(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, `INSERT INTO gcos_object_fingerprint_statement AS f (singleton, statement) VALUES (true, $1)
		ON CONFLICT (singleton) DO UPDATE SET statement = EXCLUDED.statement, recorded_at = now()
		WHERE f.statement IS DISTINCT FROM EXCLUDED.statement`, s.BirthBinding().ObjectFingerprintSQL()); err != nil {
		return fmt.Errorf("record the object fingerprint statement: %w", err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO gcos_estate_statement AS e (singleton, statement) VALUES (true, $1)
		ON CONFLICT (singleton) DO UPDATE SET statement = EXCLUDED.statement, recorded_at = now()
		WHERE e.statement IS DISTINCT FROM EXCLUDED.statement`, s.BirthBinding().estateCountSQL()); err != nil {
		return fmt.Errorf("record the estate statement: %w", err)
	}
	return nil
}

// estateCountSQL counts every born object now (what the ledger's total is).
func (b BirthBinding) estateCountSQL() string {
	return b.SQL(`SELECT count(*) FROM {t}`)
}

// rowHashName names the row hash under this binding: the first 16 hex digits of the SHA-256 of its expression.
func (b BirthBinding) rowHashName() string {
	sum := sha256.Sum256([]byte(b.SQL(RowHashExpr)))
	return hex.EncodeToString(sum[:8])
}

// rowHashSQL returns one birth's fingerprint contribution, computed exactly as baseAggregateSQL does.
func (b BirthBinding) rowHashSQL() string {
	return b.SQL(`
SELECT h, hashint8extended(h, 1) FROM (SELECT ` + RowHashExpr + ` AS h
FROM {t} b WHERE b.{id} = $1) x`)
}

// rowFingerprint returns the fingerprint contribution of one birth (by id); adding it to a group's fingerprint is
// the O(1) update a new birth causes.
func (s *Store) rowFingerprint(ctx context.Context, id int64) (gcos.Fingerprint, error) {
	var h0, h1 int64
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return gcos.Fingerprint{}, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SET LOCAL TimeZone = 'UTC'; SET LOCAL DateStyle = 'ISO, YMD'`); err != nil {
		return gcos.Fingerprint{}, err
	}
	if err := tx.QueryRow(ctx, s.BirthBinding().rowHashSQL(), id).Scan(&h0, &h1); err != nil {
		return gcos.Fingerprint{}, MapError(err, fmt.Sprintf("birth %d", id))
	}
	return gcos.FingerprintFromRowHashes(h0, h1), nil
}

type baseKey struct{ Class, registry, lifecycle string }

// captureBatches reads [minID, maxID] in keyset batches across workers sharing one exported snapshot, so the
// result is one consistent instant whatever the batch size or parallelism.
func (s *Store) captureBatches(ctx context.Context, tx pgx.Tx, parts []birthPartition, opts CaptureOptions) (map[baseKey]*gcos.BaseGroup, int, error) {
	var snapshotName string
	if err := tx.QueryRow(ctx, `SELECT pg_export_snapshot()`).Scan(&snapshotName); err != nil {
		return nil, 0, fmt.Errorf("export snapshot: %w", err)
	}
	// A batch is an id range of one partition: each reads only its partition's id index, and the fingerprints of
	// the partitions' groups add up to the table's (they are sums), so the combined capture equals an unpartitioned one.
	type batch struct {
		sql    string
		lo, hi int64
	}
	batches := make(chan batch)
	var ranges []batch
	var total int64
	b := s.BirthBinding()
	for _, p := range parts {
		sql := b.baseAggregateSQLOf(p.name)
		for lo := p.minID; lo <= p.maxID; lo += opts.BatchSize {
			ranges = append(ranges, batch{sql, lo, min(lo+opts.BatchSize, p.maxID+1)})
		}
		total += p.maxID - p.minID + 1
	}
	nBatches := len(ranges)
	var mu sync.Mutex
	merged := map[baseKey]*gcos.BaseGroup{}
	var done int64
	worker := func(ctx context.Context, q pgx.Tx) error {
		for b := range batches {
			bt := time.Now()
			rows, err := q.Query(ctx, b.sql, b.lo, b.hi)
			if err != nil {
				return fmt.Errorf("batch [%d,%d): %w", b.lo, b.hi, err)
			}
			var part []gcos.BaseGroup
			for rows.Next() {
				var g gcos.BaseGroup
				var lo, hi string
				if err := rows.Scan(&g.ObjectClass, &g.SourceRegistry, &g.LifecycleStatus, &g.Count, &g.MaxBornAt, &g.MaxID, &lo, &hi, &g.NewestXID); err != nil {
					rows.Close()
					return fmt.Errorf("batch [%d,%d): %w", b.lo, b.hi, err)
				}
				if g.ContentHash, err = gcos.FingerprintFromSums(lo, hi); err != nil {
					rows.Close()
					return fmt.Errorf("batch [%d,%d): %w", b.lo, b.hi, err)
				}
				part = append(part, g)
			}
			if err := rows.Err(); err != nil {
				return fmt.Errorf("batch [%d,%d): %w", b.lo, b.hi, err)
			}
			s.logger.Debug("snapshot: batch", "lo", b.lo, "hi", b.hi, "groups", len(part), "elapsed", time.Since(bt))
			mu.Lock()
			for _, g := range part {
				k := baseKey{g.ObjectClass, g.SourceRegistry, g.LifecycleStatus}
				m := merged[k]
				if m == nil {
					c := g
					merged[k] = &c
					continue
				}
				m.Count += g.Count
				m.ContentHash = m.ContentHash.Add(g.ContentHash)
				if g.MaxID > m.MaxID {
					m.MaxID = g.MaxID
				}
				if g.MaxBornAt.After(m.MaxBornAt) {
					m.MaxBornAt = g.MaxBornAt
				}
				m.NewestXID = max(m.NewestXID, g.NewestXID)
			}
			done += b.hi - b.lo
			if opts.Progress != nil {
				opts.Progress(min(done, total), total)
			}
			mu.Unlock()
		}
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The helpers wait for a connection of the pool only while batches remain: the first worker, on the
	// capture's own transaction, reads them all if none comes free, and once it has taken the last batch a helper
	// still waiting gives up. The capture never waits for the pool while holding a connection of it.
	helping, noMoreHelp := context.WithCancel(ctx)
	defer noMoreHelp()
	errs := make(chan error, opts.Workers)
	var wg sync.WaitGroup
	for w := 0; w < opts.Workers; w++ {
		wg.Add(1)
		go func(first bool) {
			defer wg.Done()
			err := func() error {
				if first {
					defer noMoreHelp()
					return worker(ctx, tx)
				}
				conn, err := s.pool.Acquire(helping)
				if err != nil {
					if ctx.Err() == nil && helping.Err() != nil {
						return nil // every batch was taken before a connection came free
					}
					return err
				}
				defer conn.Release()
				wtx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
				if err != nil {
					return err
				}
				defer func() { _ = wtx.Rollback(context.Background()) }()
				if _, err := wtx.Exec(ctx, `SET TRANSACTION SNAPSHOT '`+snapshotName+`'`); err != nil {
					return fmt.Errorf("import snapshot: %w", err)
				}
				if err := sessionSettings(ctx, wtx, opts.StatementTimeout); err != nil {
					return err
				}
				return worker(ctx, wtx)
			}()
			if err != nil {
				cancel()
				errs <- err
			}
		}(w == 0)
	}
	go func() {
		defer close(batches)
		for _, b := range ranges {
			select {
			case batches <- b:
			case <-ctx.Done():
				return
			}
		}
	}()
	wg.Wait()
	close(errs)
	if err := errors.Join(collect(errs)...); err != nil {
		return nil, nBatches, err
	}
	if err := s.checkDeterminism(ctx, tx, ranges[0].sql, ranges[0].lo, ranges[0].hi); err != nil {
		return nil, nBatches, err
	}
	return merged, nBatches, nil
}

// birthPartition is one leaf of the birth table (the table itself when it is not partitioned) and its id bounds.
type birthPartition struct {
	name         pgx.Identifier
	minID, maxID int64
}

// birthPartitionsSQL lists the leaves of a partitioned birth table: its partitions at any depth.
const birthPartitionsSQL = `SELECT n.nspname, c.relname FROM pg_partition_tree($1::regclass) t
	JOIN pg_class c ON c.oid = t.relid JOIN pg_namespace n ON n.oid = c.relnamespace
	WHERE t.isleaf ORDER BY n.nspname, c.relname`

// birthPartitions returns the leaves of the birth table that hold births, with their id bounds, in tx's snapshot.
func (s *Store) birthPartitions(ctx context.Context, tx pgx.Tx) ([]birthPartition, error) {
	b := s.BirthBinding()
	rows, err := tx.Query(ctx, birthPartitionsSQL, Quote(b.Table))
	if err != nil {
		return nil, fmt.Errorf("list the birth table's partitions: %w", err)
	}
	leaves, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (pgx.Identifier, error) {
		var schema, name string
		err := r.Scan(&schema, &name)
		return pgx.Identifier{schema, name}, err
	})
	if err != nil {
		return nil, fmt.Errorf("list the birth table's partitions: %w", err)
	}
	if len(leaves) == 0 { // not partitioned (a plain table is no partition tree), or with no partition yet
		leaves = []pgx.Identifier{{b.Table}}
	}
	var parts []birthPartition
	for _, leaf := range leaves {
		n := b.Names()
		n["part"] = leaf
		var minID, maxID *int64
		if err := tx.QueryRow(ctx, n.SQL(`SELECT min({id}), max({id}) FROM {part}`)).Scan(&minID, &maxID); err != nil {
			return nil, fmt.Errorf("id bounds of %s: %w", quote(leaf), err)
		}
		if minID != nil {
			parts = append(parts, birthPartition{name: leaf, minID: *minID, maxID: *maxID})
		}
	}
	return parts, nil
}

// determinismSample bounds the ids the self-check recomputes, so it costs a few percent of a capture.
const determinismSample = 20_000

// errNondeterministic marks a capture whose recomputation differs from itself under one database snapshot.
var errNondeterministic = errors.New("snapshot capture is nondeterministic")

// nondeterminismHook lets tests perturb the self-check of one store (tests run in parallel, each with its own
// store, so the hook must say whose capture it perturbs); nil in production.
var nondeterminismHook func(*Store, gcos.Fingerprint) gcos.Fingerprint

// checkDeterminism recomputes the first batch split in two halves under the same database snapshot: the combined
// halves must equal the whole, exactly as the batch computed it. A difference means the hash depends on something
// other than row content (a session setting, a volatile column), and no snapshot from this capture can be trusted.
func (s *Store) checkDeterminism(ctx context.Context, tx pgx.Tx, sql string, lo, hi int64) error {
	hi = min(hi, lo+determinismSample)
	whole, err := fingerprintRange(ctx, tx, sql, lo, hi)
	if err != nil {
		return err
	}
	mid := lo + (hi-lo)/2
	left, err := fingerprintRange(ctx, tx, sql, lo, mid)
	if err != nil {
		return err
	}
	right, err := fingerprintRange(ctx, tx, sql, mid, hi)
	if err != nil {
		return err
	}
	combined := left.Add(right)
	if nondeterminismHook != nil {
		combined = nondeterminismHook(s, combined)
	}
	if combined != whole {
		return fmt.Errorf("%w: ids [%d,%d) hash to %s whole but %s in two halves", errNondeterministic, lo, hi, whole, combined)
	}
	return nil
}

// fingerprintRange is the sum of all group fingerprints of one id range.
func fingerprintRange(ctx context.Context, tx pgx.Tx, sql string, lo, hi int64) (gcos.Fingerprint, error) {
	rows, err := tx.Query(ctx, sql, lo, hi)
	if err != nil {
		return gcos.Fingerprint{}, fmt.Errorf("determinism check [%d,%d): %w", lo, hi, err)
	}
	defer rows.Close()
	var total gcos.Fingerprint
	for rows.Next() {
		var g gcos.BaseGroup
		var l, h string
		if err := rows.Scan(&g.ObjectClass, &g.SourceRegistry, &g.LifecycleStatus, &g.Count, &g.MaxBornAt, &g.MaxID, &l, &h, &g.NewestXID); err != nil {
			return gcos.Fingerprint{}, err
		}
		f, err := gcos.FingerprintFromSums(l, h)
		if err != nil {
			return gcos.Fingerprint{}, err
		}
		total = total.Add(f)
	}
	return total, rows.Err()
}

func collect(ch <-chan error) []error {
	var out []error
	for err := range ch {
		out = append(out, err)
	}
	return out
}

func sessionSettings(ctx context.Context, tx pgx.Tx, timeout time.Duration) error {
	// UTC and ISO make a row's text form (and so its hash) independent of the session's settings.
	// The batches are parallelised by GCOS itself (one connection per worker), so no parallel plans or JIT.
	// The timeout is rounded up to whole milliseconds: truncated, a sub-millisecond one would become 0, which
	// PostgreSQL reads as "no timeout" (fail open).
	ms := max(1, (timeout+time.Millisecond-1)/time.Millisecond)
	_, err := tx.Exec(ctx, fmt.Sprintf(`SET LOCAL TimeZone = 'UTC'; SET LOCAL DateStyle = 'ISO, YMD'; SET LOCAL statement_timeout = %d;
		SET LOCAL jit = off; SET LOCAL max_parallel_workers_per_gather = 0; SET LOCAL work_mem = '64MB';
		SET LOCAL plan_cache_mode = force_custom_plan`, int64(ms)))
	if err != nil {
		return fmt.Errorf("session settings: %w", err)
	}
	return nil
}

// CaptureSnapshot captures a source snapshot: per group {count, max_born_at, max_id, content_hash} over the birth
// inventory in keyset batches, the delta against the previous snapshot of the same scope, and one immutable
// evolution_snapshots row plus one audit row. A capture that fails writes nothing but a snapshot_capture_failed
// finding, so a partial snapshot can never be referenced.
func (s *Store) CaptureSnapshot(ctx context.Context, opts CaptureOptions) (Snapshot, error) {
	if err := validSnapshotScope(opts.Scope); err != nil {
		return Snapshot{}, err // bad input: a clear error and no finding (nothing was attempted)
	}
	snap, err := s.captureSnapshot(ctx, opts)
	if errors.Is(err, errNondeterministic) {
		_, ferr := s.RaiseFinding(context.WithoutCancel(ctx), gcos.Finding{
			Type: gcos.IssueSnapshotNondeterministic, Subject: opts.Scope, RunID: opts.RunID,
			Evidence: map[string]any{"scope": opts.Scope, "run_id": opts.RunID, "error": err.Error(), "effect": "ruleset activation frozen until resolved"},
		})
		return Snapshot{}, errors.Join(fmt.Errorf("capture snapshot: %w", err), ferr)
	}
	if err != nil {
		_, ferr := s.RaiseFinding(context.WithoutCancel(ctx), gcos.Finding{
			Type: gcos.IssueSnapshotCaptureFailed, Subject: opts.Scope, RunID: opts.RunID,
			Evidence: map[string]any{"scope": opts.Scope, "run_id": opts.RunID, "error": err.Error()},
		})
		return Snapshot{}, errors.Join(fmt.Errorf("capture snapshot: %w", err), ferr)
	}
	for _, t := range []gcos.IssueType{gcos.IssueSnapshotCaptureFailed, gcos.IssueSnapshotNondeterministic} {
		if _, err := s.ResolveFinding(ctx, t, opts.Scope, ""); err != nil {
			return snap, err
		}
	}
	return snap, nil
}

func validSnapshotScope(scope string) error {
	switch scope {
	case SnapshotBackfill, SnapshotAudit, SnapshotScan:
		return nil
	}
	return gcos.Errorf(gcos.EINVALID, "snapshot scope %s is not one of %s, %s, %s", gcos.Quote(scope), SnapshotBackfill, SnapshotAudit, SnapshotScan)
}

func (s *Store) captureSnapshot(ctx context.Context, opts CaptureOptions) (Snapshot, error) {
	if opts.BatchSize <= 0 {
		opts.BatchSize = int64(s.cfg.Snapshot.BatchSize)
	}
	if opts.StatementTimeout <= 0 {
		opts.StatementTimeout = s.cfg.Snapshot.StatementTimeout.Duration()
	}
	if opts.Workers <= 0 {
		opts.Workers = 2
	}
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return Snapshot{}, err
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	// The first statement takes the transaction's snapshot; clock_timestamp() is read after it was taken.
	var cut SnapshotCut
	if err := tx.QueryRow(ctx, `SELECT clock_timestamp(), pg_current_snapshot()::text`).Scan(&cut.At, &cut.Snapshot); err != nil {
		return Snapshot{}, fmt.Errorf("capture snapshot: the cut: %w", err)
	}
	if err := sessionSettings(ctx, tx, opts.StatementTimeout); err != nil {
		return Snapshot{}, err
	}
	regs, err := s.DimensionRegistries(ctx, tx, opts.RulesetVersion)
	if err != nil {
		return Snapshot{}, err
	}
	parts, err := s.birthPartitions(ctx, tx)
	if err != nil {
		return Snapshot{}, err
	}
	bases := map[baseKey]*gcos.BaseGroup{}
	var batches int
	t0 := time.Now()
	if len(parts) > 0 {
		if bases, batches, err = s.captureBatches(ctx, tx, parts, opts); err != nil {
			return Snapshot{}, err
		}
	}
	s.logger.Debug("snapshot: batches read", "scope", opts.Scope, "partitions", len(parts), "batches", batches, "elapsed", time.Since(t0))
	snap := Snapshot{Scope: opts.Scope, Registries: regs, Metrics: SnapshotMetrics{
		RunID: opts.RunID, RulesetVersion: opts.RulesetVersion, Groups: map[string]SnapshotGroup{}, Cut: &cut,
		RowHash: s.BirthBinding().rowHashName(),
	}}
	keys := make([]baseKey, 0, len(bases))
	for k := range bases {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		return a.Class < b.Class || (a.Class == b.Class && (a.registry < b.registry || (a.registry == b.registry && a.lifecycle < b.lifecycle)))
	})
	for _, k := range keys {
		base := bases[k]
		snap.Metrics.Totals.Births += base.Count
		for _, d := range regs.Dimensions(*base) {
			g := gcos.NewGroup(d, base.Count)
			snap.Groups = append(snap.Groups, g)
			snap.Metrics.Groups[g.Key] = SnapshotGroup{Count: base.Count, MaxBornAt: base.MaxBornAt.UTC(), MaxID: base.MaxID,
				ContentHash: base.ContentHash.String(), SourceRegistry: base.SourceRegistry, Inputs: regs.GroupInputs(d),
				NewestXID: base.NewestXID}
		}
	}
	snap.Metrics.Totals.Groups = len(snap.Metrics.Groups)
	snap.Metrics.Totals.BaseGroups = len(bases)
	snap.Metrics.Totals.Scopes = len(regs.ScopeCodes())
	snap.Metrics.Totals.Batches = batches
	if opts.CheckKeptCounts {
		if snap.KeptDrift, snap.keptCountedAt, err = s.keptCountDrift(ctx, tx, bases); err != nil {
			return Snapshot{}, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return Snapshot{}, fmt.Errorf("finish read: %w", err)
	}

	s.logger.Debug("snapshot: groups built", "groups", len(snap.Groups), "elapsed", time.Since(t0))
	defer func() { s.logger.Debug("snapshot: written", "elapsed", time.Since(t0)) }()
	err = s.InTx(ctx, func(wtx pgx.Tx) error {
		// Serialise writers of one scope so "previous snapshot" is well defined.
		if _, err := wtx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('gcos.snapshot:' || $1, 0))`, opts.Scope); err != nil {
			return err
		}
		prev, err := latestSnapshot(ctx, wtx, opts.Scope)
		if err != nil && gcos.ErrorCode(err) != gcos.ENOTFOUND {
			return err
		}
		snap.Delta = deltaOf(prev, snap.Metrics)
		if opts.ReuseUnchanged && prev != nil && len(snap.Delta.Groups) == 0 {
			prev.Groups, prev.Registries, prev.Reused, prev.KeptDrift, prev.keptCountedAt = snap.Groups, snap.Registries, true, snap.KeptDrift, snap.keptCountedAt
			snap = *prev
			// The reused capture's own audit row (GCOS's rows only: recorded in governance_audit_row).
			err := wtx.QueryRow(ctx, `SELECT coalesce(max(r.id), 0) FROM registry_changelog r
				JOIN governance_audit_row a ON a.changelog_id = r.id
				WHERE r.entity_type = 'governance_snapshot' AND r.action = 'capture' AND r.entity_code = $1`,
				fmt.Sprint(snap.ID)).Scan(&snap.AuditID)
			if err != nil {
				return fmt.Errorf("find the capture's audit row: %w", err)
			}
			return nil
		}
		metricsJSON, err := json.Marshal(snap.Metrics)
		if err != nil {
			return err
		}
		deltaJSON, err := json.Marshal(snap.Delta)
		if err != nil {
			return err
		}
		notes := opts.Notes
		if notes == "" {
			notes = fmt.Sprintf("gcos run %s: %d batches of %d ids", opts.RunID, batches, opts.BatchSize)
		}
		if err := wtx.QueryRow(ctx, `
			INSERT INTO evolution_snapshots (snapshot_at, scope, metrics, delta_previous, notes)
			VALUES (now(), $1, $2, $3, $4) RETURNING id, snapshot_at`,
			opts.Scope, metricsJSON, deltaJSON, notes).Scan(&snap.ID, &snap.SnapshotAt); err != nil {
			return fmt.Errorf("write snapshot: %w", err)
		}
		if _, err := wtx.Exec(ctx, sealSnapshotSQL, snap.ID); err != nil {
			return fmt.Errorf("seal snapshot %d: %w", snap.ID, err)
		}
		changed := 0
		for _, d := range snap.Delta.Groups {
			if d.FingerprintChanged {
				changed++
			}
		}
		snap.AuditID, err = Audit(ctx, wtx, AuditEntry{EntityType: "governance_snapshot", EntityCode: fmt.Sprint(snap.ID), Action: "capture",
			Detail: map[string]any{"scope": opts.Scope, "run_id": opts.RunID, "births": snap.Metrics.Totals.Births,
				"groups": snap.Metrics.Totals.Groups, "groups_changed": changed, "previous_snapshot_id": snap.Delta.PreviousSnapshotID}})
		if err != nil {
			return err
		}
		// The snapshot stream's heartbeat: its subject is the scope, so the cooldown spaces out a busy scope's.
		return AnnounceTx(ctx, wtx, Emit{EventType: EventSnapshotCaptured, SubjectTable: "evolution_snapshots",
			SubjectRef: opts.Scope, CollectionName: "evolution_snapshots", EntityCode: fmt.Sprint(snap.ID),
			CorrelationID: fmt.Sprintf("snapshot:%d:captured", snap.ID),
			Payload: map[string]any{"snapshot_id": snap.ID, "scope": opts.Scope, "run_id": opts.RunID,
				"groups": snap.Metrics.Totals.Groups, "count": changed, "audit_id": snap.AuditID}})
	})
	if err != nil {
		return Snapshot{}, err
	}
	return snap, nil
}

// sealSnapshotSQL seals a captured snapshot in the capture's transaction (migration 022): its digest, kept in a table
// whose rows can never be updated or deleted.
const sealSnapshotSQL = `
INSERT INTO gcos_snapshot_seal (snapshot_id, scope, digest)
SELECT id, scope, gcos_snapshot_digest(id, snapshot_at, scope, metrics, delta_previous, notes)
FROM evolution_snapshots WHERE id = $1`

// deltaOf compares a capture with the previous snapshot of its scope: groups whose fingerprint changed, appeared
// or vanished. Unchanged groups are left out.
func deltaOf(prev *Snapshot, cur SnapshotMetrics) SnapshotDelta {
	d := SnapshotDelta{Groups: map[string]GroupDelta{}}
	if prev == nil {
		for k, g := range cur.Groups {
			d.Groups[k] = GroupDelta{CountDelta: g.Count, NewMaxID: g.MaxID, FingerprintChanged: true, Appeared: true}
		}
		return d
	}
	d.PreviousSnapshotID = &prev.ID
	for k, g := range cur.Groups {
		p, ok := prev.Metrics.Groups[k]
		switch {
		case !ok:
			d.Groups[k] = GroupDelta{CountDelta: g.Count, NewMaxID: g.MaxID, FingerprintChanged: true, Appeared: true}
		case p.ContentHash != g.ContentHash || p.Count != g.Count:
			d.Groups[k] = GroupDelta{CountDelta: g.Count - p.Count, NewMaxID: g.MaxID, FingerprintChanged: true}
		}
	}
	for k, p := range prev.Metrics.Groups {
		if _, ok := cur.Groups[k]; !ok {
			d.Groups[k] = GroupDelta{CountDelta: -p.Count, FingerprintChanged: true, Vanished: true}
		}
	}
	return d
}

const SnapshotColumns = `id, snapshot_at, scope, metrics, coalesce(delta_previous, '{}'::jsonb)`

// ScanSnapshot reads one evolution_snapshots row.
func ScanSnapshot(row pgx.Row) (Snapshot, error) {
	var s Snapshot
	var metrics, delta []byte
	if err := row.Scan(&s.ID, &s.SnapshotAt, &s.Scope, &metrics, &delta); err != nil {
		return Snapshot{}, err
	}
	if err := json.Unmarshal(metrics, &s.Metrics); err != nil {
		return Snapshot{}, fmt.Errorf("snapshot %d metrics: %w", s.ID, err)
	}
	if err := json.Unmarshal(delta, &s.Delta); err != nil {
		return Snapshot{}, fmt.Errorf("snapshot %d delta: %w", s.ID, err)
	}
	return s, nil
}

func latestSnapshot(ctx context.Context, q Querier, scope string) (*Snapshot, error) {
	s, err := ScanSnapshot(q.QueryRow(ctx, `SELECT `+SnapshotColumns+` FROM evolution_snapshots WHERE scope = $1 ORDER BY id DESC LIMIT 1`, scope))
	if err != nil {
		return nil, MapError(err, "latest snapshot of "+scope)
	}
	return &s, nil
}

// latestSnapshot returns the newest snapshot of a scope (ENOTFOUND when there is none).
func (s *Store) latestSnapshot(ctx context.Context, scope string) (Snapshot, error) {
	snap, err := latestSnapshot(ctx, s.pool, scope)
	if err != nil {
		return Snapshot{}, err
	}
	return *snap, nil
}

// GetSnapshot returns one snapshot by id (ENOTFOUND when absent, e.g. pruned).
func (s *Store) GetSnapshot(ctx context.Context, id int64) (Snapshot, error) {
	snap, err := ScanSnapshot(s.pool.QueryRow(ctx, `SELECT `+SnapshotColumns+` FROM evolution_snapshots WHERE id = $1 AND scope LIKE 'governance.%'`, id))
	if err != nil {
		return Snapshot{}, MapError(err, fmt.Sprintf("snapshot %d", id))
	}
	return snap, nil
}

// SnapshotInfo is a snapshot's list entry (without the group map).
type SnapshotInfo struct {
	ID         int64          `json:"id"`
	SnapshotAt time.Time      `json:"snapshot_at"`
	Scope      string         `json:"scope"`
	RunID      string         `json:"run_id"`
	Ruleset    string         `json:"ruleset_version"`
	Totals     SnapshotTotals `json:"totals"`
	Changed    int            `json:"groups_changed"`
}

// ListSnapshots lists GCOS's snapshots, newest first.
func (s *Store) ListSnapshots(ctx context.Context, limit int) ([]SnapshotInfo, error) {
	limit, err := CheckLimit("limit", limit, DefaultSnapshotLimit, MaxSnapshotLimit)
	if err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `
		SELECT id, snapshot_at, scope, coalesce(metrics->>'run_id', ''), coalesce(metrics->>'ruleset_version', ''),
		       coalesce(metrics->'totals', '{}'::jsonb),
		       (SELECT count(*) FROM jsonb_each(coalesce(delta_previous->'groups', '{}'::jsonb)) e
		        WHERE (e.value->>'fingerprint_changed')::boolean)
		FROM evolution_snapshots WHERE scope LIKE 'governance.%' ORDER BY id DESC LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (SnapshotInfo, error) {
		var i SnapshotInfo
		var totals []byte
		if err := r.Scan(&i.ID, &i.SnapshotAt, &i.Scope, &i.RunID, &i.Ruleset, &totals, &i.Changed); err != nil {
			return i, err
		}
		return i, json.Unmarshal(totals, &i.Totals)
	})
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	return out, nil
}

// MovedAfter returns the groups whose rows (group or candidate state) a transaction that committed after the cut
// wrote, as the change feed records them (gcos_change_feed): what they hold now is newer than the snapshot. Without
// a cut (a snapshot from before cuts were recorded), or when the feed was pruned past it, nothing is known to have
// moved and the caller compares everything (it may then report a drift that was only in flight).
func MovedAfter(ctx context.Context, q Querier, cut *SnapshotCut) (map[string]bool, error) {
	moved := map[string]bool{}
	if cut == nil {
		return moved, nil
	}
	rows, err := q.Query(ctx, `
		SELECT DISTINCT f.key FROM gcos_change_feed f, gcos_change_feed_horizon h
		WHERE h.pruned_below <= pg_snapshot_xmin($1::pg_snapshot)
		  AND f.xid >= pg_snapshot_xmin($1::pg_snapshot) AND NOT pg_visible_in_snapshot(f.xid, $1::pg_snapshot)
		  AND f.kind IN ('group', 'state')`, cut.Snapshot)
	if err != nil {
		return nil, fmt.Errorf("read what moved after the cut: %w", err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read what moved after the cut: %w", err)
	}
	for _, k := range keys {
		moved[k] = true
	}
	return moved, nil
}
