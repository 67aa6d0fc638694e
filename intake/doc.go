// Package intake is the intake stage (SPEC §9, doc 32 §5–6): everything between a source registry's rows and the
// dirty marks they cause.
//
//   - tail.go: the lossless cursor tail: visibility horizon, keyset pages, cursor advance in the apply step's
//     transaction; retry.go: the retry lane and dead letters; cursor.go: cursors and their reset (a replay);
//     check.go: the preconditions checked at start and the cursor row; lag.go: how far behind a tail is;
//   - sweep.go: the id sweep that hands off rows committed behind or ahead of the cursor;
//   - handoff.go: the mapping of each row to a change kind and the groups it provably affects, and the apply step
//     that dirties them and emits the handoff signals (Stage.ApplyHandoff);
//   - backfill.go, handshake.go: the seed, and its handshake with the tail (cursors start at the seed's horizon);
//   - silence.go, monitor.go: the silent-gap check and the loop that runs it under its lease;
//   - worker.go: the loop that polls every source (probe.go: between polls, a quiet worker probes each source for
//     a row beyond its cursor and polls at once when one is there); storm.go: the storm rule over each of its ticks (a tick that
//     dirties more than scan.storm_fraction of all groups raises group_invalidation_storm).
//
// The stage reaches candidate state only through the store core's surface (postgres: seed, mark dirty, object
// rows, kept counts, the current ruleset). It holds no state of its own beyond caches: everything lives in the
// database, so a worker killed at any point resumes where its last committed poll left off, losing and duplicating
// nothing.
package intake
