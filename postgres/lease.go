package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Singleton roles (one intake per source, the scheduler) are held by leases in queue_heartbeat, and every worker
// ticks its heartbeat there, so "quiet" and "dead" differ (SPEC §2, §9.3).

// AcquireLease takes or renews the lease name for owner for ttl. It reports whether owner holds it: a lease held
// by another owner that has not expired is left alone.
func (s *Store) AcquireLease(ctx context.Context, name, kind, owner string, ttl time.Duration) (bool, error) {
	var held string
	err := s.pool.QueryRow(ctx, `
		INSERT INTO queue_heartbeat (executor_name, executor_kind, last_tick_at, last_tick_status, lease_owner, lease_expires_at)
		VALUES ($1, $2, now(), 'leased', $3, now() + $4::interval)
		ON CONFLICT (executor_name) DO UPDATE SET lease_owner = EXCLUDED.lease_owner, lease_expires_at = EXCLUDED.lease_expires_at
		WHERE queue_heartbeat.lease_owner IS NULL OR queue_heartbeat.lease_owner = EXCLUDED.lease_owner
		   OR queue_heartbeat.lease_expires_at IS NULL OR queue_heartbeat.lease_expires_at < now()
		RETURNING lease_owner`, name, kind, owner, ttl).Scan(&held)
	if err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return false, nil // held by another live owner
		}
		return false, fmt.Errorf("lease %s: %w", name, err)
	}
	return held == owner, nil
}

// ReleaseLease gives a lease up (on clean shutdown) so another process can take over at once.
func (s *Store) ReleaseLease(ctx context.Context, name, owner string) error {
	_, err := s.pool.Exec(ctx, `UPDATE queue_heartbeat SET lease_owner = NULL, lease_expires_at = NULL WHERE executor_name = $1 AND lease_owner = $2`, name, owner)
	if err != nil {
		return fmt.Errorf("release lease %s: %w", name, err)
	}
	return nil
}

// Heartbeat ticks a worker's heartbeat row.
func (s *Store) Heartbeat(ctx context.Context, name, kind, status string) error {
	_, err := s.pool.Exec(ctx, `
		INSERT INTO queue_heartbeat (executor_name, executor_kind, last_tick_at, last_tick_status)
		VALUES ($1, $2, now(), $3)
		ON CONFLICT (executor_name) DO UPDATE SET executor_kind = EXCLUDED.executor_kind, last_tick_at = now(), last_tick_status = EXCLUDED.last_tick_status`,
		name, kind, status)
	if err != nil {
		return fmt.Errorf("heartbeat %s: %w", name, err)
	}
	return nil
}

// DirtyListener keeps one connection of its own LISTENing for dirty marks for as long as it is open, so a mark
// committed while its owner is busy scanning waits on the connection instead of being missed. It is not safe for
// concurrent use.
type DirtyListener struct {
	store *Store
	conn  *pgx.Conn
}

// ListenDirty returns a listener; it connects on the first Wait.
func (s *Store) ListenDirty() *DirtyListener { return &DirtyListener{store: s} }

// Wait blocks until a dirty mark is committed (true) or timeout passes (false). A notification that arrived since
// the previous Wait returns at once. After (re)connecting it returns true without waiting: marks committed while
// nobody listened are only found by scanning. Polling stays the source of truth either way.
func (l *DirtyListener) Wait(ctx context.Context, timeout time.Duration) (bool, error) {
	if l.conn == nil || l.conn.IsClosed() {
		l.Close()
		conn, err := pgx.ConnectConfig(ctx, l.store.pool.Config().ConnConfig.Copy())
		if err != nil {
			return false, fmt.Errorf("listen for dirty marks: connect: %w", err)
		}
		if _, err := conn.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
			_ = conn.Close(context.WithoutCancel(ctx))
			return false, fmt.Errorf("listen for dirty marks: %w", err)
		}
		l.conn = conn
		return true, nil
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err := l.conn.WaitForNotification(wctx)
	switch {
	case err == nil:
		return true, nil
	case ctx.Err() != nil:
		return false, ctx.Err()
	case wctx.Err() != nil:
		return false, nil
	default:
		l.Close()
		return false, fmt.Errorf("wait for dirty marks: %w", err)
	}
}

// Close drops the listening connection.
func (l *DirtyListener) Close() {
	if l.conn != nil {
		_ = l.conn.Close(context.Background())
		l.conn = nil
	}
}
