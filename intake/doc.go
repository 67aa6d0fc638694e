// Package intake is the handoff intake worker (SPEC §9, doc 32 §5): it tails each source registry through the
// store's lossless cursor (postgres.PollTail), hands every row to an apply step in the poll's own transaction,
// retries rows that fail and dead-letters them after the configured attempts, ticks a heartbeat per source and
// raises handoff_lag when a tail falls behind. It holds no state of its own: everything lives in the database, so
// a worker killed at any point resumes where its last committed poll left off, losing and duplicating nothing.
package intake
