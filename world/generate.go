package world

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrNotEmpty is returned (wrapped) by Generate when a table it would fill already has rows.
var ErrNotEmpty = errors.New("world: substrate tables are not empty")

// Options configures Generate. The zero value generates the live-sized world of seed 1.
type Options struct {
	// Births is the number of births (not counting Children); 0 means DefaultBirths. It must be at least MinBirths.
	Births int
	// Changes is the number of registry_changelog history rows; 0 means DefaultChanges, negative means none.
	Changes int
	// Children, when positive, adds that many inherited children under one container (see AddChildren).
	Children int
	// Seed selects the world; 0 means 1. The same seed and sizes give byte-identical rows.
	Seed uint64
	// Progress receives progress: a progress bar when it is a terminal, one line per phase otherwise; nil for none.
	Progress io.Writer
	// Logger receives phase timings at debug level; nil discards them.
	Logger *slog.Logger

	streams int // COPY streams for the births; 0 chooses (tests force it)
}

func (o *Options) normalize() error {
	if o.Births == 0 {
		o.Births = DefaultBirths
	}
	if o.Births < MinBirths {
		return fmt.Errorf("world: births must be at least %d (one per entity type), got %d", MinBirths, o.Births)
	}
	if o.Births > 1<<31-1 {
		return fmt.Errorf("world: births must be below 2^31, got %d", o.Births)
	}
	if o.Changes == 0 {
		o.Changes = DefaultChanges
	}
	if o.Changes < 0 {
		o.Changes = 0
	}
	if o.Children < 0 {
		return fmt.Errorf("world: children must not be negative, got %d", o.Children)
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Summary describes a generated world.
type Summary struct {
	// Seed is the seed the world was drawn from.
	Seed uint64 `json:"seed"`
	// Births is the number of birth_registry rows written, children included.
	Births int64 `json:"births"`
	// Children is the number of inherited children written.
	Children int64 `json:"children"`
	// Container is the parent of the children; nil when no children were added.
	Container *Ref `json:"container,omitempty"`
	// Tables maps each table written to its number of rows.
	Tables map[string]int64 `json:"tables"`
	// Collections lists the birth collections, largest first.
	Collections []CollectionCount `json:"collections"`
	// Statuses maps each birth status to its number of births, children included.
	Statuses map[string]int64 `json:"statuses"`
	// Elapsed is the wall time of the whole generation (planning, COPY, commit, ANALYZE); nanoseconds in JSON.
	Elapsed time.Duration `json:"elapsed_ns"`
	// RowsPerSecond is the total rows written divided by Elapsed.
	RowsPerSecond float64 `json:"rows_per_second"`
}

// CollectionCount is the size of one birth collection.
type CollectionCount struct {
	// Collection is the collection_name.
	Collection string `json:"collection"`
	// CoverageStatus is the collection's coverage_status in collection_registry; empty for the collection that
	// collection_registry does not list.
	CoverageStatus string `json:"coverage_status,omitempty"`
	// ScopeClass is the collection's scope_class; empty like CoverageStatus.
	ScopeClass string `json:"scope_class,omitempty"`
	// EntityTypes is the number of entity types meta_catalog places in the collection.
	EntityTypes int `json:"entity_types"`
	// Births is the number of births in the collection, children included.
	Births int64 `json:"births"`
}

// TotalRows is the number of rows written to all tables.
func (s Summary) TotalRows() int64 {
	var n int64
	for _, v := range s.Tables {
		n += v
	}
	return n
}

// String is a one-line account of the world.
func (s Summary) String() string {
	var st []string
	for _, k := range statuses {
		if s.Statuses[k] > 0 {
			st = append(st, fmt.Sprintf("%s %d", k, s.Statuses[k]))
		}
	}
	return fmt.Sprintf("seed %d: %d births (%d children) over %d collections [%s], %d rows in %d tables in %s (%.0f rows/s)",
		s.Seed, s.Births, s.Children, len(s.Collections), strings.Join(st, ", "), s.TotalRows(), len(s.Tables),
		s.Elapsed.Round(time.Millisecond), s.RowsPerSecond)
}

// filledTables are the tables Generate writes; each must be empty beforehand.
var filledTables = []string{
	"birth_registry", "registry_changelog", "collection_registry", "meta_catalog", "measurement_registry",
	"pivot_definitions", "law_jurisdiction", "normative_registry", "law_catalog", "governance_docs",
	"governance_responsibility_scope", "governance_coverage_profile", "governance_object_ownership",
	"governance_exception", "event_type_registry", "event_subscription", "queue_heartbeat", "iu_route_worker_cursor",
}

// serialTables are the filled tables whose id comes from a sequence; Generate moves each sequence to max(id).
var serialTables = []string{"birth_registry", "registry_changelog", "governance_object_ownership"}

// Generate fills the substrate tables with the synthetic world of opts.Seed: births over 78 collections, the
// registries, the change history and the event substrate (see the package documentation). It loads everything with
// COPY: worlds under 400,000 births in one transaction; larger ones split their births over parallel COPY streams
// (one per CPU, at most 4, each in its own transaction), committed one after the other once every stream has loaded,
// so a failure while loading leaves nothing behind (only a failed commit can leave a partial world, and says so).
// Children, when asked for, are added afterwards in their own transaction, as by AddChildren. Finally the big
// tables are ANALYZEd. Generate refuses, with an error wrapping ErrNotEmpty, when birth_registry or another table it
// fills already has rows; concurrent calls on one database are serialized by an advisory lock.
func Generate(ctx context.Context, pool *pgxpool.Pool, opts Options) (Summary, error) {
	start := time.Now()
	if err := opts.normalize(); err != nil {
		return Summary{}, err
	}
	log := opts.Logger.With("system", "world")

	plan := newBirthPlan(opts.Births, opts.Seed)
	small := registryTables()
	// The history is drawn while the births load.
	history := make(chan table, 1)
	go func() { history <- changelogTable(plan, opts.Changes, opts.Seed) }()
	log.Debug("world planned", "births", opts.Births, "elapsed", time.Since(start))

	prog := newProgress(opts.Progress, int64(opts.Births+opts.Changes+opts.Children), "generating world")
	defer prog.finish()

	sum := Summary{Seed: opts.Seed, Tables: map[string]int64{}}
	streams := opts.streams
	if streams <= 0 {
		streams = streamsFor(pool, opts.Births)
	}
	if err := load(ctx, pool, plan, small, history, streams, prog, log, sum.Tables); err != nil {
		return Summary{}, err
	}

	var children *childResult
	if opts.Children > 0 {
		t0 := time.Now()
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var err error
			children, err = addChildren(ctx, tx, opts.Children, opts.Seed, false, prog.add)
			return err
		})
		if err != nil {
			return Summary{}, fmt.Errorf("world: the world was generated, but adding its children failed: %w", err)
		}
		sum.Tables["birth_registry"] += children.rows
		log.Debug("children copied", "rows", children.rows, "elapsed", time.Since(t0))
		prog.phase("children loaded")
	}
	prog.finish()

	t0 := time.Now()
	for _, name := range []string{"birth_registry", "registry_changelog"} {
		if _, err := pool.Exec(ctx, "ANALYZE "+pgx.Identifier{name}.Sanitize()); err != nil {
			return Summary{}, fmt.Errorf("world: analyze %s: %w", name, err)
		}
	}
	log.Debug("analyzed", "elapsed", time.Since(t0))

	sum.fill(plan, children)
	sum.Elapsed = time.Since(start)
	if s := sum.Elapsed.Seconds(); s > 0 {
		sum.RowsPerSecond = float64(sum.TotalRows()) / s
	}
	log.Info("world generated", "seed", sum.Seed, "births", sum.Births, "children", sum.Children,
		"rows", sum.TotalRows(), "elapsed", sum.Elapsed.Round(time.Millisecond),
		"rows_per_s", int64(sum.RowsPerSecond))
	return sum, nil
}

// Births are split into parallel COPY streams only when each stream gets at least minStreamBirths.
const (
	minStreamBirths = 200_000
	maxStreams      = 4
)

// streamsFor returns how many COPY streams load n births: one per CPU, at most maxStreams, never more than the
// pool's connections, and at least minStreamBirths births each.
func streamsFor(pool *pgxpool.Pool, n int) int {
	k := min(runtime.NumCPU(), maxStreams, int(pool.Config().MaxConns), n/minStreamBirths)
	return max(k, 1)
}

// load writes the registries, the births (split over streams transactions) and the history (received from history
// once drawn), and commits.
func load(ctx context.Context, pool *pgxpool.Pool, plan *birthPlan, small []table, history <-chan table, streams int,
	prog *progress, log *slog.Logger, counts map[string]int64) error {
	main, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("world: begin: %w", err)
	}
	defer func() { _ = main.Rollback(context.WithoutCancel(ctx)) }()
	if err := claimEmpty(ctx, main); err != nil {
		return err
	}
	for _, t := range small {
		n, err := main.CopyFrom(ctx, pgx.Identifier{t.name}, t.cols, pgx.CopyFromRows(t.rows))
		if err != nil {
			return fmt.Errorf("world: copy %s: %w", t.name, err)
		}
		counts[t.name] = n
	}
	prog.phase("registries loaded")

	// Births: stream 0 in the main transaction, the others each in their own, started now and committed later.
	t0 := time.Now()
	bounds := make([]int, streams+1)
	for k := range bounds {
		bounds[k] = plan.n() * k / streams
	}
	type result struct {
		tx  pgx.Tx
		n   int64
		err error
	}
	results := make([]chan result, streams)
	for k := 1; k < streams; k++ {
		results[k] = make(chan result, 1)
		go func(k int) {
			tx, err := pool.Begin(ctx)
			if err != nil {
				results[k] <- result{err: fmt.Errorf("world: begin births stream %d: %w", k, err)}
				return
			}
			n, err := tx.CopyFrom(ctx, pgx.Identifier{"birth_registry"}, birthColumns,
				newBirthSource(plan, bounds[k], bounds[k+1], prog.add))
			if err != nil {
				err = fmt.Errorf("world: copy birth_registry ids %d..%d: %w", bounds[k]+1, bounds[k+1], err)
			}
			results[k] <- result{tx: tx, n: n, err: err}
		}(k)
	}
	var others []pgx.Tx
	defer func() {
		for _, tx := range others {
			_ = tx.Rollback(context.WithoutCancel(ctx)) // a no-op once committed
		}
	}()
	n, firstErr := main.CopyFrom(ctx, pgx.Identifier{"birth_registry"}, birthColumns,
		newBirthSource(plan, bounds[0], bounds[1], prog.add))
	if firstErr != nil {
		firstErr = fmt.Errorf("world: copy birth_registry ids %d..%d: %w", bounds[0]+1, bounds[1], firstErr)
	}
	var hist int64
	if firstErr == nil {
		t1 := time.Now()
		h := <-history
		hist, firstErr = main.CopyFrom(ctx, pgx.Identifier{h.name}, h.cols, pgx.CopyFromRows(h.rows))
		if firstErr != nil {
			firstErr = fmt.Errorf("world: copy registry_changelog: %w", firstErr)
		}
		prog.add(int(hist))
		log.Debug("changelog copied", "rows", hist, "elapsed", time.Since(t1))
	}
	for k := 1; k < streams; k++ {
		res := <-results[k]
		if res.tx != nil {
			others = append(others, res.tx)
		}
		if res.err != nil && firstErr == nil {
			firstErr = res.err
		}
		n += res.n
	}
	if firstErr != nil {
		return firstErr
	}
	counts["birth_registry"] = n
	counts["registry_changelog"] = hist
	log.Debug("births copied", "rows", n, "streams", streams, "elapsed", time.Since(t0))
	prog.phase("births and change history loaded")

	// Every stream has loaded: commit them, then the main transaction (which holds the claim on the empty tables).
	for k, tx := range others {
		if err := tx.Commit(ctx); err != nil {
			if k == 0 {
				return fmt.Errorf("world: commit births stream %d: %w", k+1, err)
			}
			return fmt.Errorf("world: commit births stream %d: %w (the world is partial: drop the database and "+
				"generate again)", k+1, err)
		}
	}
	if err := syncSequences(ctx, main, serialTables...); err != nil {
		return err
	}
	if _, err := main.Exec(ctx, pinExceptionsSQL); err != nil {
		return fmt.Errorf("world: pin exceptions to their objects: %w", err)
	}
	if err := main.Commit(ctx); err != nil {
		if len(others) > 0 {
			return fmt.Errorf("world: commit: %w (the world is partial: drop the database and generate again)", err)
		}
		return fmt.Errorf("world: commit: %w", err)
	}
	return nil
}

// generateLockKey is the advisory lock that serializes concurrent Generate calls on one database.
const generateLockKey = "gcos.world.generate"

// claimEmpty takes the generate lock for the rest of the transaction and refuses when any table Generate fills has
// rows. (A table lock would block the parallel COPY streams, so an advisory lock serializes generators instead.)
func claimEmpty(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", generateLockKey); err != nil {
		return fmt.Errorf("world: take the generate lock: %w", err)
	}
	var parts []string
	for _, name := range filledTables {
		id := pgx.Identifier{name}.Sanitize()
		parts = append(parts, fmt.Sprintf("SELECT %s::text WHERE EXISTS (SELECT 1 FROM %s)", quoteLiteral(name), id))
	}
	rows, err := tx.Query(ctx, strings.Join(parts, " UNION ALL "))
	if err != nil {
		return fmt.Errorf("world: check that the substrate tables are empty: %w", err)
	}
	nonEmpty, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("world: check that the substrate tables are empty: %w", err)
	}
	if len(nonEmpty) > 0 {
		return fmt.Errorf("%w: refusing to generate a world over existing rows in %s (use a fresh database)",
			ErrNotEmpty, strings.Join(nonEmpty, ", "))
	}
	return nil
}

// quoteLiteral quotes a constant identifier-like string as an SQL literal.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// syncSequences moves each table's id sequence to max(id), so later inserts continue after the explicit ids.
func syncSequences(ctx context.Context, tx pgx.Tx, tables ...string) error {
	for _, name := range tables {
		q := fmt.Sprintf("SELECT setval(pg_get_serial_sequence(%s, 'id'), max(id)) FROM %s",
			quoteLiteral(name), pgx.Identifier{name}.Sanitize())
		if _, err := tx.Exec(ctx, q); err != nil {
			return fmt.Errorf("world: advance the id sequence of %s: %w", name, err)
		}
	}
	return nil
}

// fill computes the births per collection and per status.
func (s *Summary) fill(p *birthPlan, children *childResult) {
	s.Births = int64(len(p.typ))
	s.Statuses = map[string]int64{}
	for _, st := range p.status {
		s.Statuses[statuses[st]]++
	}
	for c, spec := range bornCollections {
		cov, sc, _ := spec.kind.registryColumns()
		s.Collections = append(s.Collections, CollectionCount{Collection: spec.name, CoverageStatus: cov,
			ScopeClass: sc, EntityTypes: len(p.shape.typesOf[c]), Births: int64(p.shape.collectionSizes[c])})
	}
	if children != nil {
		s.Children = children.children
		s.Births += children.rows
		s.Statuses[statusActive] += children.rows
		ref := children.container
		s.Container = &ref
		for i := range s.Collections {
			if s.Collections[i].Collection == ref.Collection {
				s.Collections[i].Births += children.rows
			}
		}
	}
	sort.SliceStable(s.Collections, func(a, b int) bool { return s.Collections[a].Births > s.Collections[b].Births })
}

// pinExceptionsSQL pins each exception on one object to that object's fingerprint as GCOS reads it (SPEC §12: an
// exception holds only while the excepted object's fingerprint matches): the birth row's content hash in the two
// lanes of gcos.Fingerprint, rendered as Fingerprint.String (high lane, then low, 16 hex digits each). The hash is
// GCOS's per-row snapshot hash (postgres rowHashExpr) over this world's column names; a test in the postgres
// package checks that the two agree, so a change to one cannot silently lift every exception of the demo world.
const pinExceptionsSQL = `
UPDATE governance_exception x
SET fingerprint = lpad(to_hex(hashint8extended(f.h, 1)), 16, '0') || lpad(to_hex(f.h), 16, '0')
FROM birth_registry b
CROSS JOIN LATERAL (SELECT hashint8extended(
           hashtextextended(concat_ws(chr(31), b.entity_code, b.collection_name, b.entity_type, b.status,
                                      coalesce(b.canonical_address, chr(30)), coalesce(b.parent_code, chr(30)),
                                      coalesce(b.source_system, chr(30)), coalesce(b.actor_ref, chr(30))), 0)
           # hashint8extended(b.id, 0) # hashfloat8extended(date_part('epoch', b.born_at), 0), 0) AS h) f
WHERE x.entity_code IS NOT NULL AND b.collection_name = x.collection_name AND b.entity_code = x.entity_code`
