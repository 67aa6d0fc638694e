package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
)

// Singleton roles (the full audit, the backfill, event promotion, snapshot pruning, the silent-gap monitor) are held by short leases in
// governance_role_lease, renewed by their holder while it works (SPEC §2). Every change of holder gives the lease a
// new epoch, and every transaction a holder commits on the role's behalf checks that epoch (fencing): a holder that
// was paused, cut off or killed past its lease never commits after its successor took over. Taking a role over
// marks the runs the previous holders left running abandoned. The lease is mirrored in queue_heartbeat, where
// `gcos status` shows workers and leases together. Workers tick their heartbeat there too, so "quiet" and "dead"
// differ (SPEC §9.3).

// Role is a singleton role: its lease name and the mode of the runs it records (none for roles without runs).
type Role struct {
	Name    string
	RunMode string
}

// The singleton roles.
var (
	RoleFullAudit = Role{Name: "gcos.role.full_audit", RunMode: ModeFullAudit}
	RoleBackfill  = Role{Name: "gcos.role.backfill", RunMode: ModeBackfill}
	RolePromotion = Role{Name: "gcos.role.event_promotion"}
	RolePrune     = Role{Name: "gcos.role.snapshot_prune"}
)

// Lease is a holder's claim on a role: valid while the lease row still names its owner and epoch and has not expired.
type Lease struct {
	Role  Role
	Owner string
	Epoch int64
	TTL   time.Duration
	// Abandoned is the number of runs of the role's mode that taking the role over marked abandoned.
	Abandoned int64
	// Renewed is set when the take found the lease already held by this owner (a renewal, same epoch).
	Renewed bool
}

// ErrLeaseLost is returned when a holder's lease expired or passed to another holder: its work must stop, and no
// transaction on the role's behalf commits.
var ErrLeaseLost = errors.New("role lease lost")

// TakeRole takes role for owner for ttl, or renews it when owner holds it already. It returns nil when another
// owner holds it unexpired. A take that changes the holder (or follows an expiry) starts a new epoch and marks the
// runs of the role's mode still running under an older epoch abandoned, in the same transaction.
func (s *Store) TakeRole(ctx context.Context, role Role, owner string, ttl time.Duration) (*Lease, error) {
	if ttl <= 0 {
		return nil, gcos.Errorf(gcos.EINVALID, "lease %s: ttl %s is not positive", role.Name, ttl)
	}
	var l *Lease
	err := s.InTx(ctx, func(tx pgx.Tx) error {
		l = nil
		var epoch int64
		var fresh bool
		var at time.Time // one instant for the whole statement (clock_timestamp() moves between calls)
		if err := tx.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&at); err != nil {
			return fmt.Errorf("take role %s: %w", role.Name, err)
		}
		err := tx.QueryRow(ctx, `
			INSERT INTO governance_role_lease AS l (role, owner, epoch, taken_at, renewed_at, expires_at)
			VALUES ($1, $2, 1, $4::timestamptz, $4::timestamptz, $4::timestamptz + $3::interval)
			ON CONFLICT (role) DO UPDATE SET owner = EXCLUDED.owner,
			    epoch = CASE WHEN l.owner = EXCLUDED.owner AND l.expires_at > $4 THEN l.epoch ELSE l.epoch + 1 END,
			    taken_at = CASE WHEN l.owner = EXCLUDED.owner AND l.expires_at > $4 THEN l.taken_at ELSE $4 END,
			    renewed_at = $4, expires_at = EXCLUDED.expires_at
			WHERE l.owner IS NULL OR l.owner = EXCLUDED.owner OR l.expires_at IS NULL OR l.expires_at <= $4
			RETURNING epoch, taken_at = $4::timestamptz`, role.Name, owner, ttl, at).Scan(&epoch, &fresh)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // held by another live owner
		}
		if err != nil {
			return fmt.Errorf("take role %s: %w", role.Name, err)
		}
		l = &Lease{Role: role, Owner: owner, Epoch: epoch, TTL: ttl, Renewed: !fresh}
		if fresh && role.RunMode != "" {
			tag, err := tx.Exec(ctx, `UPDATE candidate_scan_run SET status = 'abandoned', finished_at = now(),
				error = format('abandoned: its holder of %s (epoch %s) is gone; %s took the role over (epoch %s)',
				                $2::text, coalesce(lease_epoch::text, 'none'), $3::text, $4::bigint::text)
				WHERE status = 'running' AND mode = $1 AND coalesce(lease_epoch, 0) < $4::bigint`, role.RunMode, role.Name, owner, epoch)
			if err != nil {
				return fmt.Errorf("abandon the runs of %s: %w", role.Name, err)
			}
			l.Abandoned = tag.RowsAffected()
		}
		return mirrorLease(ctx, tx, role.Name, &owner, ttl)
	})
	if err != nil {
		return nil, err
	}
	if l != nil && l.Abandoned > 0 {
		s.logger.Warn("role taken over: runs its previous holder left running are abandoned", "role", role.Name,
			"owner", owner, "epoch", l.Epoch, "abandoned", l.Abandoned)
	}
	return l, nil
}

// renewLease extends a held lease by its TTL; ErrLeaseLost when it expired or passed to another holder.
func (s *Store) renewLease(ctx context.Context, l *Lease) error {
	return s.InTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE governance_role_lease SET renewed_at = clock_timestamp(), expires_at = clock_timestamp() + $4::interval
			WHERE role = $1 AND owner = $2 AND epoch = $3 AND expires_at > clock_timestamp()`, l.Role.Name, l.Owner, l.Epoch, l.TTL)
		if err != nil {
			return fmt.Errorf("renew role %s: %w", l.Role.Name, err)
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("renew role %s (epoch %d): %w", l.Role.Name, l.Epoch, ErrLeaseLost)
		}
		return mirrorLease(ctx, tx, l.Role.Name, &l.Owner, l.TTL)
	})
}

// ReleaseLease gives a held lease up (on clean exit) so another process can take the role at once.
func (s *Store) ReleaseLease(ctx context.Context, l *Lease) error {
	if l == nil {
		return nil
	}
	return s.InTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE governance_role_lease SET owner = NULL, expires_at = NULL
			WHERE role = $1 AND owner = $2 AND epoch = $3`, l.Role.Name, l.Owner, l.Epoch)
		if err != nil {
			return fmt.Errorf("release role %s: %w", l.Role.Name, err)
		}
		if tag.RowsAffected() == 0 {
			return nil // already lost: nothing to give up
		}
		return mirrorLease(ctx, tx, l.Role.Name, nil, 0)
	})
}

// mirrorLease shows a role's holder in queue_heartbeat (nil owner: released).
func mirrorLease(ctx context.Context, tx pgx.Tx, name string, owner *string, ttl time.Duration) error {
	_, err := tx.Exec(ctx, `
		INSERT INTO queue_heartbeat (executor_name, executor_kind, last_tick_at, last_tick_status, lease_owner, lease_expires_at)
		VALUES ($1, 'lease', now(), 'leased', $2, CASE WHEN $2::text IS NULL THEN NULL ELSE clock_timestamp() + $3::interval END)
		ON CONFLICT (executor_name) DO UPDATE SET lease_owner = EXCLUDED.lease_owner, lease_expires_at = EXCLUDED.lease_expires_at`,
		name, owner, ttl)
	if err != nil {
		return fmt.Errorf("show lease %s: %w", name, err)
	}
	return nil
}

// AsRole runs fn as the holder of role: under the lease ctx already carries for it (its caller renews it), or under
// one it takes for the configured TTL, renews while fn runs and releases after. Another live holder: ECONFLICT.
func (s *Store) AsRole(ctx context.Context, role Role, fn func(context.Context) error) error {
	if l := leaseOf(ctx); l != nil && l.Role.Name == role.Name {
		return fn(ctx)
	}
	l, err := s.TakeRole(ctx, role, s.owner, s.cfg.Roles.LeaseTTL.Duration())
	if err != nil {
		return err
	}
	if l != nil && l.Renewed {
		// Held by this process already: another of its goroutines is running the role.
		return gcos.Errorf(gcos.ECONFLICT, "%s is already running in this process (%s)", role.Name, s.owner)
	}
	if l == nil {
		var holder string
		_ = s.pool.QueryRow(ctx, `SELECT coalesce(owner, '') FROM governance_role_lease WHERE role = $1`, role.Name).Scan(&holder)
		return gcos.Errorf(gcos.ECONFLICT, "%s is held by %s (its lease expires unless renewed)", role.Name, holder)
	}
	rctx, stop := s.keepRenewed(ctx, l)
	err = fn(rctx)
	stop()
	if cause := context.Cause(rctx); errors.Is(cause, ErrLeaseLost) && !errors.Is(err, ErrLeaseLost) {
		err = errors.Join(err, cause)
	}
	if rerr := s.ReleaseLease(context.WithoutCancel(ctx), l); rerr != nil {
		err = errors.Join(err, rerr)
	}
	return err
}

// leaseOf is the lease the context carries (nil: none).
func leaseOf(ctx context.Context) *Lease {
	l, _ := ctx.Value(fenceKey{}).(*Lease)
	return l
}

type fenceKey struct{}

// Fenced returns a context whose every transaction committed through the store checks, just before committing, that
// l is still the role's lease: the role's work runs under it.
func Fenced(ctx context.Context, l *Lease) context.Context {
	return context.WithValue(ctx, fenceKey{}, l)
}

// checkFence is the fencing check of a transaction committed under a Fenced context: the lease row is read FOR
// SHARE, so a takeover waits for this transaction to end and cannot slip between the check and the commit.
func checkFence(ctx context.Context, tx pgx.Tx) error {
	l := leaseOf(ctx)
	if l == nil {
		return nil
	}
	var ok bool
	err := tx.QueryRow(ctx, `SELECT true FROM governance_role_lease WHERE role = $1 AND owner = $2 AND epoch = $3
		AND expires_at > clock_timestamp() FOR SHARE`, l.Role.Name, l.Owner, l.Epoch).Scan(&ok)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("role %s (epoch %d): %w", l.Role.Name, l.Epoch, ErrLeaseLost)
	}
	if err != nil {
		return fmt.Errorf("check the lease of %s: %w", l.Role.Name, err)
	}
	return nil
}

// keepRenewed renews l every third of its TTL until the returned stop is called; the returned context is cancelled
// (with ErrLeaseLost as its cause) when a renewal finds the lease lost, or when renewals keep failing until the
// lease would have expired. It carries the fence (Fenced).
func (s *Store) keepRenewed(ctx context.Context, l *Lease) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(Fenced(ctx, l))
	done := make(chan struct{})
	go func() {
		defer close(done)
		every := max(l.TTL/3, 10*time.Millisecond)
		lastOK := time.Now()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			err := s.renewLease(context.WithoutCancel(ctx), l)
			switch {
			case err == nil:
				lastOK = time.Now()
			case errors.Is(err, ErrLeaseLost) || time.Since(lastOK) >= l.TTL:
				s.logger.Warn("role lease lost: stopping its work", "role", l.Role.Name, "epoch", l.Epoch, "err", err)
				cancel(fmt.Errorf("%w: %v", ErrLeaseLost, err))
				return
			default:
				s.logger.Warn("renew role lease (retrying)", "role", l.Role.Name, "err", err)
			}
		}
	}()
	return ctx, func() { cancel(nil); <-done }
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

// Listening reports whether Wait can be woken by a dirty mark: false when the store has no session to LISTEN on
// (a transaction pooler without a session URL), and Wait only waits out its timeout.
func (l *DirtyListener) Listening() bool { return l.store.session != nil }

// Wait blocks until a dirty mark is committed (true) or timeout passes (false). A notification that arrived since
// the previous Wait returns at once. After (re)connecting it returns true without waiting: marks committed while
// nobody listened are only found by scanning. Polling stays the source of truth either way.
func (l *DirtyListener) Wait(ctx context.Context, timeout time.Duration) (bool, error) {
	if !l.Listening() {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(timeout):
			return false, nil
		}
	}
	if l.conn == nil || l.conn.IsClosed() {
		l.Close()
		conn, err := pgx.ConnectConfig(ctx, l.store.session.Copy())
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
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		CloseConn(ctx, l.conn)
		l.conn = nil
	}
}
