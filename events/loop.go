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
	cfg  Config
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

// Config is what the event stage decides by: its own section (events.*) and, of the others, only what it reads.
type Config struct {
	Events gcos.EventsConfig
	// Principals say who may resolve a finding or mute (principals).
	Principals []gcos.Principal
	// Binding names the registries an owner is resolved from (source_binding).
	Binding gcos.SourceBinding
	Outage  gcos.OutageConfig
}

// ConfigOf picks the event stage's configuration out of the whole.
func ConfigOf(c gcos.Config) Config {
	return Config{Events: c.Events, Principals: c.Principals, Binding: c.SourceBinding, Outage: c.Outage}
}

// New builds the event stage over core, deciding by its sections of the core's configuration.
func New(core *postgres.Store, opts ...Option) *Loop {
	l := &Loop{core: core, cfg: ConfigOf(core.Config()), logger: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		o(l)
	}
	return l
}

// Run promotes every events.promote_every until ctx ends, in whichever process holds the promotion role. Another
// process holding it (ECONFLICT) is not a failure; any other error is logged as an outage and retried with
// back-off.
func (l *Loop) Run(ctx context.Context) error {
	every := l.cfg.Events.PromoteEvery.Duration()
	outage := gcos.NewOutageLog("promote pending signals", every, l.cfg.Outage, l.logger)
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
