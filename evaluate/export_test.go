package evaluate

import (
	"gcos"
	"gcos/postgres"
)

// SetEvaluateHook makes group re-evaluation fail where hook returns an error (tests only).
func SetEvaluateHook(hook func(gcos.Group) error) { evaluateHook = hook }

// SetObjectChunk sets how many births an object pass reads per fetch and rows it writes per statement, and returns
// the function that restores it (tests only; a test that calls it must not run in parallel).
func SetObjectChunk(n int) (restore func()) {
	was := objectChunk
	objectChunk = n
	return func() { objectChunk = was }
}

// LockKey names the transaction lock a pass over the base's object rows takes (tests only).
func LockKey(b postgres.BirthBase) string { return lockKey(b) }
