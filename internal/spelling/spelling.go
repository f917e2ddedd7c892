// Package spelling finds the word a misspelt name was meant to be: the
// "did you mean" of an unknown policy field or configuration key.
package spelling

// Nearest is the candidate closest to name when it is a near miss (at
// most one edit for names of four letters or fewer, two up to nine,
// three beyond: network_policy for network_policies), else ""; of
// candidates as close, the first. Candidates skip reports are passed over.
func Nearest(name string, candidates []string, skip func(string) bool) string {
	best, bestD := "", 3 // one more than the edits allowed
	switch {
	case len(name) <= 4:
		bestD = 2
	case len(name) >= 10:
		bestD = 4
	}
	for _, c := range candidates {
		// The distance is at least the difference in length: a name far
		// longer or shorter than every candidate (an attacker's key of
		// megabytes) costs a comparison of lengths, not a distance.
		if skip != nil && skip(c) || abs(len(name)-len(c)) >= bestD {
			continue
		}
		if d := Distance(name, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// Distance is the Levenshtein distance between a and b, in bytes.
func Distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func abs(n int) int { return max(n, -n) }
