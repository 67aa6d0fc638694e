// Package gate is the gate stage (SPEC §12): "may this action proceed on this object?", answered fail-closed from
// the candidate state the scans write. It holds the single and batch decisions (gcos.GateObject decides; this
// package reads), the in-process verdict view that answers within gate.max_staleness, the synchronous re-scan of a
// stale high-risk group (through a Rescanner the daemon hands New), explain, the invariant read, and the routing of
// read-throughs to a replica proven fresh. It reads through the store core's gate pool and writes only its
// follow-ups (dirty marks, findings); it imports the core and the root package, never another stage.
package gate
