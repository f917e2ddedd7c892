//go:build linux && !386 && race

package h1

// raceEnabled: this build has the race detector (RawIO says why it matters).
const raceEnabled = true
