package postgres

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"gcos"
	"gcos/postgres/migration"
	"gcos/postgres/substrate"
)

// Store is GCOS's handle on its PostgreSQL database.
type Store struct {
	pool *pgxpool.Pool
	// gatePool answers the gate (its reads and its follow-ups) and nothing else, so readers, scans and intake can
	// never take the connections a gate decision needs. New shares pool; Open opens its own (gate.pool_conns).
	gatePool     *pgxpool.Pool
	logger       *slog.Logger
	cfg          gcos.Config
	rulesetCache rulesetCache
	// txRetries counts transactions that failed on a deadlock or a serialization conflict; their loop retries them.
	txRetries atomic.Int64
	// runMetrics count the scan runs this process finished (ObserveRun).
	runMetrics runMetrics
	// owner names this store's process in role leases: unique per process start, so a restarted process (even
	// with the same pid) takes its roles over with a new epoch instead of renewing a dead holder's lease.
	owner string
	// replica, when configured, is a pool over a streaming replica the gate may read through from (gate/replica.go
	// proves when); nil: none.
	replica *pgxpool.Pool
	// demotions counts the times the pools were dropped because the primary turned read-only.
	demotions atomic.Int64
	// session connects what needs a session of its own (LISTEN); nil: nothing may (a transaction pooler without a
	// session URL), and event scans poll.
	session *pgx.ConnConfig
	// scans are this process's open scan transactions, which the births tail does not wait for (InScanTx).
	scans scanTxs
}

// Databases are the URLs GCOS connects to (secrets: they come from flags or the environment, never the config file).
type Databases struct {
	// URL is the primary, directly or through a pooler (database.pooling says which). A multi-host URL with
	// target_session_attrs=read-write follows a failover to whichever host is the primary now.
	URL string
	// ReplicaURL is a streaming replica of the primary the gate may read through from while it is proven within
	// gate.max_staleness of the primary (RunReplicaMonitor); empty: the gate reads the primary.
	ReplicaURL string
	// SessionURL reaches the same database without a transaction pooler, for what needs a session of its own (the
	// LISTEN that wakes event scans). Empty: URL itself under session pooling; nothing under transaction pooling,
	// where event scans then poll.
	SessionURL string
}

// Open connects to db.URL (and db.SessionURL for session work). The caller closes the Store.
func Open(ctx context.Context, db Databases, cfg gcos.Config, logger *slog.Logger) (*Store, error) {
	pcfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		return nil, gcos.Errorf(gcos.EINVALID, "database url: %v", err)
	}
	pcfg.ConnConfig.RuntimeParams["application_name"] = "gcos"
	if !strings.Contains(db.URL, "pool_max_conns") {
		pcfg.MaxConns = int32(cfg.Database.PoolConns)
	}
	var session *pgx.ConnConfig
	switch {
	case db.SessionURL != "":
		if session, err = pgx.ParseConfig(db.SessionURL); err != nil {
			return nil, gcos.Errorf(gcos.EINVALID, "session database url: %v", err)
		}
		session.RuntimeParams["application_name"] = "gcos-session"
	case cfg.Database.Pooling == gcos.PoolingSession:
		session = pcfg.ConnConfig.Copy()
	}
	if cfg.Database.Pooling == gcos.PoolingTransaction {
		// No named prepared statement may outlive a statement: the pooler hands the server connection on.
		pcfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
		pcfg.ConnConfig.StatementCacheCapacity, pcfg.ConnConfig.DescriptionCacheCapacity = 0, 0
	}
	pcfg.AfterConnect = func(_ context.Context, conn *pgx.Conn) error {
		JSONBytes(conn.TypeMap())
		return nil
	}
	demoted := &demotionTracer{}
	pcfg.ConnConfig.Tracer = demoted
	gcfg := pcfg.Copy()
	gcfg.MaxConns = int32(cfg.Gate.PoolConns)
	gcfg.ConnConfig.RuntimeParams["application_name"] = "gcos-gate"
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, gcos.Errorf(gcos.EUNAVAILABLE, "connect to PostgreSQL: %v", err)
	}
	gatePool, err := pgxpool.NewWithConfig(ctx, gcfg)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect the gate's pool: %w", err)
	}
	s := New(pool, cfg, logger).WithGatePool(gatePool)
	s.session = session
	if db.ReplicaURL != "" {
		rcfg, err := pgxpool.ParseConfig(db.ReplicaURL)
		if err != nil {
			s.Close()
			return nil, gcos.Errorf(gcos.EINVALID, "replica database url: %v", err)
		}
		rcfg.MaxConns = int32(cfg.Gate.PoolConns)
		rcfg.ConnConfig.RuntimeParams["application_name"] = "gcos-replica"
		rcfg.ConnConfig.DefaultQueryExecMode = pcfg.ConnConfig.DefaultQueryExecMode
		rcfg.ConnConfig.StatementCacheCapacity = pcfg.ConnConfig.StatementCacheCapacity
		rcfg.ConnConfig.DescriptionCacheCapacity = pcfg.ConnConfig.DescriptionCacheCapacity
		rcfg.AfterConnect = pcfg.AfterConnect
		replica, err := pgxpool.NewWithConfig(ctx, rcfg)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("connect the replica's pool: %w", err)
		}
		s.replica = replica
	}
	demoted.store.Store(s)
	return s, nil
}

// demotionTracer drops every pooled connection once a statement is refused because the server is read-only
// (SQLSTATE 25006): the primary they lead to was demoted, and a connection opened now (target_session_attrs=
// read-write in a multi-host URL) reaches the one promoted in its place.
type demotionTracer struct {
	store     atomic.Pointer[Store]
	resetting atomic.Bool
}

func (d *demotionTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (d *demotionTracer) TraceQueryEnd(_ context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	s := d.store.Load()
	if s == nil || !IsPgCode(data.Err, "25006") || !d.resetting.CompareAndSwap(false, true) {
		return
	}
	// Not on this goroutine: the connection that failed is still acquired by its caller.
	go func() {
		defer d.resetting.Store(false)
		s.logger.Warn("the database refused a write as read-only (a demoted primary): dropping every pooled connection")
		s.pool.Reset()
		s.gatePool.Reset()
		s.demotions.Add(1)
	}()
}

// JSONBytes makes a []byte or a map argument a JSON document (a []byte would be bytea, a map cannot be encoded). It
// matters only where pgx does not ask the server for the parameter types (exec mode, used under transaction
// pooling): GCOS's schema has no bytea column, and every []byte or map it binds is a document.
func JSONBytes(m *pgtype.Map) {
	m.RegisterDefaultPgType([]byte(nil), "jsonb")
	m.RegisterDefaultPgType(map[string]any(nil), "jsonb")
	m.RegisterDefaultPgType(map[string]string(nil), "jsonb")
}

// Sessions says where GCOS's session work goes and what it gave up, for the daemon's start line.
func (s *Store) Sessions() (where string, listening bool) {
	switch {
	case s.session == nil:
		return "none: database.pooling is transaction and no session URL is set; event scans poll instead of listening for dirty marks", false
	case s.cfg.Database.Pooling == gcos.PoolingTransaction:
		return "the session URL " + identity(s.session) + " (LISTEN for dirty marks); statements through the pooler run in exec mode", true
	default:
		return "the database URL (LISTEN for dirty marks)", true
	}
}

// WithGatePool gives the gate its own pool (call before the store is used; Close closes it too).
func (s *Store) WithGatePool(p *pgxpool.Pool) *Store {
	s.gatePool = p
	return s
}

// GatePools are the pools the gate stage runs on: its own (the store's pool unless WithGatePool gave it one), and
// the streaming replica's it may read through from (nil: none configured). Only the gate stage may take them
// (layering_test.go).
func (s *Store) GatePools() (gate, replica *pgxpool.Pool) { return s.gatePool, s.replica }

// New wraps an existing pool (tests hand one in).
func New(pool *pgxpool.Pool, cfg gcos.Config, logger *slog.Logger) *Store {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	host, _ := os.Hostname()
	s := &Store{pool: pool, gatePool: pool, logger: logger, cfg: cfg, owner: fmt.Sprintf("%s:%d:%s", host, os.Getpid(), rand.Text()[:8]),
		runMetrics: newRunMetrics(), session: pool.Config().ConnConfig.Copy()}
	return s
}

// Pool exposes the connection pool to sibling packages that run their own SQL (workers, tests).
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Logger is the store's logger (the stages log through it).
func (s *Store) Logger() *slog.Logger { return s.logger }

// Owner is the name this store's process holds role leases under.
func (s *Store) Owner() string { return s.owner }

// Config is the configuration the store was opened with.
func (s *Store) Config() gcos.Config { return s.cfg }

// Close releases every connection.
func (s *Store) Close() {
	if s.replica != nil {
		s.replica.Close()
	}
	if s.gatePool != s.pool {
		s.gatePool.Close()
	}
	s.pool.Close()
}

// PrepareOptions says how far Prepare may go.
type PrepareOptions struct {
	CreateSubstrate bool // greenfield only: create absent substrate tables
}

// PrepareResult reports what Prepare did and found.
type PrepareResult struct {
	CreatedSubstrate []string         `json:"created_substrate"`
	Migrated         []int            `json:"migrated"`
	Substrate        substrate.Report `json:"substrate"`
}

// Prepare optionally creates the substrate, verifies it (refusing to go on when a required column is missing),
// and applies GCOS's own migrations.
func (s *Store) Prepare(ctx context.Context, opts PrepareOptions) (PrepareResult, error) {
	var res PrepareResult
	if opts.CreateSubstrate {
		created, err := substrate.Create(ctx, s.pool)
		if err != nil {
			return res, err
		}
		res.CreatedSubstrate = created
	}
	rep, err := substrate.Verify(ctx, s.pool, substrate.Bound(s.cfg.SourceBinding))
	if err != nil {
		return res, err
	}
	res.Substrate = rep
	if err := rep.Err(); err != nil {
		return res, gcos.Errorf(gcos.EINVALID, "%v", err)
	}
	for _, stmt := range rep.MissingIndexes {
		s.logger.Warn("substrate index missing; run it to keep GCOS fast", "statement", stmt)
	}
	if d := gcos.Degradations(rep.AbsentOptional); len(d) > 0 {
		s.logger.Warn("optional registries absent: their dimensions degrade and nothing is guessed", "absent", strings.Join(rep.AbsentOptional, ", "),
			"degrades", strings.Join(d, "; "))
	}
	m, err := migration.New(s.pool)
	if err != nil {
		return res, err
	}
	applied, err := m.Up(ctx)
	if err != nil {
		return res, err
	}
	res.Migrated = applied
	return res, nil
}

// InTx runs fn in one transaction; under a Fenced context the commit first checks the role's lease. A stage that
// writes candidate state does it in one of these.
func (s *Store) InTx(ctx context.Context, fn func(pgx.Tx) error) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if l := leaseOf(ctx); l != nil {
			// A holder frozen inside its transaction (a stopped process, a stalled machine) would keep the lease row
			// locked from its fence check until it wakes, and no one could take the role over meanwhile: PostgreSQL
			// ends its session once it has been idle in the transaction for twice the lease's TTL (it has lost the
			// lease by then, and its commit would be refused anyway).
			ms := max(1, (2 * l.TTL).Milliseconds())
			if _, err := tx.Exec(ctx, fmt.Sprintf(`SET LOCAL idle_in_transaction_session_timeout = %d`, ms)); err != nil {
				return fmt.Errorf("bound a fenced transaction's idle time: %w", err)
			}
		}
		if err := fn(tx); err != nil {
			return err
		}
		return checkFence(ctx, tx)
	})
	s.NoteConflict(err)
	return err
}

// NoteConflict counts a transaction that failed on a deadlock (40P01) or a serialization failure (40001). Marking
// takes its locks in one order, so a deadlock there is a defect; the counter (gcos_tx_retries_total) shows any.
func (s *Store) NoteConflict(err error) {
	if IsPgCode(err, "40P01", "40001") {
		s.txRetries.Add(1)
		s.logger.Warn("transaction conflict; its loop retries it", "err", err)
	}
}

// Counters are what this store counted since it opened.
type Counters struct {
	// TxRetries: transactions that failed on a deadlock or a serialization conflict (and were retried by their loop:
	// the intake's next poll, the scan's next tick).
	TxRetries int64
	// Demotions: the times the store dropped its pooled connections because the primary turned read-only.
	Demotions int64
}

// Counters reads the store's counters.
func (s *Store) Counters() Counters {
	return Counters{TxRetries: s.txRetries.Load(), Demotions: s.demotions.Load()}
}

// MapError normalises driver errors at the edge so pgx never leaks upward.
func MapError(err error, what string) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return gcos.Errorf(gcos.ENOTFOUND, "%s: not found", what)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "23505":
			return gcos.Errorf(gcos.ECONFLICT, "%s: %s", what, pgErr.Message)
		case "23514", "22P02", "23502":
			return gcos.Errorf(gcos.EINVALID, "%s: %s", what, pgErr.Message)
		}
	}
	return fmt.Errorf("%s: %w", what, err)
}

// IsPgCode reports whether err is a PostgreSQL error with one of the given SQLSTATE codes.
func IsPgCode(err error, codes ...string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && slices.Contains(codes, pgErr.Code)
}

// Unreachable reports whether err says the database cannot be reached (yet), not that it refused something: a
// caller that can wait (a daemon started before its database) retries on it.
func Unreachable(err error) bool {
	var connErr *pgconn.ConnectError
	var netErr net.Error
	return gcos.ErrorCode(err) == gcos.EUNAVAILABLE || errors.As(err, &connErr) || errors.As(err, &netErr) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, io.ErrUnexpectedEOF)
}

// DatabaseIdentity names the database a DSN (URL or keywords) points at without its password:
// user@host:port/dbname, or "unparsable".
func DatabaseIdentity(dsn string) string {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return "unparsable"
	}
	return identity(cfg)
}

func identity(cfg *pgx.ConnConfig) string {
	return fmt.Sprintf("%s@%s:%d/%s", cfg.User, cfg.Host, cfg.Port, cfg.Database)
}
