// Package world generates the deterministic synthetic world GCOS runs against in the demo, the tests and the
// benchmarks: the substrate tables of SPEC §3.1 filled with the live cardinalities of the design documents (doc 40
// §40.2, doc 41 §41.2). It owns nothing else: it only writes substrate tables, and only into an empty database.
//
// # What Generate writes
//
//   - birth_registry: Options.Births births (default 1,037,724) over exactly 78 collections with Zipf-like sizes
//     (at the default size the largest holds about 356,000, three hold over 100,000, the smallest a few hundred).
//     born_at grows with id from 2024-01-01T00:00:00Z to before 2026-06-01T00:00:00Z: the first 35% are a bulk import
//     during the first 72 hours (source_system "import-2024"), the rest a steady stream ("birth-api",
//     "registry-sync"). entity_code is "<entity_type>-<n>", n counting the births of that type from 1, zero-padded
//     to 7 digits. canonical_address and parent_code are NULL in every row. status is active (≈88.7%), retired
//     (≈6%), superseded (≈2.5%), merged (≈1.2%), draft (≈1%) or pending (≈0.6%); older births are more often
//     retired, drafts and pending ones are recent.
//   - meta_catalog: 169 entity types, each in exactly one of the 78 birth collections (1 to 6 types per
//     collection, every type has births). Type names are a collection's base name plus a variant suffix
//     ("order", "order_line", "order_version", …).
//   - collection_registry: 168 rows — BIRTH_REQUIRED/IN_SCOPE 74; BIRTH_DEFERRED_NEEDS_REVIEW 58 (USER_EXCLUDED 31,
//     FUTURE_SCOPE 17, ORPHAN_REGISTRY 7, IN_SCOPE 3); BIRTH_EXEMPT_SYSTEM 20, BIRTH_EXEMPT_DERIVED 12,
//     BIRTH_EXEMPT_EXTERNAL 4 (IN_SCOPE). 77 of the 78 birth collections are listed (every status/scope kind has
//     births: 50, 8, 4, 2, 1, 6, 4, 2); "ops_runbook_runs" (about 9,000 births) is not — the inventory gap GCOS must
//     report as birth_or_registry_missing. The other 91 rows have no births.
//   - measurement_registry: 142 rules (MSR-0001…), 140 enabled, over the 43 law codes (every law has a rule);
//     method 1–4, plausible source/target SQL that nobody executes, comparison mostly strict_equals, severity
//     low/medium/high, about a quarter auto_generated.
//   - law_jurisdiction: the 43 law codes DIEU-01…DIEU-50 (seven numbers unused) → one of the 6 scopes; a third of
//     the laws select one entity type, a third one collection (one of them a collection without births), a third
//     only their scope. law_catalog has a row per law; normative_registry and governance_docs a few rows. GCOS never
//     writes these three.
//   - pivot_definitions: 37 pivots (pv_<type>_<family>) on 37 distinct entity types over 8 axis families
//     (geography, channel, tenant, product_line, lifecycle_stage, currency, language, risk_tier).
//   - governance_responsibility_scope: policy GOV-COUNCIL, health GOV-SIV, execution GOV-DOT, render GOV-RENDER,
//     approval GOV-APR, audit GOV-AUDIT.
//   - governance_coverage_profile: all 169 types; risk_class write_high, write_medium or read_descriptive, NULL for
//     5 types ("unknown risk"); coverage_required; privacy shared (most), private, user, session; 5 independently
//     authoritative types (contract, policy_doc, control, role, jurisdiction: about 7,000 objects); write_path for write_high types and base
//     write_medium types.
//   - governance_object_ownership: owners ("team-<domain>") for about 60% of the (scope, BIRTH_REQUIRED or
//     deferred-in-scope collection) pairs, plus entity-type owners of authoritative and some write_high types in the
//     policy, approval and execution scopes; every 17th row inactive; one row owns the unlisted collection. The rest
//     are orphans.
//   - governance_exception: 8 exceptions — approved and unexpired, approved and expired, revoked, pending; two on a
//     single object (commerce_orders:order-0000001, legal_contracts:contract-0000001).
//   - event_type_registry: 40 types — iu 16 (all active), mother 9 (none active), piece 6 (all active), staging 5
//     (all active), system 4 (3 active); no governance domain. event_subscription: 3 rows on the iu domain.
//   - queue_heartbeat: 3 executors; iu_route_worker_cursor: 1 row (iu_outbound_default).
//   - registry_changelog: Options.Changes history rows (default 68,323) spread over the same time line as the
//     births, "timestamp" non-decreasing with id; an object row only names a birth already born at its time.
//
// event_outbox, event_pending, event_read, system_issues and evolution_snapshots stay empty. Explicit ids are written
// and every filled id sequence is then moved to max(id), so later inserts continue after them.
//
// Registries are fixed: they depend neither on the seed nor on the number of births. The sizes of collections and
// types depend only on the number of births. The seed (math/rand/v2 PCG streams, one per kind of content) drives
// everything row-level: order and timing of births, statuses, provenance, the history. The same seed and options
// give byte-identical rows; nothing reads the clock.
//
// # registry_changelog vocabulary
//
// entity_type is either an entity type of meta_catalog (a change about one born object; entity_code is its code,
// in the collection meta_catalog gives the type) or one of these registry words:
//
//	entity_type       entity_code                         actions
//	<entity type>     the object's entity_code            create, register, update, retire, supersede, merge
//	collection        collection_name                     count_changed, update, create
//	source            collection_name                     source_changed
//	pivot             pivot_code                          axis_introduced, update
//	law_jurisdiction  law_code                            policy_changed, update
//	measurement       measurement_id                      policy_changed, update, create
//	ownership         governance_object_ownership.id      owner_changed, approval_changed
//	exception         exception_id                        exception_changed, approval_changed
//
// alert_level is info, warning or critical (retire/supersede/merge and the authority and policy actions are more
// often warnings); resolved is mostly true for info rows and less often for warnings and critical rows. changed_by is
// an actor: import-runner, birth-gateway, registry-sync-bot, measurement-generator, gov:council, ops:<name>.
// alert_detail is a short human sentence ("births 1204 -> 1231", "status active -> retired in commerce_orders").
//
// The mapping to the handoff kinds of doc 32 §3 that this vocabulary is designed for (the intake's configuration
// decides):
//
//	<entity type> create, register, update     object_registered
//	<entity type> retire, supersede, merge     object_retired
//	collection create, update                  collection_changed
//	collection count_changed                   count_changed
//	source source_changed                      source_changed
//	pivot axis_introduced, update              axis_introduced
//	law_jurisdiction *, measurement *          policy_changed
//	ownership *, exception *                   authority_changed
//
// (object_born comes from birth_registry itself; ruleset_changed only from GCOS's own governance_* rows.)
//
// # Children and churn
//
// AddChildren (and Options.Children) add inherited children under one container of a BIRTH_REQUIRED/IN_SCOPE
// collection: same collection and entity type, parent_code = the container's code, entity_code
// "<container code>-c<id>". Churn keeps the world moving for the demo daemon: births with codes "<type>-r<id>" and
// registry_changelog rows in the vocabulary above, at given rates, timestamped by the database clock. The three code
// shapes never collide.
package world
