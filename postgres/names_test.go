package postgres_test

import (
	"strings"
	"testing"

	"gcos/postgres"
)

func TestNamesQuoteEveryConfiguredName(t *testing.T) {
	t.Parallel()
	names := postgres.Names{"t": {"ops", "Birth Registry"}, "id": {`we"ird`}, "col": {"", "status"}}
	for _, tc := range []struct{ text, want string }{
		{"SELECT t.{id} FROM {t} t", `SELECT t."we""ird" FROM "ops"."Birth Registry" t`},
		{"SELECT {col}", `SELECT "status"`}, // an empty part (no schema) is left out
		{"SELECT coalesce($1::bigint[], '{}')", "SELECT coalesce($1::bigint[], '{}')"},
		{"SELECT '{1,2}'::int[]", "SELECT '{1,2}'::int[]"},
	} {
		if got := names.SQL(tc.text); got != tc.want {
			t.Errorf("SQL(%q) = %q, want %q", tc.text, got, tc.want)
		}
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "{nosuch}") {
			t.Fatalf("an unbound placeholder: recovered %v, want a panic naming it", r)
		}
	}()
	names.SQL("SELECT {nosuch}")
}
