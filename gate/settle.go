package gate

import (
	"context"
	"strings"
	"time"

	"gcos"
	"gcos/postgres"
)

// A consistency token covers every source write committed before it, not only GCOS's own (SPEC §12 freshness): a
// question asked with one, or at full consistency, is answered only from a state in which the intake has handed off
// every source row (births, change-ledger rows, registries) committed before the question came — a superset of
// those the token saw — and then at least as fresh as a read taken after that. The rows the handoff dirtied are then
// dirty in that read: a high-risk group among them blocks, and is re-scanned synchronously, as any dirty one is.

// HandOff reads the database's present in one statement (postgres.SourcePresent): at bounds the rows waited for
// (zero: the read's own start). It is intake.Stage.Present, handed in by whoever assembles the stages: a stage never
// imports another.
type HandOff func(ctx context.Context, at time.Time) (postgres.SourcePresent, error)

// Option configures a gate at New.
type Option func(*Gate)

// WithHandOff lets the gate wait for the intake's progress. Without it a question asked with a token or at full
// consistency blocks: the gate could not prove it saw the source writes the token covers.
func WithHandOff(h HandOff) Option { return func(g *Gate) { g.handOff = h } }

// errNoHandOff is why a gate that cannot see the intake blocks a token's question.
var errNoHandOff = gcos.Errorf(gcos.EUNAVAILABLE, "this gate cannot see the intake's progress, so no answer can be proven to cover the token's source writes")

// settle makes a question asked with a token (atLeast) or at full consistency wait, within gate.timeout, until the
// intake has handed off every source row committed before it, and returns the token of a read taken after that:
// the answer reads at least it. A token the database has not issued (one its present does not cover) is refused
// with EINVALID; a wait that runs out is EUNAVAILABLE naming what still waits. Either way the answer blocks.
func (g *Gate) settle(ctx context.Context, atLeast *gcos.ConsistencyToken) (*gcos.ConsistencyToken, error) {
	if g.handOff == nil {
		return nil, errNoHandOff
	}
	ctx, cancel := context.WithTimeout(ctx, g.cfg.Gate.Timeout.Duration())
	defer cancel()
	var at time.Time // the question's instant, fixed by the first read: later reads wait for it, not for their own
	tick := time.NewTicker(g.cfg.Gate.HandOffPoll.Duration())
	defer tick.Stop()
	for {
		p, err := g.handOff(ctx, at)
		if err != nil {
			if ctx.Err() != nil && !at.IsZero() {
				return nil, gcos.Errorf(gcos.EUNAVAILABLE, "no answer within gate.timeout (%s): the intake had not handed off the source rows committed before %s",
					g.cfg.Gate.Timeout.Duration(), at.UTC().Format(time.RFC3339Nano))
			}
			return nil, g.gateReadFailed("the intake's progress", err)
		}
		present, err := gcos.ParseConsistencyToken(p.Snapshot)
		if err != nil {
			return nil, err
		}
		if at.IsZero() {
			at = p.At
			if atLeast != nil && !present.Covers(*atLeast) {
				return nil, gcos.Errorf(gcos.EINVALID, "consistency token %s was not issued by this database: it names transactions its present (%s) has not committed",
					gcos.Quote(atLeast.String()), present)
			}
		}
		if len(p.Waiting) == 0 {
			return &present, nil
		}
		select {
		case <-ctx.Done():
			return nil, gcos.Errorf(gcos.EUNAVAILABLE, "waited gate.timeout (%s) for the intake to hand off the source rows committed before %s: %s",
				g.cfg.Gate.Timeout.Duration(), at.UTC().Format(time.RFC3339Nano), strings.Join(p.Waiting, ", "))
		case <-tick.C:
		}
	}
}

// settleFailed is the block a failed settle answers with.
func settleFailed(res GateResult, err error) GateResult {
	res.Reasons = append(res.Reasons, gcos.ErrorMessage(err))
	if gcos.ErrorCode(err) == gcos.EINVALID {
		res.Refused = err
	}
	return res
}
