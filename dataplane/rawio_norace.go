//go:build linux && !386 && !race

package dataplane

// raceEnabled: this build has the race detector (rawIO says why it matters).
const raceEnabled = false
