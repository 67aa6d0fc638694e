package postgres

import "gcos"

// SetEvaluateHook makes group re-evaluation fail where hook returns an error (tests only).
func SetEvaluateHook(hook func(gcos.Group) error) { evaluateHook = hook }
