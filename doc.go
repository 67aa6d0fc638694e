// Package gcos is the domain of GCOS, the Governance Candidate & Onboarding Substrate: the vocabulary every other
// package builds on, and the decisions that are pure functions of values.
//
// It owns group keys and dimensions (GroupKey), combinable source fingerprints (Fingerprint), content-addressed
// ruleset versions and their targeted impact (ComputeRuleset, DiffRulesets), the verdict policy as data
// (VerdictPolicy), the read-time decay of a verdict (Effective), the fail-closed production gate (Gate), the
// per-scope coverage invariant (Ledger), the handoff change kinds and dirty reasons (ChangeKind), the finding
// vocabulary and coalesce keys (IssueType, CoalesceKey), the configuration (Config) and the error codes (Error).
//
// It imports the standard library only and never touches a database: postgres/ stores what these functions
// decide, the workers schedule them, and cmd/ wires it all together.
package gcos
