// Package postgres is GCOS's store: every query GCOS runs against PostgreSQL, the transactions around them,
// substrate verification and the mapping of driver errors to gcos error codes. It is the only package that
// imports pgx (its subpackages migration, substrate and pgtest serve it).
package postgres
