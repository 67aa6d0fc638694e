package gcos

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Config is GCOS's whole configuration: defaults, optionally overridden by one JSON file, then by the environment
// (tokens only), validated once at start.
type Config struct {
	SourceBinding SourceBinding       `json:"source_binding"`
	TTL           TTLConfig           `json:"ttl"`
	Gate          GateConfig          `json:"gate"`
	Snapshot      SnapshotConfig      `json:"snapshot"`
	Scan          ScanConfig          `json:"scan"`
	Intake        IntakeConfig        `json:"intake"`
	HTTP          HTTPConfig          `json:"http"`
	Roles         RolesConfig         `json:"roles"`
	Outage        OutageConfig        `json:"outage"`
	VerdictPolicy VerdictPolicyConfig `json:"verdict_policy"`
	Events        EventsConfig        `json:"events"`
	// Principals are the people and systems GCOS knows by name. A ruleset whose proposer is not one of them, or
	// whose approver is not one with the approver role, is unowned (finding ruleset_unowned). None configured: the
	// check is off, and GCOS says so at start.
	Principals []Principal    `json:"principals"`
	Database   DatabaseConfig `json:"database"`
	Process    ProcessConfig  `json:"process"`
}

// ProcessConfig bounds what the `gcos up` process itself may hold.
type ProcessConfig struct {
	// MemoryLimitMiB is the daemon's soft memory limit (Go's runtime/debug.SetMemoryLimit): as the process nears it,
	// the garbage collector runs sooner, so garbage does not pile up to twice what is live (what a collection paced
	// by growth alone allows) while a tail catches up in large pages. It is soft: a process whose live memory needs
	// more still gets it, at the cost of more collection work. 0 sets no limit; a GOMEMLIMIT in the environment wins.
	MemoryLimitMiB int `json:"memory_limit_mib"`
}

// Database pooling modes (database.pooling).
const (
	PoolingSession     = "session"     // a PostgreSQL server, or a pooler in session mode: one server session per connection
	PoolingTransaction = "transaction" // a pooler in transaction mode (PgBouncer pool_mode=transaction)
)

// DatabaseConfig says what GCOS's database URL leads to. The URLs themselves are secrets and come from the flags
// or the environment (--database-url, --session-database-url), never from this file.
type DatabaseConfig struct {
	// Pooling is "session" (a server, or a session-mode pooler) or "transaction" (a transaction-mode pooler). Under
	// transaction pooling every statement runs in pgx's exec mode, which keeps no prepared statement on a server
	// connection that the pooler may hand to someone else, and what needs a session of its own (the LISTEN that
	// wakes event scans) uses the session URL, or is given up for polling when there is none.
	Pooling string `json:"pooling"`
	// PoolConns is the size of the store's connection pool, which every part but the gate shares: the intake's tick
	// and its read-ahead, the event, incremental and audit scan loops (the audit's capture helpers and its proof
	// beside them), promotion, ruleset proposals and the API's reads (the gate has its own, gate.pool_conns). A part
	// that finds the pool taken waits for a connection, however short its own work is, so the pool holds what they
	// hold together at a busy moment. A pool_max_conns parameter in the database URL wins over it.
	PoolConns int `json:"pool_conns"`
}

// Principal roles.
const (
	RoleReader   = "reader"
	RoleOperator = "operator"
	RoleApprover = "approver"
)

// PrincipalRoles lists the roles a principal may hold.
var PrincipalRoles = []string{RoleReader, RoleOperator, RoleApprover}

// Principal is one named principal, its roles and the API tokens that authenticate it. A request made with one of
// its tokens acts as it, whatever name the request body gives; a principal without tokens can act only from the
// CLI, which holds the database credential itself.
type Principal struct {
	Name   string   `json:"name"`
	Roles  []string `json:"roles"`
	Tokens []string `json:"tokens,omitempty"`
}

// EventsConfig is the emission discipline of what GCOS announces itself (its findings opening, reopening and
// resolving, its runs, snapshots and rulesets): per-type cooldown and ceiling, escalation of unread announcements,
// and the authority disputes that always route to the council (doc 41 §41.8–§41.9). The handoff signals of the
// intake are the tail's transport, not announcements: they are never throttled.
type EventsConfig struct {
	// Rules: the first rule whose types pattern matches an announcement's type applies; no match, no throttling.
	Rules      []EventRule           `json:"rules"`
	Escalation EventEscalationConfig `json:"escalation"`
	// CouncilTypes (gcos.Glob patterns) are authority disputes: routed to the council whatever the owner is.
	CouncilTypes []string `json:"council_types"`
	// PromoteEvery is the pause between two promotions of captured signals by the process holding the role.
	PromoteEvery Duration `json:"promote_every"`
	// SignalKeyKeep is the dedup window: how long, at least, the idempotency key of a signal GCOS emitted is kept,
	// so that a replay of what it announced (a cursor reset, a retried transaction) emits nothing new. Keys are kept
	// in two generations that rotate every SignalKeyKeep (postgres.RotateSignalKeysTx), so a key is kept for less
	// than twice it. A replay of changes handed off longer ago announces them again.
	SignalKeyKeep Duration `json:"signal_key_keep"`
}

// EventRule throttles the announcements whose type matches Types.
type EventRule struct {
	Types string `json:"types"`
	// Cooldown: a second announcement of a type about the same subject waits until this long after the first;
	// a newer one supersedes a waiting one, so the latest state is what goes out.
	Cooldown Duration `json:"cooldown"`
	// Ceiling: at most this many announcements of a type per Window; the rest are held back and counted into one
	// digest event (governance.coverage.summary) when the window closes. 0: no ceiling.
	Ceiling int      `json:"ceiling"`
	Window  Duration `json:"window"`
}

// EventEscalationConfig escalates an announcement of one of Severities that its routed owner has not read After
// its emission: a governance.lifecycle.escalated event routed to To (default GOV-COUNCIL). After 0: off.
type EventEscalationConfig struct {
	Severities []string `json:"severities"`
	After      Duration `json:"after"`
	To         string   `json:"to"`
}

// RolesConfig sets the leases of the singleton roles (full audit, backfill, event promotion, silent-gap monitor).
type RolesConfig struct {
	// LeaseTTL is how long a role's lease lasts without renewal: a killed holder's role passes to another process
	// after at most this long. The holder renews every third of it while it works.
	LeaseTTL Duration `json:"lease_ttl"`
}

// OutageConfig sets how every loop (intake, scans, audit, monitor, event promotion) behaves while the database
// fails: its retries back off exponentially up to BackoffMax, and it logs once when the failures start, every
// LogEvery while they last, and once when they end.
type OutageConfig struct {
	BackoffMax Duration `json:"backoff_max"`
	LogEvery   Duration `json:"log_every"`
}

// ColumnBinding names the table and column a dimension is read from (SPEC §4: never literals in code).
type ColumnBinding struct {
	Table     string `json:"table"`
	Column    string `json:"column"`
	KeyColumn string `json:"key_column,omitempty"` // the column that joins the table to an object, when not the birth table
}

// BirthBinding names the born-object inventory table and the columns GCOS reads from it.
type BirthBinding struct {
	Table            string `json:"table"`
	ID               string `json:"id"`
	EntityCode       string `json:"entity_code"`
	BornAt           string `json:"born_at"`
	ParentCode       string `json:"parent_code"`
	CanonicalAddress string `json:"canonical_address"`
	SourceSystem     string `json:"source_system"`
	ActorRef         string `json:"actor_ref"`
}

// SourceBinding says which table and column feeds each group dimension, and where births are.
type SourceBinding struct {
	Birth           BirthBinding  `json:"birth"`
	ObjectClass     ColumnBinding `json:"object_class"`
	SourceRegistry  ColumnBinding `json:"source_registry"`
	LifecycleStatus ColumnBinding `json:"lifecycle_status"`
	AxisFamily      ColumnBinding `json:"axis_family"`
	Scope           ColumnBinding `json:"scope"`
	OwnerScope      ColumnBinding `json:"owner_scope"`
}

// RegistryTable is the table the binding reads a governance registry from, the registry named by its default
// table (TablePivots, TableScopes, TableOwnership); any other registry is read from the table of its name.
func (b SourceBinding) RegistryTable(registry string) string {
	switch registry {
	case TablePivots:
		return b.AxisFamily.Table
	case TableScopes:
		return b.Scope.Table
	case TableOwnership:
		return b.OwnerScope.Table
	}
	return registry
}

// TTLDefaultKey is the TTL entry used for a risk class without its own.
const TTLDefaultKey = "default"

// TTLConfig maps a risk class to how long a verdict stays clean; a file's entries are merged over the defaults.
type TTLConfig map[string]Duration

// TTLFor is the TTL of riskClass: its own entry, else "default". An empty risk class is the unknown one.
func (t TTLConfig) TTLFor(riskClass string) time.Duration {
	if riskClass == "" {
		riskClass = UnknownRisk
	}
	if d, ok := t[riskClass]; ok {
		return d.Duration()
	}
	return t[TTLDefaultKey].Duration()
}

// UnmarshalJSON merges entries into the map, reporting a bad value under its own key (ttl.<risk_class>).
func (t *TTLConfig) UnmarshalJSON(b []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return &json.UnmarshalTypeError{Value: "non-object", Type: reflect.TypeFor[TTLConfig]()}
	}
	if *t == nil {
		*t = TTLConfig{}
	}
	for k, v := range raw {
		var d Duration
		if err := json.Unmarshal(v, &d); err != nil {
			return &json.UnmarshalTypeError{Value: string(v), Type: reflect.TypeFor[Duration](), Field: k}
		}
		(*t)[k] = d
	}
	return nil
}

// GateConfig configures the production gate.
type GateConfig struct {
	LowRiskClasses []string `json:"low_risk_classes"` // every other risk class (and unknown) is high risk
	Timeout        Duration `json:"timeout"`          // past it the gate blocks
	// PoolConns is the size of the gate's own connection pool: no other work can take these connections.
	PoolConns int `json:"pool_conns"`
	// ObjectRiskClasses are the risk classes whose write-path objects get their own candidate row for the gate to
	// consult (doc 40 §40.6, fourth criterion); other write-path objects are represented by their group. Empty by
	// default: a high-volume write class (orders, invoices) would turn the group grain back into per-row state, so an
	// operator opts a risk class in knowingly.
	ObjectRiskClasses []string `json:"object_risk_classes"`
	// View answers the gate from memory (SPEC §12 freshness) while it can prove it is at most MaxStaleness behind
	// the database; otherwise the gate reads through. ViewRefresh is how often the view catches up when no
	// notification wakes it (its proof of freshness: it must be well under MaxStaleness). ViewBirthMaxAge bounds
	// how long a cached birth row serves when a source update bypasses the change ledger. FeedRetention is how
	// long the change feed keeps a note for views that fell behind (older: they reload); FeedPartition is the span of
	// each of the feed's time partitions, retention's grain (a note goes with its partition, between FeedRetention
	// and FeedRetention + FeedPartition after it was written). ViewObjects bounds the
	// births and answers the view remembers (each; past it they are all forgotten and read again as asked).
	View            bool     `json:"view"`
	ViewObjects     int      `json:"view_objects"`
	MaxStaleness    Duration `json:"max_staleness"`
	ViewRefresh     Duration `json:"view_refresh"`
	ViewBirthMaxAge Duration `json:"view_birth_max_age"`
	FeedRetention   Duration `json:"feed_retention"`
	FeedPartition   Duration `json:"feed_partition"`
	// RescanDeadline is how long the gate waits for a synchronous re-scan of the groups a high-risk decision blocks
	// on for staleness alone (SPEC §12: a dirty high-risk row is re-evaluated within a deadline); past it the
	// gate blocks, and the re-scan runs on (within gate.timeout) for the callers after it. 0 turns it off.
	// RescanConcurrency bounds the re-scans the gate runs at once: past it a stale answer blocks as before.
	RescanDeadline    Duration `json:"rescan_deadline"`
	RescanConcurrency int      `json:"rescan_concurrency"`
	// HandOffPoll is how often a question asked with a consistency token (or at full consistency) looks at the
	// intake's progress while it waits, within gate.timeout, for every source row committed before it to be handed
	// off (SPEC §12 freshness).
	HandOffPoll Duration `json:"handoff_poll"`
	// BatchMax is the most checks one batch question may hold (POST /v1/gate, gcos gate --objects-from): a batch is
	// answered from one instant, so its size bounds how long that instant's read holds a connection.
	BatchMax int `json:"batch_max"`
	// AuthZENActions maps an AuthZEN action name (action.name) onto the gate action it asks (write or read); an
	// action it does not name is a deny. A configuration file's entries are added to the defaults (read, write).
	AuthZENActions map[string]string `json:"authzen_actions"`
	// SearchHold is how long a resource search's snapshot is held open after its last page (every page of one
	// search is read from one instant); SearchMax bounds the searches held at once, each an open transaction on a
	// connection of its own.
	SearchHold Duration `json:"search_hold"`
	SearchMax  int      `json:"search_max"`
}

// SnapshotConfig configures source-snapshot capture and retention.
type SnapshotConfig struct {
	BatchSize        int      `json:"batch_size"`        // births per keyset batch
	StatementTimeout Duration `json:"statement_timeout"` // each batch stays far under it
	RetentionCycles  int      `json:"retention_cycles"`  // full-audit cycles kept beyond referenced snapshots
}

// ScanConfig configures the three scan modes and the storm guard.
type ScanConfig struct {
	BatchSize           int      `json:"batch_size"`           // groups claimed per scan transaction
	CoalesceWindow      Duration `json:"coalesce_window"`      // debounce before an event-driven scan
	IncrementalInterval Duration `json:"incremental_interval"` // how often the whole dirty set is scanned
	FullAuditInterval   Duration `json:"full_audit_interval"`  // how often the full audit runs
	StormFraction       float64  `json:"storm_fraction"`       // a tick of the tail dirtying more than this share of groups is a storm
	StormBatch          int      `json:"storm_batch"`          // groups per tick while throttled by a storm
	RetryBase           Duration `json:"retry_base"`
	RetryMax            Duration `json:"retry_max"`
	MaxAttempts         int      `json:"max_attempts"` // a group failing this often is marked recompute failed
	// VerifySample is how many objects beyond those with object rows a whole verification (gcos verify) asks the
	// gate about; each full audit asks about its share (CoverSample) among the objects of the slice it proves.
	VerifySample int `json:"verify_sample"`
	// VerifySlices is the rotating cover's size: each full audit proves one slice of the collections (CoverSlice),
	// plus every collection with a group scanned since the previous audit, so every group is proven at least once
	// every VerifySlices audits; 1 proves everything at every audit.
	VerifySlices int `json:"verify_slices"`
	// VerifyBatchObjects bounds the proof's memory: an audit proves its collections in batches of about this many
	// object rows (gcos.ProofBatches), each read and compared at its own instant, so the daemon holds one batch's
	// object rows at a time whatever the size of the estate. Each batch reads the births of its collections again.
	VerifyBatchObjects int `json:"verify_batch_objects"`
	// SettleTimeout is how long a full audit, and its proof, wait at their instant for the intake to hand off every
	// source row committed before it (the audit's cut): only then is a change with no dirty mark a lost signal, and
	// a count or verdict that differs a drift or a mismatch. Past it the audit says so and judges what it saw.
	SettleTimeout Duration `json:"settle_timeout"`
	// VerdictChangesKeep is how long the verdict change log (GET /v1/changes) keeps a change; VerdictChangesPartition
	// is the span of each of the log's time partitions, retention's grain (a change goes with its partition).
	VerdictChangesKeep      Duration `json:"verdict_changes_keep"`
	VerdictChangesPartition Duration `json:"verdict_changes_partition"`
	// DetectWrites bounds what one coverage detection pass writes (findings raised, resolved, brought up to date;
	// in that order): the rest wait for the next pass, so the first pass over an estate with thousands of gaps
	// spreads over several passes instead of one burst beside the event scans.
	DetectWrites int `json:"detect_writes"`
	// DetectInterval is how often the incremental loop ends with the detection pass over the whole estate (the ticks
	// close the orphans of the groups they judge covered as they judge them).
	DetectInterval Duration `json:"detect_interval"`
	// DetectRefresh is how often an open detection's counts are brought up to date while its condition holds: the
	// counts of an orphan under a births load move at every pass, and writing them each time is work no one reads.
	DetectRefresh Duration `json:"detect_refresh"`
}

// ChangelogSkip as a ChangelogRule kind means "matched: produce no signal" (e.g. GCOS's own audit echo).
const ChangelogSkip = "skip"

// ChangelogRule maps registry_changelog rows to a change kind. EntityType and Action are glob patterns
// (Glob syntax, matched case-insensitively); empty matches anything.
type ChangelogRule struct {
	EntityType string `json:"entity_type,omitempty"`
	Action     string `json:"action,omitempty"`
	Kind       string `json:"kind"` // a ChangeKind, or ChangelogSkip
}

// matches reports whether the rule applies to a changelog row.
func (r ChangelogRule) matches(entityType, action string) bool {
	glob := func(pattern, s string) bool {
		if pattern == "" {
			return true
		}
		return MatchGlob(pattern, s, true)
	}
	return glob(r.EntityType, entityType) && glob(r.Action, action)
}

// IntakeConfig configures the handoff intake worker (SPEC §9).
type IntakeConfig struct {
	// PageSize is source rows per keyset page, each applied in one transaction: larger pages amortize the per-page
	// mapping, dirty marks and signal claims, smaller ones bound the daemon's memory (measured in BENCHMARKS.md).
	PageSize int `json:"page_size"`
	// ReadAhead: while a births page that came back full is applied, the next one is read on a connection of its
	// own (intake/readahead.go), so a tail catching up reads and applies at once.
	ReadAhead bool `json:"read_ahead"`
	// CatchUpPageSize is the size of a page read ahead: once a births page comes back full the tail is behind, and
	// it reads the backlog in pages this large. Each page marks, counts and signals nearly every group it touches
	// whatever its size, so larger pages hand off a backlog with less of that work per row; a tail that keeps up
	// reads PageSize rows at a time, which bounds how long a poll holds its locks. Two pages are in memory while it
	// catches up (the one applied and the one read ahead). 0 reads PageSize throughout.
	CatchUpPageSize int      `json:"catch_up_page_size"`
	PollInterval    Duration `json:"poll_interval"` // between polls when caught up
	// ProbeInterval is how often a quiet worker (its last tick read at most ProbeQuietRows rows) asks each source
	// whether a row lies beyond its cursor (one index probe, no lock, no write), polling at once when one does: a
	// change to a quiet estate waits for the next probe, not the next poll. Under load each tick reads more, and the
	// worker keeps PollInterval, which batches. 0 turns probing off; above PollInterval it is PollInterval.
	ProbeInterval  Duration `json:"probe_interval"`
	ProbeQuietRows int      `json:"probe_quiet_rows"`
	// HorizonGuard is subtracted from the visibility horizon. The horizon (least of clock_timestamp() and the oldest
	// open transaction's xact_start) is already exact for timestamps set to now() inside the writing transaction; the
	// guard only covers the instant between a backend taking its start timestamp and publishing it in
	// pg_stat_activity. 10ms covers that with margin and costs nothing noticeable in latency.
	HorizonGuard Duration `json:"horizon_guard"`
	RoleFilter   []string `json:"role_filter"` // only these roles' transactions hold the horizon back; empty = all
	MaxAttempts  int      `json:"max_attempts"`
	BackoffBase  Duration `json:"backoff_base"`
	BackoffMax   Duration `json:"backoff_max"`
	LagThreshold Duration `json:"lag_threshold"` // cursor behind head longer than this ⇒ handoff_lag
	// FutureTolerance: a row whose order key lies further than this ahead of the database clock (a writer's wrong
	// zone or a supplied timestamp) is handed off at once, out of order, and reported (handoff_out_of_order).
	FutureTolerance    Duration `json:"future_tolerance"`
	SilentGapThreshold Duration `json:"silent_gap_threshold"` // heartbeat older than this ⇒ handoff_silent_gap
	HeartbeatInterval  Duration `json:"heartbeat_interval"`
	TrustedSources     []string `json:"trusted_sources"` // source-system globs; others are untrusted_source
	// SignalBucket coalesces handoff events: one event per (group, kind) per bucket of this many source ids, keyed
	// by the bucket so that a replay produces the same events and the outbox deduplicates them.
	SignalBucket   int64           `json:"signal_bucket"`
	ChangelogKinds []ChangelogRule `json:"changelog_kinds"` // first match wins; no match means no signal
	// Registries are the authority and rule registries the intake watches directly, every RegistryPoll (SPEC §12:
	// a token covers their rows too): an edit made without a change-ledger row is handed off as a change-ledger row
	// of its entity_type would be (changelog_kinds decides its kind), never waiting for the full audit.
	Registries   []WatchedRegistry `json:"registries"`
	RegistryPoll Duration          `json:"registry_poll"`
}

// WatchedRegistry is one registry the intake watches by a fingerprint of each row (no trigger on it, no writer
// needed): Table (the registry's default name, which the source binding may bind to another table), Key (the column
// naming a row: its text is the change's entity_code) and EntityType (the change-ledger word a change of it is
// handed off as).
type WatchedRegistry struct {
	Table      string `json:"table"`
	Key        string `json:"key"`
	EntityType string `json:"entity_type"`
}

// DefaultWatchedRegistries are the seeds' authority and rule registries, by the change-ledger word of each.
func DefaultWatchedRegistries() []WatchedRegistry {
	return []WatchedRegistry{
		{Table: TableOwnership, Key: "id", EntityType: "ownership"},
		{Table: TableExceptions, Key: "exception_id", EntityType: "exception"},
		{Table: "collection_registry", Key: "collection_name", EntityType: "collection"},
		{Table: TablePivots, Key: "pivot_code", EntityType: "pivot"},
		{Table: TableJurisdiction, Key: "law_code", EntityType: "law_jurisdiction"},
		{Table: "measurement_registry", Key: "measurement_id", EntityType: "measurement"},
	}
}

// Pages are the rows a poll reads (PageSize; 10,000 when unset) and the rows a page read ahead holds
// (CatchUpPageSize, never fewer than a poll's).
func (c IntakeConfig) Pages() (page, catchUp int) {
	page = c.PageSize
	if page <= 0 {
		page = 10_000
	}
	return page, max(c.CatchUpPageSize, page)
}

// KindFor maps a registry_changelog row to its change kind with the first matching rule; ok is false when no rule
// matches or the matching rule says skip.
func (c IntakeConfig) KindFor(entityType, action string) (kind ChangeKind, ok bool) {
	kind, matched := c.ClassifyChangelog(entityType, action)
	return kind, matched && kind != ""
}

// ClassifyChangelog is KindFor that tells "skip" from "no rule": matched is false when no rule matches the row
// (the intake reports such rows), and kind is "" when the matching rule says skip (deliberately ignored).
func (c IntakeConfig) ClassifyChangelog(entityType, action string) (kind ChangeKind, matched bool) {
	for _, r := range c.ChangelogKinds {
		if r.matches(entityType, action) {
			if r.Kind == ChangelogSkip {
				return "", true
			}
			return ChangeKind(r.Kind), true
		}
	}
	return "", false
}

// Trusted reports whether a signal's source system (a birth's source_system, a changelog row's changed_by) is
// trusted: it matches one of the trusted_sources patterns (Glob: `*` matches any name, `/` included). An empty
// source system is never trusted.
func (c IntakeConfig) Trusted(sourceSystem string) bool {
	if sourceSystem == "" {
		return false
	}
	for _, p := range c.TrustedSources {
		if MatchGlob(p, sourceSystem, false) {
			return true
		}
	}
	return false
}

// HTTPConfig configures the API listener, its tokens and its limits. The limits keep a slow, idle or greedy client
// from holding connections, file descriptors or database connections the gate needs.
type HTTPConfig struct {
	Listen         string   `json:"listen"`
	ReaderTokens   []string `json:"reader_tokens"`
	OperatorTokens []string `json:"operator_tokens"`
	InsecureNoAuth bool     `json:"insecure_no_auth"` // refused unless Listen is a loopback address
	// LocalTokens are the daemon's run tokens (never configured): the CLI on this machine presents one and acts
	// as the principal it names, as it would on the database path.
	LocalTokens []string `json:"-"`

	ReadHeaderTimeout Duration `json:"read_header_timeout"` // to read a request's headers
	ReadTimeout       Duration `json:"read_timeout"`        // to read a whole request, body included
	WriteTimeout      Duration `json:"write_timeout"`       // from the end of the headers to the end of the answer
	IdleTimeout       Duration `json:"idle_timeout"`        // a keep-alive connection with no request is closed after it
	RequestTimeout    Duration `json:"request_timeout"`     // the database deadline of one request (the gate has gate.timeout)
	MaxHeaderBytes    int      `json:"max_header_bytes"`
	MaxBodyBytes      int64    `json:"max_body_bytes"`
	// MaxConcurrent caps the requests being answered at once, gate excluded; beyond it the answer is 503 with
	// Retry-After. MaxConcurrentGate is the gate's own cap, so readers can never take the gate's places.
	MaxConcurrent     int `json:"max_concurrent"`
	MaxConcurrentGate int `json:"max_concurrent_gate"`
	// ReadCacheInterval: the expensive reads (invariant, summary) are computed at most once per interval and
	// served from that result with its as_of.
	ReadCacheInterval Duration `json:"read_cache_interval"`
	// WatchPoll is how often a change watch (GET /v1/changes/watch) reads the log for changes committed since its
	// last read; WatchHeartbeat is how long it stays silent at most (a comment line keeps proxies and clients from
	// timing the stream out).
	WatchPoll      Duration `json:"watch_poll"`
	WatchHeartbeat Duration `json:"watch_heartbeat"`
	// LoginLinkTTL is how long a dashboard login link (printed at start, or `gcos login`) stays usable while
	// unused; SessionTTL how long the browser session it opens lasts.
	LoginLinkTTL Duration `json:"login_link_ttl"`
	SessionTTL   Duration `json:"session_ttl"`
}

// VerdictPolicyConfig overrides the shipped verdict policy with a file (Path) or an inline Document; neither
// means the default.
type VerdictPolicyConfig struct {
	Path     string          `json:"path,omitempty"`
	Document json.RawMessage `json:"document,omitempty"`
}

// Load returns the configured verdict policy, validated.
func (c VerdictPolicyConfig) Load() (VerdictPolicy, error) {
	switch {
	case c.Path != "" && len(c.Document) > 0:
		return VerdictPolicy{}, Errorf(EINVALID, "set either path or document, not both")
	case c.Path != "":
		doc, err := os.ReadFile(c.Path)
		if err != nil {
			return VerdictPolicy{}, Errorf(EINVALID, "path: %w", err)
		}
		return ParseVerdictPolicy(doc)
	case len(c.Document) > 0:
		return ParseVerdictPolicy(c.Document)
	}
	return DefaultVerdictPolicy(), nil
}

// DefaultConfig is the configuration GCOS runs with when nothing is configured: the substrate's own table and
// column names, loopback only, and the shipped verdict policy.
func DefaultConfig() Config {
	return Config{
		SourceBinding: SourceBinding{
			Birth: BirthBinding{
				Table: "birth_registry", ID: "id", EntityCode: "entity_code", BornAt: "born_at",
				ParentCode: "parent_code", CanonicalAddress: "canonical_address",
				SourceSystem: "source_system", ActorRef: "actor_ref",
			},
			ObjectClass:     ColumnBinding{Table: "birth_registry", Column: "entity_type"},
			SourceRegistry:  ColumnBinding{Table: "birth_registry", Column: "collection_name"},
			LifecycleStatus: ColumnBinding{Table: "birth_registry", Column: "status"},
			AxisFamily:      ColumnBinding{Table: "pivot_definitions", Column: "axis_family", KeyColumn: "entity_type"},
			Scope:           ColumnBinding{Table: "governance_responsibility_scope", Column: "scope_code"},
			OwnerScope:      ColumnBinding{Table: "governance_object_ownership", Column: "owner_ref"},
		},
		TTL: TTLConfig{
			"write_high":       Duration(24 * time.Hour),
			"write_medium":     Duration(72 * time.Hour),
			"read_descriptive": Duration(168 * time.Hour),
			UnknownRisk:        Duration(time.Hour),
			TTLDefaultKey:      Duration(24 * time.Hour),
		},
		Gate: GateConfig{LowRiskClasses: []string{"read_descriptive"}, Timeout: Duration(2 * time.Second), PoolConns: 4, ObjectRiskClasses: []string{},
			View: true, ViewObjects: 200_000, MaxStaleness: Duration(100 * time.Millisecond), ViewRefresh: Duration(20 * time.Millisecond),
			ViewBirthMaxAge: Duration(30 * time.Second), FeedRetention: Duration(10 * time.Minute), FeedPartition: Duration(2 * time.Minute),
			RescanDeadline: Duration(50 * time.Millisecond), RescanConcurrency: 2, BatchMax: 1000,
			HandOffPoll: Duration(10 * time.Millisecond), AuthZENActions: map[string]string{ActionRead: ActionRead, ActionWrite: ActionWrite},
			SearchHold: Duration(time.Minute), SearchMax: 8},
		Snapshot: SnapshotConfig{
			BatchSize: 100_000, StatementTimeout: Duration(5 * time.Second), RetentionCycles: 12,
		},
		Roles:    RolesConfig{LeaseTTL: Duration(30 * time.Second)},
		Database: DatabaseConfig{Pooling: PoolingSession, PoolConns: 12},
		Process:  ProcessConfig{MemoryLimitMiB: 160},
		Outage:   OutageConfig{BackoffMax: Duration(10 * time.Second), LogEvery: Duration(time.Minute)},
		Events: EventsConfig{
			Rules: []EventRule{
				// A run's completion is news once in a while, not on every tick.
				{Types: "governance.*.scan_completed", Cooldown: Duration(5 * time.Minute)},
				{Types: "governance.*.heartbeat", Cooldown: Duration(5 * time.Minute)},
				// Everything else: one announcement per subject per minute, 200 per type per 10 minutes.
				{Types: "governance.*", Cooldown: Duration(time.Minute), Ceiling: 200, Window: Duration(10 * time.Minute)},
			},
			Escalation:    EventEscalationConfig{Severities: []string{"error"}, After: Duration(4 * time.Hour), To: CouncilOwner},
			CouncilTypes:  []string{"governance.coverage.owner_dispute", "governance.exception.unratified", "governance.coverage.island.detected"},
			PromoteEvery:  Duration(2 * time.Second),
			SignalKeyKeep: Duration(7 * 24 * time.Hour),
		},
		Scan: ScanConfig{
			BatchSize:               500,
			CoalesceWindow:          Duration(100 * time.Millisecond),
			IncrementalInterval:     Duration(5 * time.Second),
			FullAuditInterval:       Duration(24 * time.Hour),
			StormFraction:           0.25,
			StormBatch:              200,
			DetectWrites:            50,
			DetectInterval:          Duration(time.Minute),
			DetectRefresh:           Duration(10 * time.Minute),
			VerifySample:            2000,
			VerifySlices:            32,
			VerifyBatchObjects:      20_000,
			SettleTimeout:           Duration(time.Minute),
			VerdictChangesKeep:      Duration(24 * time.Hour),
			VerdictChangesPartition: Duration(time.Hour),
			RetryBase:               Duration(time.Second),
			RetryMax:                Duration(5 * time.Minute),
			MaxAttempts:             5,
		},
		Intake: IntakeConfig{
			PageSize:           25_000,
			ReadAhead:          true,
			CatchUpPageSize:    100_000,
			PollInterval:       Duration(100 * time.Millisecond),
			ProbeInterval:      Duration(10 * time.Millisecond),
			ProbeQuietRows:     10,
			HorizonGuard:       Duration(10 * time.Millisecond),
			RoleFilter:         []string{},
			MaxAttempts:        5,
			BackoffBase:        Duration(time.Second),
			BackoffMax:         Duration(5 * time.Minute),
			LagThreshold:       Duration(60 * time.Second),
			FutureTolerance:    Duration(time.Minute),
			SilentGapThreshold: Duration(30 * time.Second),
			HeartbeatInterval:  Duration(5 * time.Second),
			// Every source system of the tailed registries is trusted until an operator narrows the list; an
			// empty source system never is.
			TrustedSources: []string{"*"},
			SignalBucket:   100_000,
			ChangelogKinds: DefaultChangelogKinds(),
			Registries:     DefaultWatchedRegistries(),
			RegistryPoll:   Duration(time.Second),
		},
		HTTP: HTTPConfig{
			Listen: "127.0.0.1:8080", ReaderTokens: []string{}, OperatorTokens: []string{},
			ReadHeaderTimeout: Duration(5 * time.Second), ReadTimeout: Duration(15 * time.Second),
			WriteTimeout: Duration(30 * time.Second), IdleTimeout: Duration(60 * time.Second),
			RequestTimeout: Duration(15 * time.Second), MaxHeaderBytes: 64 << 10, MaxBodyBytes: 1 << 20,
			MaxConcurrent: 64, MaxConcurrentGate: 512, ReadCacheInterval: Duration(2 * time.Second),
			WatchPoll: Duration(250 * time.Millisecond), WatchHeartbeat: Duration(15 * time.Second),
			LoginLinkTTL: Duration(time.Hour), SessionTTL: Duration(12 * time.Hour),
		},
	}
}

// DefaultChangelogKinds is the shipped registry_changelog → change-kind mapping, most specific first.
func DefaultChangelogKinds() []ChangelogRule {
	return []ChangelogRule{
		// GCOS's own audit rows: a ruleset activation is a change once, everything else is its echo.
		{EntityType: "governance_ruleset", Action: "activate", Kind: string(ChangeRuleset)},
		{EntityType: "governance_*", Kind: ChangelogSkip},
		// Registry-level rows, by the registry word in entity_type.
		{EntityType: "collection", Action: "count_changed", Kind: string(ChangeCount)},
		{EntityType: "collection", Kind: string(ChangeCollection)},
		{EntityType: "source", Kind: string(ChangeSource)},
		{EntityType: "pivot", Kind: string(ChangeAxisIntroduced)},
		{EntityType: "axis", Kind: string(ChangeAxisIntroduced)},
		{EntityType: "law_jurisdiction", Kind: string(ChangePolicy)},
		{EntityType: "law*", Kind: string(ChangePolicy)},
		{EntityType: "measurement", Kind: string(ChangePolicy)},
		{EntityType: "ownership", Kind: string(ChangeAuthority)},
		{EntityType: "exception", Kind: string(ChangeAuthority)},
		{EntityType: "approval", Kind: string(ChangeAuthority)},
		// Object-level rows (entity_type is the object's class), by action.
		{Action: "count_changed", Kind: string(ChangeCount)},
		{Action: "source_changed", Kind: string(ChangeSource)},
		{Action: "migrate", Kind: string(ChangeSource)},
		{Action: "retire", Kind: string(ChangeObjectRetired)},
		{Action: "supersede", Kind: string(ChangeObjectRetired)},
		{Action: "merge", Kind: string(ChangeObjectRetired)},
		{Action: "owner_*", Kind: string(ChangeAuthority)},
		{Action: "approval_*", Kind: string(ChangeAuthority)},
		{Action: "exception_*", Kind: string(ChangeAuthority)},
		{Action: "create", Kind: string(ChangeObjectRegistered)},
		{Action: "register", Kind: string(ChangeObjectRegistered)},
		{Action: "update", Kind: string(ChangeObjectRegistered)},
	}
}

// LoadConfig returns the defaults overridden by the JSON file at path (none when path is empty), validated.
// Unknown keys, wrong types and bad values are errors naming the key. A relative verdict_policy.path is resolved
// against the file's directory.
func LoadConfig(path string) (Config, error) {
	c := DefaultConfig()
	if path == "" {
		return c, c.Validate()
	}
	doc, err := os.ReadFile(path)
	if err != nil {
		return Config{}, Errorf(EINVALID, "config: %w", err)
	}
	return ParseConfig(doc, path)
}

// ParseConfig is LoadConfig of a document already read from path (named in errors; a relative verdict_policy.path
// is resolved against its directory).
func ParseConfig(doc []byte, path string) (Config, error) {
	c := DefaultConfig()
	if err := decodeConfig(doc, &c); err != nil {
		return Config{}, Errorf(EINVALID, "config %s: %w", path, err)
	}
	if p := c.VerdictPolicy.Path; p != "" && !filepath.IsAbs(p) {
		c.VerdictPolicy.Path = filepath.Join(filepath.Dir(path), p)
	}
	if err := c.Validate(); err != nil {
		return Config{}, Errorf(EINVALID, "config %s: %s", path, strings.TrimPrefix(ErrorMessage(err), "config: "))
	}
	return c, nil
}

// decodeConfig decodes doc over c strictly: one JSON object, no unknown keys, right types.
func decodeConfig(doc []byte, c *Config) error {
	var generic any
	if err := json.Unmarshal(doc, &generic); err != nil {
		return fmt.Errorf("not valid JSON: %w", err)
	}
	if _, ok := generic.(map[string]any); !ok {
		return errors.New("the file must hold one JSON object")
	}
	if unknown := unknownKeys(generic, reflect.TypeFor[Config](), ""); len(unknown) > 0 {
		slices.Sort(unknown)
		if len(unknown) == 1 {
			return fmt.Errorf("%s: unknown key", unknown[0])
		}
		return fmt.Errorf("unknown keys: %s", strings.Join(unknown, ", "))
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.DisallowUnknownFields()
	if err := dec.Decode(c); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return fmt.Errorf("%s: cannot use %s as %s", Shown(te.Field), Shown(te.Value), typeName(te.Type)) // both may be the file's text
		}
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the configuration object")
	}
	return nil
}

// typeName names a configuration type the way the file spells it.
func typeName(t reflect.Type) string {
	switch t {
	case reflect.TypeFor[Duration]():
		return `a duration (e.g. "5s", "200ms", "24h")`
	case reflect.TypeFor[TTLConfig]():
		return "an object of durations"
	}
	return t.String()
}

// unknownKeys walks a decoded document against the configuration type and returns the dotted paths of keys the
// type does not have (DisallowUnknownFields alone would not say which section they are in).
func unknownKeys(v any, t reflect.Type, at string) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == reflect.TypeFor[TTLConfig]() || t == reflect.TypeFor[json.RawMessage]() {
		return nil // free-form keys
	}
	join := func(k string) string {
		if at == "" {
			return k
		}
		return at + "." + k
	}
	var out []string
	switch t.Kind() {
	case reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			return nil // a type error, reported by the decoder
		}
		fields := map[string]reflect.Type{}
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name != "" && name != "-" {
				fields[name] = f.Type
			}
		}
		for k, sub := range obj {
			ft, ok := fields[k]
			if !ok {
				out = append(out, join(Shown(k))) // the file's own text, escaped and shortened
				continue
			}
			out = append(out, unknownKeys(sub, ft, join(k))...)
		}
	case reflect.Slice:
		if arr, ok := v.([]any); ok {
			for i, sub := range arr {
				out = append(out, unknownKeys(sub, t.Elem(), fmt.Sprintf("%s[%d]", at, i))...)
			}
		}
	}
	return out
}

// ApplyEnv adds tokens from GCOS_READER_TOKEN and GCOS_OPERATOR_TOKEN (comma-separated) to the configured ones.
func (c *Config) ApplyEnv(getenv func(string) string) {
	split := func(s string) []string {
		var out []string
		for _, t := range strings.Split(s, ",") {
			if t = strings.TrimSpace(t); t != "" {
				out = append(out, t)
			}
		}
		return out
	}
	c.HTTP.ReaderTokens = append(c.HTTP.ReaderTokens, split(getenv("GCOS_READER_TOKEN"))...)
	c.HTTP.OperatorTokens = append(c.HTTP.OperatorTokens, split(getenv("GCOS_OPERATOR_TOKEN"))...)
}

// identifier is a PostgreSQL identifier GCOS accepts in a source binding (quoted anyway when used).
var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_$]{0,62}$`)

// Validate checks every value and names the key of each bad one, e.g. "config: scan.batch_size: must be > 0".
func (c Config) Validate() error {
	var p problems
	b := c.SourceBinding
	p.table("source_binding.birth.table", b.Birth.Table)
	for key, col := range map[string]string{
		"id": b.Birth.ID, "entity_code": b.Birth.EntityCode, "born_at": b.Birth.BornAt,
		"parent_code": b.Birth.ParentCode, "canonical_address": b.Birth.CanonicalAddress,
		"source_system": b.Birth.SourceSystem, "actor_ref": b.Birth.ActorRef,
	} {
		p.column("source_binding.birth."+key, col)
	}
	for key, cb := range map[string]ColumnBinding{
		"object_class": b.ObjectClass, "source_registry": b.SourceRegistry, "lifecycle_status": b.LifecycleStatus,
		"axis_family": b.AxisFamily, "scope": b.Scope, "owner_scope": b.OwnerScope,
	} {
		at := "source_binding." + key
		p.table(at+".table", cb.Table)
		p.column(at+".column", cb.Column)
		switch key {
		case "object_class", "source_registry", "lifecycle_status":
			// A base group is read from the born row itself (and its anchor's): another table cannot be honoured.
			if cb.Table != b.Birth.Table {
				p.add(at+".table", "must be the birth table %s: GCOS reads %s from the born row", Quote(b.Birth.Table), key)
			}
			if cb.KeyColumn != "" {
				p.add(at+".key_column", "not used: %s is a column of the born row", key)
			}
		case "axis_family":
			p.column(at+".key_column", cb.KeyColumn) // the object class column that joins a pivot to its class
		default:
			if cb.KeyColumn != "" {
				p.add(at+".key_column", "not used: %s rows are matched by scope code", key)
			}
		}
	}

	if _, ok := c.TTL[TTLDefaultKey]; !ok {
		p.add("ttl."+TTLDefaultKey, "must be set (it applies to risk classes without their own TTL)")
	}
	for k, d := range c.TTL {
		if k == "" {
			p.add("ttl", "a risk class must not be empty")
		}
		p.positive("ttl."+k, d)
	}

	for i, rc := range c.Gate.LowRiskClasses {
		if rc == "" || rc == UnknownRisk {
			p.add(fmt.Sprintf("gate.low_risk_classes[%d]", i), "%s cannot be low risk: unknown risk is always high", Quote(rc))
		}
	}
	p.positive("gate.timeout", c.Gate.Timeout)
	p.positiveInt("gate.pool_conns", c.Gate.PoolConns)
	p.positiveInt("database.pool_conns", c.Database.PoolConns)
	if c.Process.MemoryLimitMiB < 0 {
		p.add("process.memory_limit_mib", "must be >= 0 (0: no limit), got %d", c.Process.MemoryLimitMiB)
	}
	if c.Database.Pooling != PoolingSession && c.Database.Pooling != PoolingTransaction {
		p.add("database.pooling", "%s is not %s or %s", Quote(c.Database.Pooling), Quote(PoolingSession), Quote(PoolingTransaction))
	}
	p.positive("gate.max_staleness", c.Gate.MaxStaleness)
	p.positive("gate.view_refresh", c.Gate.ViewRefresh)
	p.positive("gate.view_birth_max_age", c.Gate.ViewBirthMaxAge)
	p.positive("gate.feed_retention", c.Gate.FeedRetention)
	p.positive("gate.feed_partition", c.Gate.FeedPartition)
	p.positiveInt("gate.view_objects", c.Gate.ViewObjects)
	p.nonNegative("gate.rescan_deadline", c.Gate.RescanDeadline)
	p.positive("gate.handoff_poll", c.Gate.HandOffPoll)
	p.positiveInt("gate.rescan_concurrency", c.Gate.RescanConcurrency)
	p.positiveInt("gate.batch_max", c.Gate.BatchMax)
	p.positive("gate.search_hold", c.Gate.SearchHold)
	p.positiveInt("gate.search_max", c.Gate.SearchMax)
	for _, name := range slices.Sorted(maps.Keys(c.Gate.AuthZENActions)) {
		action := c.Gate.AuthZENActions[name]
		if err := CheckParam("action", name); err != nil || name == "" {
			p.add("gate.authzen_actions", "action name %s: want a non-empty printable name", quoteInput(name))
		} else if action != ActionWrite && action != ActionRead {
			p.add("gate.authzen_actions", "%s maps to %s: want write or read", quoteInput(name), quoteInput(action))
		}
	}
	if c.Gate.ViewRefresh >= c.Gate.MaxStaleness/2 {
		p.add("gate.view_refresh", "must be under half of gate.max_staleness (%s), or the view could never prove it is fresh", c.Gate.MaxStaleness.Duration())
	}
	p.positive("outage.backoff_max", c.Outage.BackoffMax)
	for i, r := range c.Events.Rules {
		at := fmt.Sprintf("events.rules[%d]", i)
		if _, err := ParseGlob(r.Types, false); err != nil || strings.TrimSpace(r.Types) == "" {
			p.add(at+".types", "must be a non-empty event type pattern (e.g. governance.coverage.*)")
		}
		p.nonNegative(at+".cooldown", r.Cooldown)
		switch {
		case r.Ceiling < 0:
			p.add(at+".ceiling", "must not be negative")
		case r.Ceiling > 0 && r.Window <= 0:
			p.add(at+".window", "must be positive when a ceiling is set")
		}
	}
	p.nonNegative("events.escalation.after", c.Events.Escalation.After)
	p.positive("events.promote_every", c.Events.PromoteEvery)
	p.positive("events.signal_key_keep", c.Events.SignalKeyKeep)
	for i, sev := range c.Events.Escalation.Severities {
		if !slices.Contains([]string{"info", "warning", "error"}, sev) {
			p.add(fmt.Sprintf("events.escalation.severities[%d]", i), "%s is not an event severity (info, warning, error)", Quote(sev))
		}
	}
	names := map[string]bool{}
	for i, pr := range c.Principals {
		at := fmt.Sprintf("principals[%d]", i)
		switch {
		case strings.TrimSpace(pr.Name) == "":
			p.add(at+".name", "must not be empty")
		case names[pr.Name]:
			p.add(at+".name", "%s is configured twice", Quote(pr.Name))
		}
		names[pr.Name] = true
		for j, r := range pr.Roles {
			if !slices.Contains(PrincipalRoles, r) {
				p.add(fmt.Sprintf("%s.roles[%d]", at, j), "%s is not a role (%s)", Quote(r), strings.Join(PrincipalRoles, ", "))
			}
		}
		if len(pr.Tokens) > 0 && len(pr.Roles) == 0 {
			p.add(at+".roles", "a principal with tokens must hold a role")
		}
	}
	// A token names one caller: the same token twice (two principals, or a principal and a plain token) would
	// make its identity ambiguous.
	seen := map[string]string{}
	tokenAt := func(at, t string) {
		switch {
		case strings.TrimSpace(t) == "" || t != strings.TrimSpace(t):
			p.add(at, "must not be empty or have surrounding spaces")
		case seen[t] != "":
			p.add(at, "the same token is configured at %s", seen[t])
		default:
			seen[t] = at
		}
	}
	for i, pr := range c.Principals {
		for j, t := range pr.Tokens {
			tokenAt(fmt.Sprintf("principals[%d].tokens[%d]", i, j), t)
		}
	}
	for i, t := range c.HTTP.ReaderTokens {
		tokenAt(fmt.Sprintf("http.reader_tokens[%d]", i), t)
	}
	for i, t := range c.HTTP.OperatorTokens {
		tokenAt(fmt.Sprintf("http.operator_tokens[%d]", i), t)
	}
	for i, pat := range c.Events.CouncilTypes {
		if _, err := ParseGlob(pat, false); err != nil || strings.TrimSpace(pat) == "" {
			p.add(fmt.Sprintf("events.council_types[%d]", i), "must be a non-empty event type pattern")
		}
	}
	p.positive("outage.log_every", c.Outage.LogEvery)

	p.positiveInt("snapshot.batch_size", c.Snapshot.BatchSize)
	p.positive("snapshot.statement_timeout", c.Snapshot.StatementTimeout)
	p.positiveInt("snapshot.retention_cycles", c.Snapshot.RetentionCycles)

	s := c.Scan
	p.positiveInt("scan.batch_size", s.BatchSize)
	p.nonNegative("scan.coalesce_window", s.CoalesceWindow)
	p.positive("scan.incremental_interval", s.IncrementalInterval)
	p.positive("scan.full_audit_interval", s.FullAuditInterval)
	p.positive("roles.lease_ttl", c.Roles.LeaseTTL)
	if !(s.StormFraction > 0 && s.StormFraction <= 1) {
		p.add("scan.storm_fraction", "must be in (0, 1], got %v", s.StormFraction)
	}
	p.positiveInt("scan.storm_batch", s.StormBatch)
	p.positiveInt("scan.detect_writes", s.DetectWrites)
	p.positive("scan.detect_refresh", s.DetectRefresh)
	p.positive("scan.detect_interval", s.DetectInterval)
	p.positive("scan.retry_base", s.RetryBase)
	p.positive("scan.retry_max", s.RetryMax)
	if s.RetryMax < s.RetryBase {
		p.add("scan.retry_max", "must be >= scan.retry_base (%s)", s.RetryBase)
	}
	p.positiveInt("scan.max_attempts", s.MaxAttempts)
	if s.VerifySample < 0 {
		p.add("scan.verify_sample", "must not be negative, got %d", s.VerifySample)
	}
	p.positiveInt("scan.verify_slices", s.VerifySlices)
	p.positive("scan.verdict_changes_keep", s.VerdictChangesKeep)
	p.positive("scan.verdict_changes_partition", s.VerdictChangesPartition)
	p.positiveInt("scan.verify_batch_objects", s.VerifyBatchObjects)
	p.positive("scan.settle_timeout", s.SettleTimeout)

	in := c.Intake
	p.positiveInt("intake.page_size", in.PageSize)
	if in.CatchUpPageSize != 0 && in.CatchUpPageSize < in.PageSize {
		p.add("intake.catch_up_page_size", "must be 0 (intake.page_size throughout) or at least intake.page_size (%d), got %d",
			in.PageSize, in.CatchUpPageSize)
	}
	p.positive("intake.poll_interval", in.PollInterval)
	if in.ProbeInterval < 0 {
		p.add("intake.probe_interval", "must be >= 0 (0: off), got %s", in.ProbeInterval)
	}
	if in.ProbeQuietRows < 0 {
		p.add("intake.probe_quiet_rows", "must not be negative, got %d", in.ProbeQuietRows)
	}
	p.positive("intake.registry_poll", in.RegistryPoll)
	watched := map[string]bool{}
	for i, r := range in.Registries {
		key := fmt.Sprintf("intake.registries[%d]", i)
		p.table(key+".table", r.Table)
		p.column(key+".key", r.Key)
		if watched[r.Table] {
			p.add(key+".table", "%s is watched twice", r.Table)
		}
		watched[r.Table] = true
		if kind, ok := in.KindFor(r.EntityType, "update"); !ok {
			p.add(key+".entity_type", "%s: no intake.changelog_kinds rule maps it to a change kind, so its changes would be dropped", Quote(r.EntityType))
		} else if kind == ChangeObjectBorn {
			p.add(key+".entity_type", "%s maps to %s, which only births are", Quote(r.EntityType), kind)
		}
	}
	p.nonNegative("intake.horizon_guard", in.HorizonGuard)
	for i, r := range in.RoleFilter {
		if r == "" {
			p.add(fmt.Sprintf("intake.role_filter[%d]", i), "must not be empty")
		}
	}
	p.positiveInt("intake.max_attempts", in.MaxAttempts)
	p.positive("intake.backoff_base", in.BackoffBase)
	p.positive("intake.backoff_max", in.BackoffMax)
	if in.BackoffMax < in.BackoffBase {
		p.add("intake.backoff_max", "must be >= intake.backoff_base (%s)", in.BackoffBase)
	}
	p.positive("intake.lag_threshold", in.LagThreshold)
	p.positive("intake.future_tolerance", in.FutureTolerance)
	p.positive("intake.heartbeat_interval", in.HeartbeatInterval)
	if in.SilentGapThreshold <= in.HeartbeatInterval {
		p.add("intake.silent_gap_threshold", "must be > intake.heartbeat_interval (%s), or every tick is a gap",
			in.HeartbeatInterval)
	}
	for i, src := range in.TrustedSources {
		if _, err := ParseGlob(src, false); err != nil {
			p.add(fmt.Sprintf("intake.trusted_sources[%d]", i), "must be a glob pattern: %v", err)
		}
	}
	if in.SignalBucket <= 0 {
		p.add("intake.signal_bucket", "must be > 0")
	}
	for i, r := range in.ChangelogKinds {
		at := fmt.Sprintf("intake.changelog_kinds[%d]", i)
		if r.Kind != ChangelogSkip {
			if _, err := ParseChangeKind(r.Kind); err != nil {
				p.add(at+".kind", "unknown change kind %s (want one of %v or %s)", Quote(r.Kind), ChangeKinds, Quote(ChangelogSkip))
			}
		}
		for field, pattern := range map[string]string{"entity_type": r.EntityType, "action": r.Action} {
			if _, err := ParseGlob(pattern, true); pattern != "" && err != nil {
				p.add(at+"."+field, "bad glob pattern: %v", err)
			}
		}
	}

	host, _, err := net.SplitHostPort(c.HTTP.Listen)
	if err != nil {
		p.add("http.listen", "want host:port, got %s", Quote(c.HTTP.Listen))
	} else if c.HTTP.InsecureNoAuth && !isLoopback(host) {
		p.add("http.insecure_no_auth", "only allowed on a loopback listen address, not %s", Quote(c.HTTP.Listen))
	}
	for name, d := range map[string]Duration{
		"http.read_header_timeout": c.HTTP.ReadHeaderTimeout, "http.read_timeout": c.HTTP.ReadTimeout,
		"http.write_timeout": c.HTTP.WriteTimeout, "http.idle_timeout": c.HTTP.IdleTimeout,
		"http.request_timeout": c.HTTP.RequestTimeout, "http.read_cache_interval": c.HTTP.ReadCacheInterval,
		"http.watch_poll": c.HTTP.WatchPoll, "http.watch_heartbeat": c.HTTP.WatchHeartbeat,
		"http.login_link_ttl": c.HTTP.LoginLinkTTL, "http.session_ttl": c.HTTP.SessionTTL,
	} {
		p.positive(name, d)
	}
	p.positiveInt("http.max_header_bytes", c.HTTP.MaxHeaderBytes)
	p.positiveInt("http.max_body_bytes", int(c.HTTP.MaxBodyBytes))
	p.positiveInt("http.max_concurrent", c.HTTP.MaxConcurrent)
	p.positiveInt("http.max_concurrent_gate", c.HTTP.MaxConcurrentGate)

	if _, err := c.VerdictPolicy.Load(); err != nil {
		p.add("verdict_policy", "%s", ErrorMessage(err))
	}
	return p.err()
}

// isLoopback reports whether a listen host only accepts local connections.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// problems collects every validation failure so an operator fixes the file in one pass.
type problems []string

// add records a problem with key.
func (p *problems) add(key, format string, args ...any) {
	*p = append(*p, key+": "+fmt.Sprintf(format, args...))
}

// positive requires d > 0.
func (p *problems) positive(key string, d Duration) {
	if d <= 0 {
		p.add(key, "must be > 0, got %s", d)
	}
}

// nonNegative requires d >= 0.
func (p *problems) nonNegative(key string, d Duration) {
	if d < 0 {
		p.add(key, "must be >= 0, got %s", d)
	}
}

// positiveInt requires n > 0.
func (p *problems) positiveInt(key string, n int) {
	if n <= 0 {
		p.add(key, "must be > 0, got %d", n)
	}
}

// column requires a plain identifier.
func (p *problems) column(key, name string) {
	if !identifier.MatchString(name) {
		p.add(key, "want a column name, got %s", Quote(name))
	}
}

// table requires an identifier, optionally schema-qualified.
func (p *problems) table(key, name string) {
	parts := strings.Split(name, ".")
	if len(parts) > 2 || slices.ContainsFunc(parts, func(s string) bool { return !identifier.MatchString(s) }) {
		p.add(key, "want a table name (optionally schema.table), got %s", Quote(name))
	}
}

// err returns the collected problems as one EINVALID error, sorted so the message is stable.
func (p problems) err() error {
	if len(p) == 0 {
		return nil
	}
	slices.Sort(p)
	return Errorf(EINVALID, "config: %s", strings.Join(p, "; "))
}
