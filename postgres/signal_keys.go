package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
)

// The signals' idempotency keys (governance_signal_key, migration 025) are kept for a dedup window in two
// generations: claims go into the current one (emitKeysSQL), and the rotation empties the other when the current one
// has been current for the window, then makes it current. A TRUNCATE leaves nothing to vacuum, whatever the number
// of keys; a DELETE of a window's keys at 10⁸ births would leave every one of them dead.

// SignalKeysRotated reports one maintenance of the signal keys.
type SignalKeysRotated struct {
	Current int  // the current generation after it
	Rotated bool // the other generation was emptied and made current
	// Deferred: the rotation was due, but the key table's lock was not free within logLockTimeout (a transaction
	// that claimed keys is still open); the next maintenance tries again.
	Deferred bool
}

// RotateSignalKeysTx rotates the key table's generations when gcos.SignalKeyRotationDue says so for keep
// (events.signal_key_keep), in tx. It takes the key table's exclusive lock first, so it waits for every transaction
// that claimed keys: no claim reads the generation before the rotation and writes after it, and a key claimed just
// before is in the generation kept. A quiet maintenance reads one row and takes no table lock.
func RotateSignalKeysTx(ctx context.Context, tx pgx.Tx, keep time.Duration) (SignalKeysRotated, error) {
	var res SignalKeysRotated
	var since, now time.Time
	// The row lock makes rotators take turns; claims read the row without one.
	if err := tx.QueryRow(ctx, `SELECT current, since, now() FROM gcos_signal_key_generation FOR UPDATE`).Scan(&res.Current, &since, &now); err != nil {
		return res, fmt.Errorf("rotate the signal keys: read the generation: %w", err)
	}
	if !gcos.SignalKeyRotationDue(since, now, keep) {
		return res, nil
	}
	if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '`+logLockTimeout+`'`); err != nil {
		return res, fmt.Errorf("rotate the signal keys: lock timeout: %w", err)
	}
	if ok, err := lockLog(ctx, tx, "governance_signal_key"); err != nil {
		return res, fmt.Errorf("rotate the signal keys: lock the key table: %w", err)
	} else if !ok {
		res.Deferred = true
		return res, nil
	}
	older := 1 - res.Current
	if _, err := tx.Exec(ctx, fmt.Sprintf(`TRUNCATE governance_signal_key_g%d`, older)); err != nil {
		return res, fmt.Errorf("rotate the signal keys: empty generation %d: %w", older, err)
	}
	if _, err := tx.Exec(ctx, `UPDATE gcos_signal_key_generation SET current = $1, since = now()`, older); err != nil {
		return res, fmt.Errorf("rotate the signal keys: make generation %d current: %w", older, err)
	}
	res.Current, res.Rotated = older, true
	return res, nil
}
