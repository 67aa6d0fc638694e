// Command bench measures GCOS against the performance targets of SPEC §14, each side by side with the naive
// "re-derive everything every pass" baseline measured in the same run:
//
//	go run ./bench [-database-url DSN] [-births N] [-reps N] [-only a,b] [-json] [-scale10m]
//
// Without -database-url it starts a throwaway embedded PostgreSQL cluster (gcos/embeddedpg, Ephemeral) in a temp
// dir and removes it at the end. Each benchmark creates its own database (substrate + GCOS migrations), loads the
// synthetic world with gcos/world and drops the database at the end, also on failure and on Ctrl-C.
//
// Benchmarks (names for -only): snapshot, backfill, children, intake, latency, rescan, gate, gate_readers, verify, memory, fleet. Figures are
// medians over -reps repetitions; the gain column says how many times better GCOS is than the naive baseline (naive
// ÷ ours for a cost, ours ÷ naive for a rate). This is a command, never part of `go test`.
package main
