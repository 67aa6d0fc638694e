// Package events is the event stage (SB-11, doc 41): it releases what the store core captured and serves the loop a
// person works in.
//
//   - Promotion: the promoter (Loop.Run, PromotePending), in the process holding the promotion role, moves captured
//     signals whose type became active to event_outbox in capture order, applying the emission discipline to
//     GCOS's own announcements (cooldown, ceiling and digest, routing to one owner, escalation).
//   - The registry: the vocabulary (gcos.LoadVocabulary) is written into event_type_registry inactive; activating a
//     type is a separate, approved, audited step (registering ≠ activating).
//   - The findings and notifications loop: list, show and resolve findings; a recipient's notifications are
//     computed, not stored (the outbox events their subscriptions select, minus muted ones, minus those read).
//
// The pure decisions of the discipline (Decide, Window), owner resolution (ResolveOwner) and subscription matching
// (Subscription.Matches, RouteFor) are functions of values here; the SQL around them sits beside its caller. The
// core keeps the capture side every stage writes through (postgres.EmitSignals, AnnounceTx, RaiseFindingTx) and
// the promotion mechanics an emit shares (postgres.PromoteStep); this package never writes a source table.
package events
