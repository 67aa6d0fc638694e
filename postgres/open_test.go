package postgres_test

import (
	"context"
	"strings"
	"testing"

	"gcos"
	"gcos/postgres"
	"gcos/postgres/pgtest"
)

// The store's pool is sized by database.pool_conns (pgxpool's own default is max(4, CPUs): fewer connections than
// the daemon's loops hold together on a small machine), unless the URL says pool_max_conns itself.
func TestOpenSizesTheStorePool(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := pgtest.DSN(pgtest.NewEmptyDB(t))
	withParam := dsn + " pool_max_conns=3" // keyword=value form
	switch {
	case strings.Contains(dsn, "://") && strings.Contains(dsn, "?"):
		withParam = dsn + "&pool_max_conns=3"
	case strings.Contains(dsn, "://"):
		withParam = dsn + "?pool_max_conns=3"
	}
	cfg := gcos.DefaultConfig()
	cfg.Database.PoolConns = 7
	for _, tt := range []struct {
		name, url string
		want      int32
	}{
		{"from the configuration", dsn, 7},
		{"the URL's own parameter wins", withParam, 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, err := postgres.Open(ctx, postgres.Databases{URL: tt.url}, cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if got := s.Pool().Config().MaxConns; got != tt.want {
				t.Fatalf("store pool max conns = %d, want %d", got, tt.want)
			}
		})
	}
}
