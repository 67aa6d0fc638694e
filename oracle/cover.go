package oracle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
	"gcos/postgres"
)

// CoverPlan is what one full audit's verification proves: the next slice of the rotating cover, and every
// collection with a group scanned since the previous proof began.
type CoverPlan struct {
	Slice       int        `json:"slice"`
	Slices      int        `json:"slices"`
	Collections []string   `json:"collections"` // sorted; the slice's and the scanned ones
	Scanned     []string   `json:"scanned"`     // the collections scanned since (sorted)
	Since       *time.Time `json:"since"`       // when the previous proof began; nil: nothing was proven yet
	// ObjectRows weighs each collection by its active object rows (what a proof holds in memory per collection),
	// so the proof can be read in batches of bounded size (gcos.ProofBatches).
	ObjectRows map[string]int64 `json:"object_rows"`
}

// PlanCover plans the verification of the full audit runID over n slices (gcos.CoverSlice): the slice after
// the last one an audit proved, and the collections with a group scanned since that audit began (or, before any
// proof, since the backfill began). Collections are read from the births (one probe per collection on the source's
// collection index) and from the groups GCOS holds, so neither side alone decides what is proven.
func PlanCover(ctx context.Context, store *postgres.Store, runID string, n int) (CoverPlan, error) {
	p := CoverPlan{Slices: max(n, 1)}
	b := store.BirthBinding()
	err := store.InTx(ctx, func(tx pgx.Tx) error {
		last := -1
		var since *time.Time
		err := tx.QueryRow(ctx, `SELECT verify_slice, started_at FROM candidate_scan_run
			WHERE verify_slice IS NOT NULL AND run_id <> $1 ORDER BY verified_at DESC LIMIT 1`, runID).Scan(&last, &since)
		if errors.Is(err, pgx.ErrNoRows) {
			last = -1
			err = tx.QueryRow(ctx, `SELECT max(started_at) FROM candidate_scan_run WHERE mode = 'backfill' AND status = 'succeeded'`).
				Scan(&since)
		}
		if err != nil {
			return fmt.Errorf("read the last proof: %w", err)
		}
		p.Slice, p.Since = gcos.NextCoverSlice(last, p.Slices), since

		// Every collection: the births' (a loose scan of the collection index) and the groups'.
		rows, err := tx.Query(ctx, b.SQL(`
			WITH RECURSIVE c AS (
			    (SELECT {coll} AS coll FROM {t} ORDER BY {coll} LIMIT 1)
			    UNION ALL
			    SELECT (SELECT {coll} FROM {t} WHERE {coll} > c.coll ORDER BY {coll} LIMIT 1) FROM c WHERE c.coll IS NOT NULL)
			SELECT coll FROM c WHERE coll IS NOT NULL
			UNION
			SELECT DISTINCT source_registry FROM governance_group WHERE source_registry IS NOT NULL`))
		if err != nil {
			return fmt.Errorf("list the collections: %w", err)
		}
		all, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("list the collections: %w", err)
		}
		for _, c := range all {
			if gcos.CoverSlice(c, p.Slices) == p.Slice {
				p.Collections = append(p.Collections, c)
			}
		}
		rows, err = tx.Query(ctx, `SELECT DISTINCT g.source_registry FROM governance_candidate_state c
			JOIN governance_group g USING (group_key)
			WHERE g.source_registry IS NOT NULL AND ($1::timestamptz IS NULL OR c.scan_time >= $1)`, since)
		if err != nil {
			return fmt.Errorf("list the collections scanned since %v: %w", since, err)
		}
		if p.Scanned, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return fmt.Errorf("list the collections scanned since %v: %w", since, err)
		}
		p.ObjectRows = map[string]int64{}
		rows, err = tx.Query(ctx, `SELECT g.source_registry, count(*) FROM governance_candidate_object o
			JOIN governance_group g USING (group_key)
			WHERE o.lifecycle_status = 'active' AND g.source_registry IS NOT NULL GROUP BY 1`)
		if err != nil {
			return fmt.Errorf("weigh the collections: %w", err)
		}
		var coll string
		var n int64
		_, err = pgx.ForEachRow(rows, []any{&coll, &n}, func() error {
			p.ObjectRows[coll] = n
			return nil
		})
		if err != nil {
			return fmt.Errorf("weigh the collections: %w", err)
		}
		return nil
	})
	if err != nil {
		return p, fmt.Errorf("plan the audit's proof: %w", err)
	}
	slices.Sort(p.Scanned)
	p.Collections = append(p.Collections, p.Scanned...)
	slices.Sort(p.Collections)
	p.Collections = slices.Compact(p.Collections)
	if p.Collections == nil {
		p.Collections = []string{} // an empty slice proves nothing, but is still a slice (never "everything")
	}
	return p, nil
}

// CoverProof is what one audit's verification found, recorded on its run.
type CoverProof struct {
	Plan       CoverPlan
	At         time.Time // the instant the reference was read at
	Groups     int
	Objects    int
	GateChecks int
	Mismatches int
}

// recordProof records on the audit run runID which slice and collections it proved and what it found; the next
// audit's PlanCover takes the slice after it.
func recordProof(ctx context.Context, store *postgres.Store, runID string, p CoverProof) error {
	err := store.InTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE candidate_scan_run SET verify_slice = $2, verify_slices = $3, verify_collections = $4,
			verify_groups = $5, verify_objects = $6, verify_gate_checks = $7, verify_mismatches = $8, verified_at = $9
			WHERE run_id = $1`, runID, p.Plan.Slice, p.Plan.Slices, p.Plan.Collections, p.Groups, p.Objects, p.GateChecks,
			p.Mismatches, p.At)
		if err == nil && tag.RowsAffected() == 0 {
			err = gcos.Errorf(gcos.ENOTFOUND, "no run %s", runID)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("record the proof of %s: %w", runID, err)
	}
	return nil
}
