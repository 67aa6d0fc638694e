package httpapi

import (
	"context"
	"sync"
	"time"
)

// maxCachedKeys bounds a cachedRead's entries (one per scope asked about); beyond it they are dropped and
// recomputed, so arbitrary scope strings cannot grow the cache.
const maxCachedKeys = 64

// cachedRead computes an expensive read (the invariant, the summary) at most once per interval per key and
// serves that result, with the time it was computed, to everyone who asks meanwhile. Callers that arrive while it
// is being computed wait for that computation instead of starting their own, so forty dashboards cost one query.
type cachedRead[T any] struct {
	interval time.Duration
	mu       sync.Mutex
	entries  map[string]*cacheEntry[T]
}

type cacheEntry[T any] struct {
	turn chan struct{} // a mutex a waiting caller can give up on when its request ends
	val  T
	asOf time.Time
	ok   bool
}

func newCachedRead[T any](interval time.Duration) *cachedRead[T] {
	return &cachedRead[T]{interval: interval, entries: map[string]*cacheEntry[T]{}}
}

// invalidate drops every held result (after a change made through this API, so its author sees it at once). A
// computation in flight finishes into a dropped entry.
func (c *cachedRead[T]) invalidate() {
	c.mu.Lock()
	c.entries = map[string]*cacheEntry[T]{}
	c.mu.Unlock()
}

// get returns key's result, computing it with compute (given the as_of it will be served under) when the held one
// is older than the interval. Errors are not kept: the next caller tries again.
func (c *cachedRead[T]) get(ctx context.Context, key string, compute func(ctx context.Context, asOf time.Time) (T, error)) (T, time.Time, error) {
	c.mu.Lock()
	e := c.entries[key]
	if e == nil {
		if len(c.entries) >= maxCachedKeys {
			clear(c.entries)
		}
		e = &cacheEntry[T]{turn: make(chan struct{}, 1)}
		c.entries[key] = e
	}
	c.mu.Unlock()
	var zero T
	select {
	case e.turn <- struct{}{}:
	case <-ctx.Done():
		return zero, time.Time{}, ctx.Err()
	}
	defer func() { <-e.turn }()
	if e.ok && time.Since(e.asOf) < c.interval {
		return e.val, e.asOf, nil
	}
	asOf := time.Now()
	v, err := compute(ctx, asOf)
	if err != nil {
		return zero, time.Time{}, err
	}
	e.val, e.asOf, e.ok = v, asOf, true
	return v, asOf, nil
}
