package events

import (
	"context"

	"github.com/jackc/pgx/v5"

	"gcos/postgres"
)

// PromotePending moves every captured signal whose type is now registered and active to event_outbox, in capture
// order (event_pending id order), marking each processed. Captures of still inactive types stay; dead-lettered
// rows, intake retry rows and rows GCOS did not capture are never promoted. Each batch is one transaction, so a
// crash loses nothing and a re-run finishes the job without duplicates. It runs as the holder of RolePromotion
// (ECONFLICT while another process holds it).
func (l *Loop) PromotePending(ctx context.Context) (res postgres.PromoteResult, err error) {
	err = l.core.AsRole(ctx, postgres.RolePromotion, func(ctx context.Context) error {
		var err error
		res, err = l.promotePending(ctx)
		return err
	})
	return res, err
}

func (l *Loop) promotePending(ctx context.Context) (postgres.PromoteResult, error) {
	total := postgres.PromoteResult{ByType: map[string]int{}}
	for {
		var step postgres.PromoteResult
		var n int
		err := l.core.InTx(ctx, func(tx pgx.Tx) error {
			var err error
			step, n, err = postgres.PromoteStep(ctx, tx, nil, postgres.PromoteBatch, l.newDiscipline())
			return err
		})
		if err != nil {
			return total, err
		}
		total.Add(step)
		if n < postgres.PromoteBatch {
			break
		}
	}
	// Windows that closed with nothing new to announce still owe their digest; due escalations go out.
	err := l.core.InTx(ctx, func(tx pgx.Tx) error {
		var step postgres.PromoteResult
		dis := l.newDiscipline()
		if err := postgres.LockPromotion(ctx, tx); err != nil {
			return err
		}
		if _, err := dis.Begin(ctx, tx); err != nil {
			return err
		}
		if err := dis.closeWindows(ctx, tx, &step); err != nil {
			return err
		}
		if err := dis.escalate(ctx, tx, &step); err != nil {
			return err
		}
		total.Add(step)
		return nil
	})
	if err != nil {
		return total, err
	}
	total.Held, err = l.core.SettleHeld(ctx)
	return total, err
}
