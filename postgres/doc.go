// Package postgres is GCOS's store core: pools (the gate has its own), transactions with retry accounting and lease
// fencing, role leases, migrations and substrate verification, the birth binding's SQL over configured names,
// snapshots, rulesets and runs, and the small candidate-state surface the stages share: evaluate (NewEvaluator),
// seed (SeedCandidates), mark dirty (MarkDirtyTx, MarkKeysDirtyTx), write verdicts (WriteVerdicts), object rows
// (UpsertObjectRows, MaterializeObjects, FollowObjects), kept and live member counts. The gate, explain and invariant
// reads live here too, on the gate's pool, and so do the event domain's emit path and vocabulary. Driver errors are
// mapped to gcos error codes here (MapError, Unreachable). The stages (intake, scan) build on this package and never
// on each other.
package postgres
