package gate_test

import (
	"testing"
	"time"

	"gcos"
	"gcos/gate"
)

// BenchmarkVerdictView_Decide is the view's decision alone (go test -bench; the benchmark command measures the gate).
func BenchmarkVerdictView_Decide(b *testing.B) {
	w, v := viewWorld(&testing.T{}, 20000, time.Hour)
	_ = w
	objects := w.strs(&testing.T{}, `SELECT collection_name || ':' || entity_code FROM birth_registry ORDER BY hashint8(id) LIMIT 10000`)
	for _, o := range objects {
		w.gate().Gate(w.ctx, o, gcos.ActionWrite)
	}
	b.SetParallelism(4) // 8 goroutines on 2 cores, as the benchmark command asks
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			w.gate().Gate(w.ctx, objects[i%len(objects)], gcos.ActionWrite)
			i++
		}
	})
	_ = v
}

// BenchmarkVerdictView_GateBatch is a batch of 100 answered from the view (go test -bench).
func BenchmarkVerdictView_GateBatch(b *testing.B) {
	w, v := viewWorld(&testing.T{}, 20000, time.Hour)
	objects := w.strs(&testing.T{}, `SELECT collection_name || ':' || entity_code FROM birth_registry ORDER BY hashint8(id) LIMIT 10000`)
	batch := func(i int) []gcos.GateCheck {
		out := make([]gcos.GateCheck, 100)
		for k := range out {
			out[k] = gcos.GateCheck{Object: objects[(i*100+k)%len(objects)]}
		}
		return out
	}
	for i := range len(objects) / 100 {
		w.gate().GateBatch(w.ctx, batch(i), gate.GateOptions{})
	}
	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if res := w.gate().GateBatch(w.ctx, batch(i), gate.GateOptions{}); res.Source != gate.SourceView {
				b.Fatalf("answered from %q", res.Source)
			}
			i++
		}
	})
	_ = v
}
