// Package scan is the scan stage (doc 34 §5): GCOS's three scan modes over one shared dirty set.
//
//   - tick.go: the scan tick: claim a bounded batch of dirty (or expired, or unseeded) groups, re-evaluate them under
//     the current ruleset and write their verdicts in the claim's transaction; stale-row expiry; the storm throttle;
//   - placement.go: where a claimed group's members are now (moved and emptied groups);
//   - fullaudit.go: the periodic full audit: a fresh snapshot, drift against the last one, reconciliation;
//   - scan.go: the Scheduler running the event-driven loop (woken by LISTEN/NOTIFY, debounced by the coalesce
//     window), the incremental loop and the full audit's holder, with the audit's verification.
//
// The stage reaches candidate state only through the store core's surface (postgres: evaluate, write verdicts,
// seed, mark dirty, object rows, counts). All state lives in PostgreSQL: a scheduler killed at any point loses
// nothing and duplicates nothing.
package scan
