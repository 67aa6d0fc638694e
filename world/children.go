package world

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Ref names one birth.
type Ref struct {
	// ID is the birth_registry id.
	ID int64 `json:"id"`
	// Collection is the collection_name.
	Collection string `json:"collection"`
	// EntityCode is the entity_code, unique within Collection.
	EntityCode string `json:"entity_code"`
	// EntityType is the entity_type.
	EntityType string `json:"entity_type"`
}

// String returns the object reference "COLLECTION:CODE" used by the gate and explain.
func (r Ref) String() string { return r.Collection + ":" + r.EntityCode }

// childResult is what addChildren wrote.
type childResult struct {
	container Ref
	children  int64 // inherited children written
	rows      int64 // birth_registry rows written: children, plus the container when it was born here
}

// AddChildren adds n inherited children under one container and returns the container. The container is an active,
// parent-less birth of a BIRTH_REQUIRED / IN_SCOPE collection chosen deterministically from seed (or, when there is
// none, a container born here in such a collection); each child is a birth of the container's collection and entity
// type with parent_code = the container's entity_code and entity_code = "<container code>-c<id>". The children are
// written with COPY in one transaction, with ids after the largest id (and the id sequence) and born_at after both
// the latest born_at and the database clock, one microsecond apart: they are new births, as a tail sees new births
// (the synthetic world's history ends before today). The id sequence is then moved past them. Concurrent inserts
// into birth_registry wait for the transaction.
func AddChildren(ctx context.Context, pool *pgxpool.Pool, n int, seed uint64) (container Ref, err error) {
	if n <= 0 {
		return Ref{}, fmt.Errorf("world: children must be positive, got %d", n)
	}
	if seed == 0 {
		seed = 1
	}
	var res *childResult
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		res, err = addChildren(ctx, tx, n, seed, true, nil)
		return err
	})
	if err != nil {
		return Ref{}, err
	}
	if _, err := pool.Exec(ctx, "ANALYZE birth_registry"); err != nil {
		return Ref{}, fmt.Errorf("world: analyze birth_registry: %w", err)
	}
	return res.container, nil
}

// childColumns are the birth_registry columns written for children.
var childColumns = []string{"id", "entity_code", "collection_name", "entity_type", "status", "born_at", "parent_code",
	"source_system", "actor_ref"}

const (
	containerCandidates = 1000 // the container is drawn among the first this many candidates by entity_code
	childActor          = "birth-gateway"
)

// addChildren writes the children; born now puts them after the database clock too (AddChildren), otherwise right
// after the world's history (Generate, which stays deterministic).
func addChildren(ctx context.Context, tx pgx.Tx, n int, seed uint64, bornNow bool, progress func(int)) (*childResult, error) {
	if _, err := tx.Exec(ctx, "LOCK TABLE birth_registry IN SHARE ROW EXCLUSIVE MODE"); err != nil {
		return nil, fmt.Errorf("world: lock birth_registry: %w", err)
	}
	r := rand.New(rand.NewPCG(seed, streamChildren))

	// Where the next ids and born_at values go.
	var maxID int64
	var maxBorn *time.Time
	err := tx.QueryRow(ctx, `
		SELECT greatest(coalesce(max(id), 0),
		                coalesce(pg_sequence_last_value(pg_get_serial_sequence('birth_registry', 'id')::regclass), 0)),
		       CASE WHEN $1 THEN greatest(max(born_at), clock_timestamp()) ELSE max(born_at) END
		FROM birth_registry`, bornNow).Scan(&maxID, &maxBorn)
	if err != nil {
		return nil, fmt.Errorf("world: read the end of birth_registry: %w", err)
	}
	next := baseTime
	if maxBorn != nil {
		next = maxBorn.Add(time.Millisecond).Truncate(time.Microsecond)
	}

	res := &childResult{}
	var rows [][]any
	cont, found, err := pickContainer(ctx, tx, r)
	if err != nil {
		return nil, err
	}
	if !found {
		// No candidate: bear a container in a BIRTH_REQUIRED / IN_SCOPE collection that has an entity type.
		coll, typ, err := pickContainerClass(ctx, tx, r)
		if err != nil {
			return nil, err
		}
		maxID++
		cont = Ref{ID: maxID, Collection: coll, EntityType: typ,
			EntityCode: typ + "-container-" + strconv.FormatInt(maxID, 10)}
		rows = append(rows, []any{cont.ID, cont.EntityCode, coll, typ, statusActive, next, nil, sourceBirthAPI,
			childActor})
		next = next.Add(time.Microsecond)
		res.rows++
	}
	res.container = cont

	// Children are streamed rather than materialized: n may be in the millions.
	src := &childSource{cont: cont, first: maxID + 1, n: n, at: next, pre: rows, ticker: ticker{report: progress}}
	copied, err := tx.CopyFrom(ctx, pgx.Identifier{"birth_registry"}, childColumns, src)
	if err != nil {
		return nil, fmt.Errorf("world: copy %d children under %s: %w", n, cont, err)
	}
	res.rows = copied
	res.children = copied - int64(len(rows))
	if err := syncSequences(ctx, tx, "birth_registry"); err != nil {
		return nil, err
	}
	return res, nil
}

// pickContainer draws an active, parent-less birth of a BIRTH_REQUIRED / IN_SCOPE collection; found is false when
// there is none.
func pickContainer(ctx context.Context, tx pgx.Tx, r *rand.Rand) (ref Ref, found bool, err error) {
	rows, err := tx.Query(ctx, `
		SELECT c.collection_name
		FROM collection_registry c
		WHERE c.coverage_status = 'BIRTH_REQUIRED' AND c.scope_class = 'IN_SCOPE'
		  AND EXISTS (SELECT 1 FROM birth_registry b
		              WHERE b.collection_name = c.collection_name AND b.parent_code IS NULL AND b.status = 'active')
		ORDER BY c.collection_name`)
	if err != nil {
		return Ref{}, false, fmt.Errorf("world: list container collections: %w", err)
	}
	colls, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return Ref{}, false, fmt.Errorf("world: list container collections: %w", err)
	}
	if len(colls) == 0 {
		return Ref{}, false, nil
	}
	coll := colls[r.IntN(len(colls))]
	rows, err = tx.Query(ctx, `
		SELECT id, collection_name, entity_code, entity_type
		FROM birth_registry
		WHERE collection_name = $1 AND parent_code IS NULL AND status = 'active'
		ORDER BY entity_code
		LIMIT $2`, coll, containerCandidates)
	if err != nil {
		return Ref{}, false, fmt.Errorf("world: list containers in %s: %w", coll, err)
	}
	cands, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Ref])
	if err != nil {
		return Ref{}, false, fmt.Errorf("world: list containers in %s: %w", coll, err)
	}
	if len(cands) == 0 { // a concurrent delete; the table is locked against inserts only
		return Ref{}, false, nil
	}
	return cands[r.IntN(len(cands))], true, nil
}

// pickContainerClass draws a BIRTH_REQUIRED / IN_SCOPE collection and an entity type meta_catalog places in it.
func pickContainerClass(ctx context.Context, tx pgx.Tx, r *rand.Rand) (collection, entityType string, err error) {
	rows, err := tx.Query(ctx, `
		SELECT c.collection_name, min(m.entity_type)
		FROM collection_registry c
		JOIN meta_catalog m ON m.registry_collection = c.collection_name
		WHERE c.coverage_status = 'BIRTH_REQUIRED' AND c.scope_class = 'IN_SCOPE'
		GROUP BY c.collection_name
		ORDER BY c.collection_name`)
	if err != nil {
		return "", "", fmt.Errorf("world: list container classes: %w", err)
	}
	type pair struct{ Coll, Type string }
	pairs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[pair])
	if err != nil {
		return "", "", fmt.Errorf("world: list container classes: %w", err)
	}
	if len(pairs) == 0 {
		return "", "", errors.New("world: no BIRTH_REQUIRED / IN_SCOPE collection with an entity type in meta_catalog " +
			"to hold children (generate a world first)")
	}
	p := pairs[r.IntN(len(pairs))]
	return p.Coll, p.Type, nil
}

// childSource streams the optional pre rows (a new container) and then n children to CopyFrom.
type childSource struct {
	cont   Ref
	first  int64 // id of the first child
	n      int
	at     time.Time // born_at of the first child
	pre    [][]any
	i      int // rows emitted so far, pre included
	vals   []any
	ticker ticker
}

func (s *childSource) Next() bool {
	if s.i == len(s.pre)+s.n {
		s.ticker.done()
		return false
	}
	s.i++
	s.ticker.tick()
	return true
}

func (s *childSource) Values() ([]any, error) {
	if s.i <= len(s.pre) {
		return s.pre[s.i-1], nil
	}
	k := int64(s.i - len(s.pre) - 1) // child ordinal
	id := s.first + k
	if s.vals == nil {
		s.vals = make([]any, len(childColumns))
	}
	s.vals[0] = id
	s.vals[1] = s.cont.EntityCode + "-c" + strconv.FormatInt(id, 10)
	s.vals[2] = s.cont.Collection
	s.vals[3] = s.cont.EntityType
	s.vals[4] = statusActive
	s.vals[5] = s.at.Add(time.Duration(k) * time.Microsecond)
	s.vals[6] = s.cont.EntityCode
	s.vals[7] = sourceBirthAPI
	s.vals[8] = childActor
	return s.vals, nil
}

func (s *childSource) Err() error { return nil }
