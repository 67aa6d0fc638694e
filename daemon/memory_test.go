package daemon_test

import (
	"math"
	"runtime/debug"
	"testing"

	"gcos"
	"gcos/daemon"
)

// TestLimitMemory: process.memory_limit_mib sets the soft memory limit, 0 leaves none, and a GOMEMLIMIT in the
// environment wins over the configuration. Not parallel: the limit is the process's.
func TestLimitMemory(t *testing.T) {
	prev := debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	t.Setenv("GOMEMLIMIT", "")
	for _, tc := range []struct {
		name  string
		env   string
		mib   int
		limit int64
		from  string
	}{
		{"configured", "", 160, 160 << 20, "config"},
		{"none", "", 0, 160 << 20, "none"}, // leaves the limit in force (here the case before's)
		{"the environment wins", "1GiB", 64, 160 << 20, "GOMEMLIMIT"},
	} {
		t.Setenv("GOMEMLIMIT", tc.env)
		limit, from := daemon.LimitMemory(gcos.ProcessConfig{MemoryLimitMiB: tc.mib})
		if limit != tc.limit || from != tc.from || debug.SetMemoryLimit(-1) != tc.limit {
			t.Fatalf("%s: limit %d from %q (in force %d), want %d from %q", tc.name, limit, from, debug.SetMemoryLimit(-1), tc.limit, tc.from)
		}
	}
}
