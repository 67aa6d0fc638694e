// Package evaluate judges groups and the objects that have rows of their own: the Evaluator gives a group's verdict
// under one ruleset (its rule side from the ruleset's stored components, its source side from the live registries),
// and the object-row derivation writes, in the caller's transaction, the rows doc 40 §40.6 materializes and retires
// those whose reason lapsed (MaterializeObjects over the estate, FollowObjects over the bases a scan judged). The
// stages that write verdicts use it (the intake's backfill and quarantine, every scan); it imports the store core and
// the root package, never a stage, and the reference evaluator (package oracle) never shares it.
package evaluate
