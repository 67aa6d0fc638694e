package world

import "fmt"

// The fixed shape of the synthetic world: which collections exist, which of them receive births and in which order of
// size, and what coverage status and scope class the collection registry gives them. None of it depends on the seed
// or on the number of births, so every world has the same registries and only row-level content varies.

// collectionKind is a (coverage_status, scope_class) pair of collection_registry, or kindMissing for the one birth
// collection that collection_registry does not list.
type collectionKind uint8

const (
	kindRequired       collectionKind = iota // BIRTH_REQUIRED / IN_SCOPE
	kindUserExcluded                         // BIRTH_DEFERRED_NEEDS_REVIEW / USER_EXCLUDED
	kindFutureScope                          // BIRTH_DEFERRED_NEEDS_REVIEW / FUTURE_SCOPE
	kindOrphan                               // BIRTH_DEFERRED_NEEDS_REVIEW / ORPHAN_REGISTRY
	kindDeferredScope                        // BIRTH_DEFERRED_NEEDS_REVIEW / IN_SCOPE
	kindExemptSystem                         // BIRTH_EXEMPT_SYSTEM / IN_SCOPE
	kindExemptDerived                        // BIRTH_EXEMPT_DERIVED / IN_SCOPE
	kindExemptExternal                       // BIRTH_EXEMPT_EXTERNAL / IN_SCOPE
	kindMissing                              // born, but absent from collection_registry
)

// Coverage statuses and scope classes of collection_registry.
const (
	coverageRequired       = "BIRTH_REQUIRED"
	coverageDeferred       = "BIRTH_DEFERRED_NEEDS_REVIEW"
	coverageExemptSystem   = "BIRTH_EXEMPT_SYSTEM"
	coverageExemptDerived  = "BIRTH_EXEMPT_DERIVED"
	coverageExemptExternal = "BIRTH_EXEMPT_EXTERNAL"

	scopeInScope        = "IN_SCOPE"
	scopeUserExcluded   = "USER_EXCLUDED"
	scopeFutureScope    = "FUTURE_SCOPE"
	scopeOrphanRegistry = "ORPHAN_REGISTRY"
)

// registryColumns returns the coverage_status and scope_class of a kind; ok is false for kindMissing.
func (k collectionKind) registryColumns() (coverageStatus, scopeClass string, ok bool) {
	switch k {
	case kindRequired:
		return coverageRequired, scopeInScope, true
	case kindUserExcluded:
		return coverageDeferred, scopeUserExcluded, true
	case kindFutureScope:
		return coverageDeferred, scopeFutureScope, true
	case kindOrphan:
		return coverageDeferred, scopeOrphanRegistry, true
	case kindDeferredScope:
		return coverageDeferred, scopeInScope, true
	case kindExemptSystem:
		return coverageExemptSystem, scopeInScope, true
	case kindExemptDerived:
		return coverageExemptDerived, scopeInScope, true
	case kindExemptExternal:
		return coverageExemptExternal, scopeInScope, true
	default:
		return "", "", false
	}
}

// collectionSpec is one collection of the world. base names the collection's first entity type; further types of the
// same collection are base + a variant suffix. base is empty for collections that receive no births.
type collectionSpec struct {
	name   string
	base   string
	domain string
	kind   collectionKind
}

// bornCollections are the 78 collections that receive births, in decreasing order of size (rank 1 first).
var bornCollections = []collectionSpec{
	{"commerce_orders", "order", "commerce", kindRequired},
	{"billing_invoices", "invoice", "billing", kindRequired},
	{"sys_audit_events", "audit_event", "sys", kindExemptSystem},
	{"catalog_products", "product", "catalog", kindRequired},
	{"crm_contacts", "contact", "crm", kindRequired},
	{"logistics_shipments", "shipment", "logistics", kindRequired},
	{"user_bookmarks", "bookmark", "user", kindUserExcluded},
	{"payments_transactions", "payment", "payments", kindRequired},
	{"inventory_stock_items", "stock_item", "inventory", kindRequired},
	{"analytics_daily_rollups", "daily_rollup", "analytics", kindExemptDerived},
	{"support_tickets", "ticket", "support", kindRequired},
	{"content_articles", "article", "content", kindRequired},
	{"identity_accounts", "account", "identity", kindRequired},
	{"ops_runbook_runs", "runbook_run", "ops", kindMissing},
	{"crm_leads", "lead", "crm", kindRequired},
	{"procurement_purchase_orders", "purchase_order", "procurement", kindRequired},
	{"user_saved_searches", "saved_search", "user", kindUserExcluded},
	{"media_assets", "media_asset", "media", kindRequired},
	{"hr_employees", "employee", "hr", kindRequired},
	{"sys_job_runs", "job_run", "sys", kindExemptSystem},
	{"legal_contracts", "contract", "legal", kindRequired},
	{"iot_device_readings", "device_reading", "iot", kindFutureScope},
	{"marketing_campaigns", "campaign", "marketing", kindRequired},
	{"billing_subscriptions", "subscription", "billing", kindRequired},
	{"ext_partner_feeds", "partner_feed_item", "ext", kindExemptExternal},
	{"catalog_price_lists", "price_list", "catalog", kindRequired},
	{"logistics_warehouses", "warehouse", "logistics", kindRequired},
	{"user_drafts", "user_draft", "user", kindUserExcluded},
	{"risk_assessments", "risk_assessment", "risk", kindRequired},
	{"search_index_views", "index_view", "search", kindExemptDerived},
	{"finance_ledger_entries", "ledger_entry", "finance", kindRequired},
	{"support_knowledge_base", "kb_entry", "support", kindRequired},
	{"identity_roles", "role", "identity", kindRequired},
	{"legacy_customer_archive", "legacy_customer", "legacy", kindOrphan},
	{"compliance_controls", "control", "compliance", kindRequired},
	{"sales_quotes", "quote", "sales", kindRequired},
	{"sys_config_items", "config_item", "sys", kindExemptSystem},
	{"geo_locations", "location", "geo", kindRequired},
	{"hr_positions", "position", "hr", kindRequired},
	{"ml_feature_sets", "feature_set", "ml", kindFutureScope},
	{"content_pages", "page", "content", kindRequired},
	{"procurement_suppliers", "supplier", "procurement", kindRequired},
	{"user_preferences", "preference", "user", kindUserExcluded},
	{"finance_budgets", "budget", "finance", kindRequired},
	{"legal_policies", "policy_doc", "legal", kindRequired},
	{"sys_feature_flags", "feature_flag", "sys", kindExemptSystem},
	{"marketing_segments", "segment", "marketing", kindRequired},
	{"catalog_categories", "category", "catalog", kindRequired},
	{"partner_agreements", "partner_agreement", "partner", kindDeferredScope},
	{"logistics_carriers", "carrier", "logistics", kindRequired},
	{"reporting_kpi_snapshots", "kpi_snapshot", "reporting", kindExemptDerived},
	{"identity_groups", "access_group", "identity", kindRequired},
	{"payments_payouts", "payout", "payments", kindRequired},
	{"user_notification_settings", "notification_setting", "user", kindUserExcluded},
	{"compliance_evidence", "evidence", "compliance", kindRequired},
	{"sales_territories", "territory", "sales", kindRequired},
	{"sys_schedules", "schedule", "sys", kindExemptSystem},
	{"media_playlists", "playlist", "media", kindRequired},
	{"ai_prompt_library", "prompt_template", "ai", kindFutureScope},
	{"risk_incidents", "incident", "risk", kindRequired},
	{"hr_trainings", "training", "hr", kindRequired},
	{"ext_market_rates", "market_rate", "ext", kindExemptExternal},
	{"billing_tax_rates", "tax_rate", "billing", kindRequired},
	{"user_workspaces", "workspace", "user", kindUserExcluded},
	{"geo_regions", "region", "geo", kindRequired},
	{"content_glossary", "glossary_term", "content", kindRequired},
	{"finance_cashflow_views", "cashflow_view", "finance", kindExemptDerived},
	{"crm_accounts", "customer_account", "crm", kindRequired},
	{"legacy_order_imports", "legacy_order", "legacy", kindOrphan},
	{"audit_findings", "finding", "audit", kindRequired},
	{"sys_api_clients", "api_client", "sys", kindExemptSystem},
	{"procurement_catalogs", "supplier_catalog", "procurement", kindRequired},
	{"user_tags", "user_tag", "user", kindUserExcluded},
	{"marketing_channels", "channel", "marketing", kindRequired},
	{"blockchain_anchors", "anchor", "blockchain", kindFutureScope},
	{"legal_jurisdictions", "jurisdiction", "legal", kindRequired},
	{"user_reading_lists", "reading_list", "user", kindUserExcluded},
	{"data_retention_rules", "retention_rule", "data", kindRequired},
}

// registryOnlyCollections are the 91 collections listed in collection_registry that receive no births.
var registryOnlyCollections = []collectionSpec{
	// BIRTH_REQUIRED / IN_SCOPE (24)
	{name: "hr_payroll_runs", kind: kindRequired},
	{name: "hr_leave_requests", kind: kindRequired},
	{name: "crm_opportunities", kind: kindRequired},
	{name: "crm_activities", kind: kindRequired},
	{name: "catalog_bundles", kind: kindRequired},
	{name: "catalog_attributes", kind: kindRequired},
	{name: "commerce_carts", kind: kindRequired},
	{name: "commerce_returns", kind: kindRequired},
	{name: "commerce_promotions", kind: kindRequired},
	{name: "billing_credit_notes", kind: kindRequired},
	{name: "billing_dunning_cases", kind: kindRequired},
	{name: "payments_refunds", kind: kindRequired},
	{name: "payments_disputes", kind: kindRequired},
	{name: "logistics_routes", kind: kindRequired},
	{name: "logistics_customs_declarations", kind: kindRequired},
	{name: "inventory_locations", kind: kindRequired},
	{name: "inventory_adjustments", kind: kindRequired},
	{name: "support_slas", kind: kindRequired},
	{name: "content_translations", kind: kindRequired},
	{name: "media_licenses", kind: kindRequired},
	{name: "legal_claims", kind: kindRequired},
	{name: "compliance_audits", kind: kindRequired},
	{name: "risk_control_tests", kind: kindRequired},
	{name: "finance_cost_centers", kind: kindRequired},
	// BIRTH_DEFERRED_NEEDS_REVIEW / USER_EXCLUDED (23)
	{name: "user_avatars", kind: kindUserExcluded},
	{name: "user_session_history", kind: kindUserExcluded},
	{name: "user_recent_items", kind: kindUserExcluded},
	{name: "user_favorites", kind: kindUserExcluded},
	{name: "user_shortcuts", kind: kindUserExcluded},
	{name: "user_dashboards", kind: kindUserExcluded},
	{name: "user_filters", kind: kindUserExcluded},
	{name: "user_comment_drafts", kind: kindUserExcluded},
	{name: "user_uploads", kind: kindUserExcluded},
	{name: "user_private_contacts", kind: kindUserExcluded},
	{name: "user_calendar_events", kind: kindUserExcluded},
	{name: "user_todo_lists", kind: kindUserExcluded},
	{name: "user_reactions", kind: kindUserExcluded},
	{name: "user_follows", kind: kindUserExcluded},
	{name: "user_annotations", kind: kindUserExcluded},
	{name: "user_clipboards", kind: kindUserExcluded},
	{name: "user_layouts", kind: kindUserExcluded},
	{name: "user_themes", kind: kindUserExcluded},
	{name: "user_devices", kind: kindUserExcluded},
	{name: "user_onboarding_steps", kind: kindUserExcluded},
	{name: "user_feedback_notes", kind: kindUserExcluded},
	{name: "user_invitations", kind: kindUserExcluded},
	{name: "user_api_tokens", kind: kindUserExcluded},
	// BIRTH_DEFERRED_NEEDS_REVIEW / FUTURE_SCOPE (13)
	{name: "iot_devices", kind: kindFutureScope},
	{name: "iot_firmware_releases", kind: kindFutureScope},
	{name: "ml_models", kind: kindFutureScope},
	{name: "ml_training_runs", kind: kindFutureScope},
	{name: "ml_datasets", kind: kindFutureScope},
	{name: "ai_agents", kind: kindFutureScope},
	{name: "ai_evaluations", kind: kindFutureScope},
	{name: "blockchain_wallets", kind: kindFutureScope},
	{name: "ar_scenes", kind: kindFutureScope},
	{name: "voice_intents", kind: kindFutureScope},
	{name: "quantum_jobs", kind: kindFutureScope},
	{name: "edge_nodes", kind: kindFutureScope},
	{name: "satellite_passes", kind: kindFutureScope},
	// BIRTH_DEFERRED_NEEDS_REVIEW / ORPHAN_REGISTRY (5)
	{name: "legacy_product_master", kind: kindOrphan},
	{name: "legacy_fax_inbox", kind: kindOrphan},
	{name: "legacy_crm_notes", kind: kindOrphan},
	{name: "legacy_billing_v1", kind: kindOrphan},
	{name: "legacy_tickets_2019", kind: kindOrphan},
	// BIRTH_DEFERRED_NEEDS_REVIEW / IN_SCOPE (2)
	{name: "partner_onboarding_cases", kind: kindDeferredScope},
	{name: "partner_scorecards", kind: kindDeferredScope},
	// BIRTH_EXEMPT_SYSTEM (14)
	{name: "sys_migrations", kind: kindExemptSystem},
	{name: "sys_locks", kind: kindExemptSystem},
	{name: "sys_queues", kind: kindExemptSystem},
	{name: "sys_webhooks", kind: kindExemptSystem},
	{name: "sys_cron_history", kind: kindExemptSystem},
	{name: "sys_metric_buffers", kind: kindExemptSystem},
	{name: "sys_cache_keys", kind: kindExemptSystem},
	{name: "sys_sessions", kind: kindExemptSystem},
	{name: "sys_rate_limits", kind: kindExemptSystem},
	{name: "sys_health_checks", kind: kindExemptSystem},
	{name: "sys_secret_refs", kind: kindExemptSystem},
	{name: "sys_templates", kind: kindExemptSystem},
	{name: "sys_translation_cache", kind: kindExemptSystem},
	{name: "sys_event_dedup", kind: kindExemptSystem},
	// BIRTH_EXEMPT_DERIVED (8)
	{name: "analytics_weekly_rollups", kind: kindExemptDerived},
	{name: "analytics_funnels", kind: kindExemptDerived},
	{name: "reporting_dashboard_cache", kind: kindExemptDerived},
	{name: "search_suggestions", kind: kindExemptDerived},
	{name: "finance_pnl_views", kind: kindExemptDerived},
	{name: "crm_segment_memberships", kind: kindExemptDerived},
	{name: "catalog_search_facets", kind: kindExemptDerived},
	{name: "inventory_forecast_views", kind: kindExemptDerived},
	// BIRTH_EXEMPT_EXTERNAL (2)
	{name: "ext_geo_reference", kind: kindExemptExternal},
	{name: "ext_currency_codes", kind: kindExemptExternal},
}

// typeSuffixes name the variant entity types of a collection: type j of a collection is base + typeSuffixes[j].
var typeSuffixes = []string{"", "_line", "_version", "_attachment", "_link", "_note", "_event", "_snapshot",
	"_template", "_batch", "_rule", "_tag"}

// Live cardinalities (doc 40 §40.2, doc 41 §41.2).
const (
	numBirthCollections    = 78
	numRegistryCollections = 168
	numEntityTypes         = 169
	numMeasurements        = 142
	numEnabledMeasurements = 140
	numLaws                = 43
	numPivots              = 37
	numEventTypes          = 40

	// DefaultBirths is the number of births of the live organisation and the default of Options.Births.
	DefaultBirths = 1_037_724
	// DefaultChanges is the number of registry_changelog rows of the live organisation and the default of
	// Options.Changes.
	DefaultChanges = 68_323
	// MinBirths is the smallest world: every entity type has at least one birth.
	MinBirths = numEntityTypes
)

// checkCatalog verifies the static tables above against the live cardinalities; it runs once at init, so a bad edit
// fails every test at once.
func checkCatalog() error {
	if len(bornCollections) != numBirthCollections {
		return fmt.Errorf("%d born collections, want %d", len(bornCollections), numBirthCollections)
	}
	want := map[collectionKind]int{
		kindRequired: 74, kindUserExcluded: 31, kindFutureScope: 17, kindOrphan: 7, kindDeferredScope: 3,
		kindExemptSystem: 20, kindExemptDerived: 12, kindExemptExternal: 4, kindMissing: 1,
	}
	got := map[collectionKind]int{}
	seen := map[string]bool{}
	bases := map[string]bool{}
	for _, c := range bornCollections {
		got[c.kind]++
		if c.base == "" || bases[c.base] {
			return fmt.Errorf("collection %s: empty or duplicate base type %q", c.name, c.base)
		}
		bases[c.base] = true
		if seen[c.name] {
			return fmt.Errorf("duplicate collection %s", c.name)
		}
		seen[c.name] = true
	}
	for _, c := range registryOnlyCollections {
		got[c.kind]++
		if seen[c.name] {
			return fmt.Errorf("duplicate collection %s", c.name)
		}
		seen[c.name] = true
	}
	for k, n := range want {
		if got[k] != n {
			return fmt.Errorf("kind %d: %d collections, want %d", k, got[k], n)
		}
	}
	return nil
}

func init() {
	if err := checkCatalog(); err != nil {
		panic("world: inconsistent catalog: " + err.Error())
	}
}
