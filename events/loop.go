package events

import (
	"context"
	"log/slog"
	"time"

	"gcos"
	"gcos/postgres"
)

// Loop is the event stage over the store core: it promotes captured signals under the emission discipline,
// keeps the registry of event types, and serves the findings and notifications loop a person works in. The core
// captures (AnnounceTx, EmitSignals, RaiseFindingTx); the Loop releases and reads.
type Loop struct {
	core *postgres.Store
	// The configuration sections the stage decides by.
	events     gcos.EventsConfig
	principals []gcos.Principal
	binding    gcos.SourceBinding
	outage     gcos.OutageConfig
	// clock, when set, is the time the emission discipline decides by (tests move it); nil: the database clock.
	clock  func() time.Time
	logger *slog.Logger
}

// Option configures a Loop.
type Option func(*Loop)

// WithClock makes the emission discipline (cooldowns, windows, escalation SLAs) read now from clock instead of the
// database clock. Tests drive time with it; nothing else should.
func WithClock(clock func() time.Time) Option { return func(l *Loop) { l.clock = clock } }

// WithLogger sets where the promoter reports its outages (default: nowhere).
func WithLogger(logger *slog.Logger) Option { return func(l *Loop) { l.logger = logger } }

// New builds the event stage over core, deciding by cfg's events, principals, source binding and outage sections.
func New(core *postgres.Store, cfg gcos.Config, opts ...Option) *Loop {
	l := &Loop{core: core, events: cfg.Events, principals: cfg.Principals, binding: cfg.SourceBinding,
		outage: cfg.Outage, logger: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		o(l)
	}
	return l
}

// Run promotes every events.promote_every until ctx ends, in whichever process holds the promotion role. Another
// process holding it (ECONFLICT) is not a failure; any other error is logged as an outage and retried with
// back-off.
func (l *Loop) Run(ctx context.Context) error {
	every := l.events.PromoteEvery.Duration()
	outage := gcos.NewOutageLog("promote pending signals", every, l.outage, l.logger)
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
		_, err := l.PromotePending(ctx)
		switch {
		case err == nil || gcos.ErrorCode(err) == gcos.ECONFLICT:
			outage.Succeeded()
		case ctx.Err() == nil:
			wait = max(every, outage.Failed(err))
		}
	}
}
