package daemon

import (
	"os"
	"runtime/debug"

	"gcos"
)

// LimitMemory sets the process's soft memory limit from process.memory_limit_mib, unless GOMEMLIMIT in the
// environment already set one (the operator's word wins), and returns the limit in force in bytes (math.MaxInt64:
// none) and where it came from: "config", "GOMEMLIMIT" or "none". `gcos up` calls it once at start; a library
// caller (a test, a benchmark stepping the stages) keeps its own process's settings unless it calls it too.
func LimitMemory(cfg gcos.ProcessConfig) (limit int64, from string) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return debug.SetMemoryLimit(-1), "GOMEMLIMIT"
	}
	if cfg.MemoryLimitMiB <= 0 {
		return debug.SetMemoryLimit(-1), "none"
	}
	limit = int64(cfg.MemoryLimitMiB) << 20
	debug.SetMemoryLimit(limit)
	return limit, "config"
}
