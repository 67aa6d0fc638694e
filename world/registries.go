package world

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// The small registries of the world: collection_registry, meta_catalog, the rule and axis registries, the law tables,
// the governance registries and the event substrate. Like the catalog, their content is fixed: it depends neither on
// the seed nor on the number of births, so the ruleset a world hashes to is the same for every world.

// table is a batch of rows for one COPY.
type table struct {
	name string
	cols []string
	rows [][]any
}

// Responsibility scopes (governance_responsibility_scope) and their default owners.
var scopes = []struct{ code, owner string }{
	{"policy", "GOV-COUNCIL"},
	{"health", "GOV-SIV"},
	{"execution", "GOV-DOT"},
	{"render", "GOV-RENDER"},
	{"approval", "GOV-APR"},
	{"audit", "GOV-AUDIT"},
}

// Risk classes and privacy values of governance_coverage_profile.
const (
	riskWriteHigh       = "write_high"
	riskWriteMedium     = "write_medium"
	riskReadDescriptive = "read_descriptive"

	privacyShared  = "shared"
	privacyPrivate = "private"
	privacyUser    = "user"
	privacySession = "session"
)

// Axis families of pivot_definitions.
var axisFamilies = []string{"geography", "channel", "tenant", "product_line", "lifecycle_stage", "currency",
	"language", "risk_tier"}

// registrySeed seeds the fixed PCG stream that spreads registry details (never the caller's seed).
const registrySeed = 0x6763_6f73_7265_6731 // "gcosreg1"

// fixedTime is a deterministic timestamp used by registry rows that carry one.
func fixedTime(year int, month time.Month, day, hour, minute int) time.Time {
	return time.Date(year, month, day, hour, minute, 0, 0, time.UTC)
}

// lawCodes are the 43 law codes (articles), in order.
var lawCodes = func() []string {
	skip := map[int]bool{4: true, 9: true, 14: true, 22: true, 27: true, 38: true, 47: true}
	var out []string
	for n := 1; n <= 50; n++ {
		if !skip[n] {
			out = append(out, fmt.Sprintf("DIEU-%02d", n))
		}
	}
	return out
}()

// lawScope pins a few articles the design documents name to their scope; the rest cycle through the scopes.
func lawScope(i int, code string) string {
	switch code {
	case "DIEU-19":
		return "audit"
	case "DIEU-31":
		return "health"
	case "DIEU-35":
		return "approval"
	case "DIEU-45":
		return "execution"
	}
	return scopes[i%len(scopes)].code
}

// lawSelector is the law_jurisdiction selector of law i: an entity type, a collection, or neither (scope only).
func lawSelector(i int) (entityType, collection any) {
	switch i % 3 {
	case 0:
		return entityTypes[(i*37+5)%len(entityTypes)].name, nil
	case 1:
		if i == 13 { // one law governs a collection that has no births yet
			return nil, "commerce_returns"
		}
		return nil, bornCollections[(i*11+3)%len(bornCollections)].name
	default:
		return nil, nil
	}
}

func collectionRegistryTable() table {
	t := table{name: "collection_registry", cols: []string{"collection_name", "coverage_status", "scope_class"}}
	add := func(c collectionSpec) {
		if cov, sc, ok := c.kind.registryColumns(); ok {
			t.rows = append(t.rows, []any{c.name, cov, sc})
		}
	}
	for _, c := range bornCollections {
		add(c)
	}
	for _, c := range registryOnlyCollections {
		add(c)
	}
	return t
}

func metaCatalogTable() table {
	t := table{name: "meta_catalog", cols: []string{"entity_type", "registry_collection"}}
	for _, et := range entityTypes {
		t.rows = append(t.rows, []any{et.name, bornCollections[et.collection].name})
	}
	return t
}

// highRiskDomains are the domains whose base types write money, identity or legal state.
var highRiskDomains = map[string]bool{"commerce": true, "billing": true, "payments": true, "finance": true,
	"identity": true, "legal": true, "compliance": true, "risk": true}

// independentlyAuthoritative are the classes whose objects are their own candidates (M-DEF-10): few, long-lived
// objects each of which is a source of truth on its own (about 7,000 objects at the live size), never a
// high-volume transactional class, whose objects the group grain represents.
var independentlyAuthoritative = map[string]bool{"contract": true, "policy_doc": true, "control": true, "role": true,
	"jurisdiction": true}

// unknownRisk are the classes without a risk class, to exercise "risk unknown ⇒ treated as high".
var unknownRisk = map[string]bool{"runbook_run": true, "runbook_run_line": true, "anchor": true,
	"prompt_template_line": true, "kb_entry_line": true}

// coverageProfile returns the governance_coverage_profile row of an entity type.
func coverageProfile(et entityType) (risk any, coverageRequired any, privacy string, authoritative, writePath bool) {
	c := bornCollections[et.collection]
	privacy = privacyShared
	switch {
	case c.kind == kindUserExcluded:
		privacy = []string{privacyUser, privacyPrivate, privacySession}[(et.collection+et.suffix)%3]
	case et.name == "employee" || et.name == "account" || et.name == "employee_line":
		privacy = privacyPrivate
	case et.name == "config_item_line" || et.name == "job_run_line":
		privacy = privacySession
	}
	var r string
	switch {
	case unknownRisk[et.name]:
		return nil, true, privacy, false, false
	case c.kind == kindRequired && et.suffix == 0 && highRiskDomains[c.domain]:
		r = riskWriteHigh
	case (c.kind == kindRequired || c.kind == kindDeferredScope) && et.suffix <= 2:
		r = riskWriteMedium
	default:
		r = riskReadDescriptive
	}
	required := r != riskReadDescriptive || (c.kind == kindRequired && et.suffix%2 == 1)
	authoritative = independentlyAuthoritative[et.name]
	writePath = r == riskWriteHigh || (r == riskWriteMedium && et.suffix == 0)
	return r, required, privacy, authoritative, writePath
}

func coverageProfileTable() table {
	t := table{name: "governance_coverage_profile", cols: []string{"entity_type", "risk_class", "coverage_required",
		"privacy", "independently_authoritative", "write_path"}}
	for _, et := range entityTypes {
		risk, req, priv, auth, wp := coverageProfile(et)
		t.rows = append(t.rows, []any{et.name, risk, req, priv, auth, wp})
	}
	return t
}

func responsibilityScopeTable() table {
	t := table{name: "governance_responsibility_scope", cols: []string{"scope_code", "default_owner_hint"}}
	for _, s := range scopes {
		t.rows = append(t.rows, []any{s.code, s.owner})
	}
	return t
}

// ownershipTable assigns owners to part of the classes and collections, per scope; the rest stay orphans.
func ownershipTable() table {
	t := table{name: "governance_object_ownership", cols: []string{"id", "scope_code", "entity_type",
		"collection_name", "owner_ref", "status"}}
	r := rand.New(rand.NewPCG(registrySeed, 0x0a))
	add := func(scope string, et, coll any, owner string) {
		id := int64(len(t.rows) + 1)
		status := "active"
		if id%17 == 0 {
			status = "inactive"
		}
		t.rows = append(t.rows, []any{id, scope, et, coll, owner, status})
	}
	for _, s := range scopes {
		for _, c := range bornCollections {
			if c.kind != kindRequired && c.kind != kindDeferredScope {
				continue
			}
			if r.IntN(10) < 6 {
				add(s.code, nil, c.name, "team-"+c.domain)
			}
		}
		if s.code == "policy" || s.code == "approval" || s.code == "execution" {
			for _, et := range entityTypes {
				risk, _, _, auth, _ := coverageProfile(et)
				if auth || (risk == riskWriteHigh && r.IntN(2) == 0) {
					add(s.code, et.name, nil, "team-"+bornCollections[et.collection].domain)
				}
			}
		}
	}
	// An owner claims the collection that collection_registry does not list: a realistic inventory gap.
	add("health", nil, "ops_runbook_runs", "team-ops")
	return t
}

// exceptionTable holds approved, expired, revoked and pending exceptions, two of them on single objects.
func exceptionTable() table {
	t := table{name: "governance_exception", cols: []string{"exception_id", "scope_code", "entity_type",
		"collection_name", "entity_code", "approval_ref", "expires_at", "fingerprint", "status"}}
	add := func(id, scope string, et, coll, code, approval any, expires time.Time, status string) {
		fp := sha256.Sum256([]byte(fmt.Sprint(scope, "|", et, "|", coll, "|", code)))
		t.rows = append(t.rows, []any{id, scope, et, coll, code, approval, expires,
			hex.EncodeToString(fp[:16]), status})
	}
	add("EXC-2025-001", "policy", nil, "catalog_price_lists", nil, "APR-2025-0042", fixedTime(2030, 12, 31, 0, 0), "approved")
	add("EXC-2025-002", "approval", "subscription", nil, nil, "APR-2025-0057", fixedTime(2029, 6, 30, 0, 0), "approved")
	add("EXC-2024-003", "audit", nil, "marketing_campaigns", nil, "APR-2024-0113", fixedTime(2025, 3, 31, 0, 0), "approved")
	add("EXC-2026-004", "execution", nil, "commerce_orders", entityCode("order", 1), "APR-2026-0008", fixedTime(2030, 1, 1, 0, 0), "approved")
	add("EXC-2026-005", "policy", nil, "legal_contracts", entityCode("contract", 1), "APR-2026-0011", fixedTime(2026, 2, 28, 0, 0), "approved")
	add("EXC-2025-006", "health", "ticket", nil, nil, "APR-2025-0090", fixedTime(2031, 1, 1, 0, 0), "revoked")
	add("EXC-2026-007", "render", nil, "content_pages", nil, nil, fixedTime(2027, 6, 30, 0, 0), "pending")
	add("EXC-2024-008", "policy", "ledger_entry", nil, nil, "APR-2024-0021", fixedTime(2024, 12, 31, 0, 0), "approved")
	return t
}

func lawJurisdictionTable() table {
	t := table{name: "law_jurisdiction", cols: []string{"law_code", "scope_code", "entity_type", "collection_name"}}
	for i, code := range lawCodes {
		et, coll := lawSelector(i)
		t.rows = append(t.rows, []any{code, lawScope(i, code), et, coll})
	}
	return t
}

func lawCatalogTable() table {
	t := table{name: "law_catalog", cols: []string{"law_code", "title", "version"}}
	topics := []string{"registry visibility", "birth before use", "owner of record", "approval before change",
		"audit trail", "retention", "queue discipline", "signal not data", "exception lifecycle", "coverage duty"}
	for i, code := range lawCodes {
		t.rows = append(t.rows, []any{code, fmt.Sprintf("Article %s — %s", strings.TrimPrefix(code, "DIEU-"),
			topics[i%len(topics)]), fmt.Sprintf("v%d.%d", 1+i%3, i%5)})
	}
	return t
}

func normativeRegistryTable() table {
	t := table{name: "normative_registry", cols: []string{"norm_code", "title", "body"}}
	for _, n := range []struct{ code, title, body string }{
		{"NORM-ROUND4", "Round-4 law", "Every governed object is born before it is used; governance reads, never gates, birth."},
		{"NORM-CANON-V3", "Concept canon v3", "A verdict is qualified by snapshot, ruleset and time; nothing is checked forever."},
		{"NORM-NO-ISLAND", "No island", "No second registry, bus or issue store may be minted beside an existing one."},
		{"NORM-NO-HARDCODE", "No hardcode", "Dimensions and vocabularies come from registries, never from literals."},
		{"NORM-Q45", "Queue law (Điều 45)", "Register before emit; an event asserts a fact and carries no instruction."},
	} {
		t.rows = append(t.rows, []any{n.code, n.title, n.body})
	}
	return t
}

func governanceDocsTable() table {
	t := table{name: "governance_docs", cols: []string{"doc_code", "title", "body"}}
	for _, d := range []struct{ code, title string }{
		{"DOC-31", "Backfill of the governance candidate inventory"},
		{"DOC-32", "Birth/Registry to governance handoff"},
		{"DOC-34", "Incremental candidate scan"},
		{"DOC-38", "Source snapshots and ruleset versions"},
		{"DOC-40", "Candidate-state store"},
		{"DOC-41", "Governance event domain"},
	} {
		t.rows = append(t.rows, []any{d.code, d.title, "Design document " + d.code + ": " + d.title + "."})
	}
	return t
}

func measurementTable() table {
	t := table{name: "measurement_registry", cols: []string{"measurement_id", "measurement_name", "law_code", "method",
		"source_query", "target_query", "comparison", "severity", "enabled", "auto_generated"}}
	r := rand.New(rand.NewPCG(registrySeed, 0x0b))
	severities := []string{"low", "medium", "medium", "high"}
	for i := range numMeasurements {
		law := i
		if i >= len(lawCodes) {
			law = r.IntN(len(lawCodes))
		}
		// The subject of the rule: the law's collection or class when it selects one, else any born collection.
		coll := bornCollections[r.IntN(len(bornCollections))]
		if et, c := lawSelector(law); c != nil {
			for _, bc := range bornCollections {
				if bc.name == c {
					coll = bc
				}
			}
		} else if et != nil {
			for _, e := range entityTypes {
				if e.name == et {
					coll = bornCollections[e.collection]
				}
			}
		}
		method := int16(1 + r.IntN(4))
		var name, src, dst string
		switch method {
		case 1:
			name = "registry count matches source for " + coll.name
			src = fmt.Sprintf("SELECT count(*) FROM birth_registry WHERE collection_name = '%s'", coll.name)
			dst = fmt.Sprintf("SELECT count(*) FROM %s", coll.name)
		case 2:
			name = "active objects of " + coll.name + " are born"
			src = fmt.Sprintf("SELECT count(*) FROM birth_registry WHERE collection_name = '%s' AND status = 'active'", coll.name)
			dst = fmt.Sprintf("SELECT count(*) FROM %s WHERE deleted_at IS NULL", coll.name)
		case 3:
			name = "every " + coll.base + " has an owner of record"
			src = fmt.Sprintf("SELECT count(DISTINCT entity_code) FROM birth_registry WHERE entity_type = '%s'", coll.base)
			dst = fmt.Sprintf("SELECT count(DISTINCT code) FROM %s WHERE owner_ref IS NOT NULL", coll.name)
		default:
			name = "retired " + coll.base + " objects leave the live set"
			src = fmt.Sprintf("SELECT count(*) FROM birth_registry WHERE collection_name = '%s' AND status IN ('retired','superseded','merged')", coll.name)
			dst = fmt.Sprintf("SELECT count(*) FROM %s WHERE archived_at IS NOT NULL", coll.name)
		}
		comparison := "strict_equals"
		switch r.IntN(10) {
		case 0:
			comparison = "within_tolerance"
		case 1:
			comparison = "gte"
		}
		t.rows = append(t.rows, []any{
			fmt.Sprintf("MSR-%04d", i+1), name, lawCodes[law], method, src, dst, comparison,
			severities[r.IntN(len(severities))],
			i != 57 && i != 121, // two disabled rules
			r.IntN(4) == 0,
		})
	}
	return t
}

func pivotTable() table {
	t := table{name: "pivot_definitions", cols: []string{"pivot_code", "axis_family", "entity_type"}}
	for i := range numPivots {
		et := entityTypes[(i*23+1)%len(entityTypes)]
		family := axisFamilies[(i*5+i/8)%len(axisFamilies)]
		t.rows = append(t.rows, []any{fmt.Sprintf("pv_%s_%s", et.name, family), family, et.name})
	}
	return t
}

// eventTypes is the live event vocabulary (doc 41 §41.2): iu 16/16 active, mother 9/0, piece 6/6, staging 5/5,
// system 4/3. There is no governance domain: GCOS registers it.
var eventTypes = []struct {
	domain, name, stream, lane, severity string
	active                               bool
}{
	{"iu", "iu.message.received", "iu.message", "immediate", "info", true},
	{"iu", "iu.message.routed", "iu.message", "immediate", "info", true},
	{"iu", "iu.message.delivered", "iu.message", "immediate", "info", true},
	{"iu", "iu.message.failed", "iu.message", "immediate", "warning", true},
	{"iu", "iu.route.created", "iu.route", "immediate", "info", true},
	{"iu", "iu.route.updated", "iu.route", "immediate", "info", true},
	{"iu", "iu.route.disabled", "iu.route", "immediate", "warning", true},
	{"iu", "iu.thread.opened", "iu.thread", "immediate", "info", true},
	{"iu", "iu.thread.closed", "iu.thread", "immediate", "info", true},
	{"iu", "iu.thread.assigned", "iu.thread", "immediate", "info", true},
	{"iu", "iu.mention.created", "iu.thread", "immediate", "info", true},
	{"iu", "iu.reaction.added", "iu.thread", "digest", "info", true},
	{"iu", "iu.attachment.added", "iu.thread", "immediate", "info", true},
	{"iu", "iu.digest.sent", "iu.digest", "digest", "info", true},
	{"iu", "iu.outbound.retry", "iu.outbound", "immediate", "warning", true},
	{"iu", "iu.outbound.dead_lettered", "iu.outbound", "immediate", "error", true},
	{"mother", "mother.cut.proposed", "mother.cut", "immediate", "info", false},
	{"mother", "mother.cut.approved", "mother.cut", "immediate", "info", false},
	{"mother", "mother.cut.rejected", "mother.cut", "immediate", "warning", false},
	{"mother", "mother.cut.applied", "mother.cut", "immediate", "info", false},
	{"mother", "mother.plan.created", "mother.plan", "immediate", "info", false},
	{"mother", "mother.plan.superseded", "mother.plan", "immediate", "info", false},
	{"mother", "mother.run.started", "mother.run", "immediate", "info", false},
	{"mother", "mother.run.completed", "mother.run", "immediate", "info", false},
	{"mother", "mother.run.failed", "mother.run", "immediate", "error", false},
	{"piece", "piece.created", "piece.lifecycle", "immediate", "info", true},
	{"piece", "piece.updated", "piece.lifecycle", "immediate", "info", true},
	{"piece", "piece.published", "piece.lifecycle", "immediate", "info", true},
	{"piece", "piece.archived", "piece.lifecycle", "immediate", "info", true},
	{"piece", "piece.linked", "piece.graph", "digest", "info", true},
	{"piece", "piece.reviewed", "piece.review", "immediate", "info", true},
	{"staging", "staging.batch.received", "staging.batch", "immediate", "info", true},
	{"staging", "staging.batch.validated", "staging.batch", "immediate", "info", true},
	{"staging", "staging.batch.rejected", "staging.batch", "immediate", "warning", true},
	{"staging", "staging.batch.promoted", "staging.batch", "immediate", "info", true},
	{"staging", "staging.batch.expired", "staging.batch", "digest", "warning", true},
	{"system", "system.heartbeat", "system.health", "immediate", "info", true},
	{"system", "system.maintenance.started", "system.ops", "immediate", "warning", true},
	{"system", "system.maintenance.finished", "system.ops", "immediate", "info", true},
	{"system", "system.legacy_ping", "system.health", "immediate", "info", false},
}

func eventTypeTable() table {
	t := table{name: "event_type_registry", cols: []string{"event_domain", "event_type", "event_stream",
		"delivery_lane", "default_severity", "description", "active", "created_at"}}
	for i, e := range eventTypes {
		desc := fmt.Sprintf("%s (%s stream)", strings.ReplaceAll(strings.TrimPrefix(e.name, e.domain+"."), ".", " "), e.stream)
		t.rows = append(t.rows, []any{e.domain, e.name, e.stream, e.lane, e.severity, desc, e.active,
			fixedTime(2025, time.Month(1+i%12), 1+i%27, 9, i)})
	}
	return t
}

// fixedUUID derives a stable version-4-shaped UUID from a name.
func fixedUUID(name string) [16]byte {
	sum := sha256.Sum256([]byte("gcos-world:" + name))
	var u [16]byte
	copy(u[:], sum[:16])
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return u
}

func eventSubscriptionTable() table {
	t := table{name: "event_subscription", cols: []string{"id", "recipient_ref", "event_domain", "event_type",
		"event_stream", "scope_subject_table", "scope_filter", "mute", "created_at"}}
	t.rows = [][]any{
		{fixedUUID("sub-1"), "GOV-DOT", "iu", nil, nil, nil, `{}`, false, fixedTime(2025, 4, 2, 10, 0)},
		{fixedUUID("sub-2"), "ops:lan.nguyen", "iu", nil, "iu.outbound", "event_outbox", `{"delivery_lane": "immediate"}`, false, fixedTime(2025, 6, 11, 14, 30)},
		{fixedUUID("sub-3"), "iu-router", "iu", "iu.message.failed", nil, nil, `{}`, true, fixedTime(2025, 9, 23, 8, 15)},
	}
	return t
}

func heartbeatTable() table {
	t := table{name: "queue_heartbeat", cols: []string{"executor_name", "executor_kind", "last_tick_at",
		"last_tick_status", "lease_owner", "lease_expires_at"}}
	t.rows = [][]any{
		{"dieu45_phase3_pilot", "pilot", fixedTime(2026, 5, 31, 23, 55), "ok", nil, nil},
		{"iu_outbound_default", "route_worker", fixedTime(2026, 5, 31, 23, 58), "ok", "iu-worker-1", fixedTime(2026, 6, 1, 0, 3)},
		{"staging_promoter", "batch", fixedTime(2026, 5, 31, 22, 0), "ok", nil, nil},
	}
	return t
}

func routeCursorTable() table {
	t := table{name: "iu_route_worker_cursor", cols: []string{"worker_name", "source", "last_created_at",
		"last_event_id", "events_seen", "attempts_written", "dead_lettered", "last_run_at", "last_run_summary",
		"metadata"}}
	u := fixedUUID("iu-last-event")
	last := fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
	t.rows = [][]any{{
		"iu_outbound_default", "event_outbox", fixedTime(2026, 5, 31, 18, 0), last,
		int64(68), int64(68), int64(0), fixedTime(2026, 5, 31, 23, 58),
		`{"seen": 68, "written": 68, "dead_lettered": 0}`,
		`{"event_domain": "iu", "poll_interval": "5s", "batch": 500}`,
	}}
	return t
}

// registryTables returns every small table of the world, in load order.
func registryTables() []table {
	return []table{
		collectionRegistryTable(),
		metaCatalogTable(),
		measurementTable(),
		pivotTable(),
		lawJurisdictionTable(),
		normativeRegistryTable(),
		lawCatalogTable(),
		governanceDocsTable(),
		responsibilityScopeTable(),
		coverageProfileTable(),
		ownershipTable(),
		exceptionTable(),
		eventTypeTable(),
		eventSubscriptionTable(),
		heartbeatTable(),
		routeCursorTable(),
	}
}
