package world

import (
	"context"
	"fmt"
	"testing"
	"time"

	"gcos/postgres/pgtest"
)

// TestGenerate_StreamsIdentical loads the same world through one and through three COPY streams: the rows must not
// depend on how they were loaded.
func TestGenerate_StreamsIdentical(t *testing.T) {
	t.Parallel()
	md5s := make([]string, 2)
	t.Run("load", func(t *testing.T) {
		for i, streams := range []int{1, 3} {
			t.Run(fmt.Sprint(streams), func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				pool := pgtest.NewDB(t)
				sum, err := Generate(ctx, pool, Options{Births: 30_000, Changes: 1_000, Seed: 8, streams: streams})
				if err != nil {
					t.Fatal(err)
				}
				if sum.Tables["birth_registry"] != 30_000 {
					t.Fatalf("Summary.Tables: %v", sum.Tables)
				}
				err = pool.QueryRow(ctx, `SELECT md5(string_agg(b::text, E'\n' ORDER BY id)) || ' ' ||
					pg_sequence_last_value('birth_registry_id_seq') FROM birth_registry b`).Scan(&md5s[i])
				if err != nil {
					t.Fatal(err)
				}
			})
		}
	})
	if !t.Failed() && md5s[0] != md5s[1] {
		t.Fatalf("one stream gives %s, three give %s", md5s[0], md5s[1])
	}
}

// TestGenerate_CanceledLeavesNothing cancels a multi-stream load midway: no stream may commit.
func TestGenerate_CanceledLeavesNothing(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := Generate(ctx, pool, Options{Births: 400_000, Changes: 1_000, Seed: 8, streams: 2}); err == nil {
		t.Fatal("Generate finished 400,000 births in 300 ms; the test needs a bigger world")
	}
	var births, registries int64
	err := pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM birth_registry),
		(SELECT count(*) FROM collection_registry)`).Scan(&births, &registries)
	if err != nil {
		t.Fatal(err)
	}
	if births != 0 || registries != 0 {
		t.Fatalf("a canceled Generate left %d births and %d collection rows", births, registries)
	}
	// And the database is still usable for a world.
	if _, err := Generate(context.Background(), pool, Options{Births: 1_000, Changes: 10, Seed: 8}); err != nil {
		t.Fatalf("Generate after a canceled one: %v", err)
	}
}
