// Package stats owns how the benchmark programs summarise a distribution
// of measured times, so that a p99 means the same in every report.
package stats

import (
	"math"
	"time"
)

// Percentile returns the p-th percentile (0 < p ≤ 100) of sorted by the
// nearest-rank method: a time that was measured, never an interpolation
// between two. It returns 0 when sorted is empty.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}
