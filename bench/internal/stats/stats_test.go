package stats

import (
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	ten := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, tc := range []struct {
		name   string
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{"empty", nil, 50, 0},
		{"one", []time.Duration{7}, 99, 7},
		{"median of ten is the fifth", ten, 50, 5},
		{"p99 of ten is the last", ten, 99, 10},
		{"p10 of ten is the first", ten, 10, 1},
		{"p11 of ten rounds the rank up", ten, 11, 2},
		{"tiny p is still the first", ten, 0.001, 1},
		{"p100 is the max", ten, 100, 10},
	} {
		if got := Percentile(tc.sorted, tc.p); got != tc.want {
			t.Errorf("%s: Percentile(%v, %g) = %v, want %v", tc.name, tc.sorted, tc.p, got, tc.want)
		}
	}
}
