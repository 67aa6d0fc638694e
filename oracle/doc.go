// Package oracle is GCOS's judge: a reference evaluator that derives, from scratch, what the incremental state
// should say, and a comparison that names every place where it does not.
//
// Evaluate reads nothing but the substrate at one instant (births, collection_registry, meta_catalog, ownership,
// exceptions and open input findings, all in one REPEATABLE READ transaction) and the active ruleset's components,
// and derives for every object and scope its group, the group's owner, verdict and coverage, the object rows that
// must exist, the invariant ledger and the gate decision. It uses none of GCOS's incremental state (candidate rows,
// dirty marks, cursors, snapshots) and none of the SQL that feeds the scans: it shares only the pure domain
// functions (the verdict policy, decay, the gate rule, group keys) and the definition of an object's fingerprint.
// It never holds the births: the database counts every base group's members (walking each parent chain to its
// anchor), and a birth is read one by one only where an object row or a gate decision needs it.
//
// Verify compares a live database's incremental state with the reference at the same instant (`gcos verify`, and
// the periodic full audit, which raises a verify_mismatch finding when they differ).
package oracle
