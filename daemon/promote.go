package daemon

import (
	"context"
	"log/slog"
	"time"

	"gcos"
	"gcos/postgres"
)

// Promoter moves captured signals whose type became active to the outbox, in order, in whichever process holds the
// promotion role.
type Promoter struct {
	Store  *postgres.Store
	Logger *slog.Logger
	// Every is the pause between two promotions (default 2 s).
	Every time.Duration
}

// Run promotes until ctx ends. Another process holding the role (ECONFLICT) is not a failure; any other error is
// logged as an outage and retried with back-off.
func (p *Promoter) Run(ctx context.Context) error {
	every := p.Every
	if every <= 0 {
		every = 2 * time.Second
	}
	logger := p.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	outage := gcos.NewOutageLog("promote pending signals", every, p.Store.Config().Outage, logger)
	wait := every
	for {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = every
		_, err := p.Store.PromotePending(ctx)
		switch {
		case err == nil || gcos.ErrorCode(err) == gcos.ECONFLICT:
			outage.Succeeded()
		case ctx.Err() == nil:
			wait = max(every, outage.Failed(err))
		}
	}
}
