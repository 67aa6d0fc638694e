package events

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"gcos/postgres"
)

// PromotePending moves every captured signal whose type is now registered and active to event_outbox, in capture
// order (event_pending id order), marking each processed. Captures of still inactive types stay; dead-lettered
// rows, intake retry rows and rows GCOS did not capture are never promoted. Each batch is one transaction, so a
// crash loses nothing and a re-run finishes the job without duplicates. It runs as the holder of RolePromotion
// (ECONFLICT while another process holds it). The holder also keeps the signals' idempotency keys
// (maintainSignalKeys).
func (l *Loop) PromotePending(ctx context.Context) (res postgres.PromoteResult, err error) {
	err = l.core.AsRole(ctx, postgres.RolePromotion, func(ctx context.Context) error {
		var err error
		if res, err = l.promotePending(ctx); err != nil {
			return err
		}
		return l.maintainSignalKeys(ctx)
	})
	return res, err
}

// maintainSignalKeys rotates the generations of the signals' idempotency keys when the current one has been current
// for the dedup window (events.signal_key_keep): the keys are a window, not a history, and the older generation goes
// by a TRUNCATE, not a DELETE. A rotation that found the key table's lock busy defers to the next promotion.
func (l *Loop) maintainSignalKeys(ctx context.Context) error {
	var res postgres.SignalKeysRotated
	err := l.core.InTx(ctx, func(tx pgx.Tx) error {
		var err error
		res, err = postgres.RotateSignalKeysTx(ctx, tx, l.cfg.Events.SignalKeyKeep.Duration())
		return err
	})
	if err != nil {
		return fmt.Errorf("keep the signal keys: %w", err)
	}
	if res.Rotated || res.Deferred {
		l.logger.Debug("signal keys", "rotated", res.Rotated, "current_generation", res.Current, "deferred", res.Deferred)
	}
	return nil
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
