package postgres

import (
	"maps"
	"slices"
	"testing"
	"time"
)

func TestCountPage(t *testing.T) {
	at := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	birth := func(id int64, coll, class, status, parent, outOfOrder string, sec int) *TailRow {
		return &TailRow{ID: id, TS: at.Add(time.Duration(sec) * time.Second), CollectionName: coll, EntityType: class,
			Status: status, ParentCode: parent, OutOfOrder: outOfOrder}
	}
	anchor := BirthBase{Class: "service", Coll: "apps", Status: "retired"}
	type want struct {
		bases map[BirthBase]int64
		last  tailPosition
	}
	tests := []struct {
		name       string
		births     []*TailRow
		anchors    map[[2]string]BirthBase
		want       map[string]want
		outOfOrder []string
	}{
		{name: "per collection and base group, the last birth in cursor order",
			births: []*TailRow{birth(1, "apps", "service", "active", "", "", 0), birth(3, "apps", "service", "active", "", "", 1),
				birth(2, "apps", "job", "active", "", "", 1), birth(4, "data", "table", "active", "", "", 0)},
			want: map[string]want{
				"apps": {map[BirthBase]int64{{"service", "apps", "active"}: 2, {"job", "apps", "active"}: 1}, tailPosition{at.Add(time.Second), 3}},
				"data": {map[BirthBase]int64{{"table", "data", "active"}: 1}, tailPosition{at, 4}},
			}},
		{name: "an inherited child counts in its anchor's base group, one without an anchor in its own",
			births:  []*TailRow{birth(1, "apps", "task", "active", "svc-1", "", 0), birth(2, "apps", "task", "active", "gone", "", 0)},
			anchors: map[[2]string]BirthBase{{"apps", "svc-1"}: anchor},
			want: map[string]want{
				"apps": {map[BirthBase]int64{anchor: 1, {"task", "apps", "active"}: 1}, tailPosition{at, 2}},
			}},
		{name: "a birth out of cursor order names its collection once",
			births: []*TailRow{birth(9, "apps", "service", "active", "", "behind", 0), birth(10, "apps", "service", "active", "", "future", 0),
				birth(11, "data", "table", "active", "", "", 0)},
			want: map[string]want{
				"apps": {map[BirthBase]int64{{"service", "apps", "active"}: 2}, tailPosition{at, 10}},
				"data": {map[BirthBase]int64{{"table", "data", "active"}: 1}, tailPosition{at, 11}},
			},
			outOfOrder: []string{"apps"}},
		{name: "no births", want: map[string]want{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			page := CountPage(tt.births, tt.anchors)
			got := map[string]want{}
			for coll, cp := range page.byColl {
				got[coll] = want{cp.bases, cp.last}
			}
			if !maps.EqualFunc(got, tt.want, func(a, b want) bool {
				return maps.Equal(a.bases, b.bases) && a.last.at.Equal(b.last.at) && a.last.id == b.last.id
			}) {
				t.Fatalf("CountPage = %v, want %v", got, tt.want)
			}
			if !slices.Equal(page.outOfOrder, tt.outOfOrder) {
				t.Fatalf("out of order %v, want %v", page.outOfOrder, tt.outOfOrder)
			}
		})
	}
}
