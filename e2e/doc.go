// Package e2e holds end-to-end reliability tests that need a PostgreSQL server of their own, because they stop and
// restart it: the shared test harness (pgtest) cannot give them that.
package e2e
