package httpapi

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gcos/gcostest/wait"
)

// TestCachedReadComputesOncePerInterval: forty concurrent callers share one computation; a later caller within
// the interval gets the same result and as_of; an error is not kept; a waiting caller can give up.
func TestCachedReadComputesOncePerInterval(t *testing.T) {
	t.Parallel()
	c := newCachedRead[int](time.Hour)
	var computed atomic.Int64
	release := make(chan struct{})
	compute := func(context.Context, time.Time) (int, error) {
		<-release
		return int(computed.Add(1)), nil
	}
	var wg sync.WaitGroup
	got := make([]int, 40)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, _, err := c.get(context.Background(), "", compute)
			if err != nil {
				t.Error(err)
			}
			got[i] = v
		}()
	}
	close(release)
	wg.Wait()
	for i, v := range got {
		if v != 1 {
			t.Fatalf("caller %d got %d: forty callers must share one computation (%d ran)", i, v, computed.Load())
		}
	}
	_, asOf1, _ := c.get(context.Background(), "", compute)
	_, asOf2, _ := c.get(context.Background(), "", compute)
	if computed.Load() != 1 || !asOf1.Equal(asOf2) {
		t.Fatalf("within the interval: %d computations, as_of %v then %v", computed.Load(), asOf1, asOf2)
	}
	// Another key is its own entry.
	if v, _, _ := c.get(context.Background(), "scope-b", compute); v != 2 {
		t.Fatalf("a second key got %d, want its own computation", v)
	}

	// An error is returned, not kept.
	e := newCachedRead[int](time.Hour)
	fails := true
	flaky := func(context.Context, time.Time) (int, error) {
		if fails {
			return 0, errors.New("database down")
		}
		return 7, nil
	}
	if _, _, err := e.get(context.Background(), "", flaky); err == nil {
		t.Fatal("the error was swallowed")
	}
	fails = false
	if v, _, err := e.get(context.Background(), "", flaky); err != nil || v != 7 {
		t.Fatalf("after an error the next caller got %d, %v; want a fresh computation", v, err)
	}

	// A caller waiting behind a slow computation gives up with its own deadline.
	s := newCachedRead[int](time.Hour)
	hold := make(chan struct{})
	started := make(chan struct{})
	go func() {
		_, _, _ = s.get(context.Background(), "", func(context.Context, time.Time) (int, error) { close(started); <-hold; return 1, nil })
	}()
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, _, err := s.get(ctx, "", compute); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a waiting caller whose request ended got %v", err)
	}
	close(hold)

	// Past the interval the result is recomputed.
	r := newCachedRead[int](time.Nanosecond)
	n := 0
	count := func(context.Context, time.Time) (int, error) { n++; return n, nil }
	r.get(context.Background(), "", count)
	wait.Pass(context.Background(), time.Millisecond) // past the interval
	if v, _, _ := r.get(context.Background(), "", count); v != 2 {
		t.Fatalf("past the interval got %d, want a recomputation", v)
	}
}
