// Package events owns the governance event vocabulary and the pure decisions around it (SB-11, doc 41).
//
// The vocabulary (doc 41 §41.4 families A–E, plus the SB-12 snapshot and ruleset streams) is data: an embedded
// JSON document, vocabulary.json, that the store writes into event_type_registry with active=false. No event type
// is a code literal. The package also holds, as functions of values, the two routing decisions of the notification
// boundary: owner resolution (ownership → scope default_owner_hint → GOV-COUNCIL) and subscription matching
// (domain/type/stream/subject table/scope_filter, mute). It imports the standard library only; the store
// (package postgres) runs the SQL around it.
package events
