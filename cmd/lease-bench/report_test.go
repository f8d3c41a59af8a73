package main

import (
	"math"
	"strings"
	"testing"
)

func TestQuantile(t *testing.T) {
	s := series{Samples: []float64{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}}
	tests := []struct{ q, want float64 }{{0, 1}, {0.5, 5}, {0.9, 9}, {1, 10}}
	for _, tt := range tests {
		if got := s.quantile(tt.q); got != tt.want {
			t.Errorf("quantile(%v) = %v, want %v", tt.q, got, tt.want)
		}
	}
	if !math.IsNaN((series{}).quantile(0.5)) {
		t.Error("empty series has a quantile")
	}
}

func TestTableSideBySide(t *testing.T) {
	out := table([]series{
		{Name: "hand-off", Impl: string(ours), Unit: "ms", Samples: []float64{8, 10, 12}},
		{Name: "hand-off", Impl: string(clientGo), Unit: "ms", Samples: []float64{400, 500}},
		{Name: "size", Impl: string(ours), Unit: "MB", Samples: []float64{30.5}},
	})
	for _, want := range []string{
		"| hand-off | ms | 8.0 / 10.0 / 12.0 / 12.0 (3) | 400 / 400 / 500 / 500 (2) |",
		"| size | MB | 30.5 | – |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}
