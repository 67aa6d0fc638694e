// Package httpapi is GCOS's HTTP surface: the JSON API (gate, explain, groups, invariant, summary, rulesets,
// snapshots, findings, workers, ruleset activation, cursor reset), the Prometheus endpoint, health probes, the
// OpenAPI document and the embedded dashboard.
//
// It owns authentication (reader and operator bearer tokens, compared in constant time), the cross-origin and
// content-security policy, and the mapping of gcos error codes to HTTP statuses. It reads the store only through
// its summary methods; the listener is the caller's (see CheckListen).
package httpapi
