// Package postgres is GCOS's store core: pools (the gate has its own), transactions with retry accounting and lease
// fencing, role leases, migrations and substrate verification, the birth binding's SQL over configured names,
// snapshots, rulesets and runs, and the small candidate-state surface the stages share: the registries an evaluation
// reads (RegistriesUnder), seed (SeedCandidates), mark dirty (MarkDirtyTx, MarkKeysDirtyTx), write verdicts
// (WriteVerdicts) and record their changes (RecordVerdictChangesTx), kept and live member counts, and the change feed a gate's
// verdict view catches up from. The event domain's emit path and vocabulary live here too. Driver errors are mapped
// to gcos error codes here (MapError, Unreachable). The stages (intake, scan, gate) build on this package and never
// on each other.
package postgres
