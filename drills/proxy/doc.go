// Package proxy holds the proxy-side fault drills (issue 17): tests that
// start the real portcullis binary — a gateway on embedded SQLite and a
// gateway-mode proxy — and break the proxy's side on purpose: its path to
// the gateway cut (closed, or silently stalled) through a TCP relay of
// the test's, its data directory full or read-only, its clock five
// minutes off. Each drill says in its doc comment what it asserts and
// prints its figures as lines starting with FIGURE.
//
// The drills build the binary with -tags drills (cmd/portcullis's
// drillhook_on.go: the proxy's clock offset); they live behind the same
// tag:
//
//	go test -tags drills ./drills/proxy/ -v -run . 2>&1 | grep -E 'FIGURE|^(---|ok|FAIL)'
//
// This file carries only the package documentation, so the package
// builds (empty) without the tag.
package proxy
