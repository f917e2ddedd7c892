// Package gateway holds the gateway-side fault drills of issue 17: tests
// that start the real portcullis binary (gateway replicas, proxies, a
// PostgreSQL cluster of their own) and break them on purpose — kill -9 a
// replica mid-burst, restart PostgreSQL under serving replicas, kill -9 a
// gateway writing to its embedded SQLite — then check that every
// acknowledged change survived, that nothing an errored call touched is
// half-applied, and that the audit chain verifies.
//
// The drills are behind the build tag "drills":
//
//	go test -tags drills -v ./drills/gateway/
//
// Each drill's doc comment says what it asserts; each prints its figures
// with t.Logf, one line per figure starting with FIGURE. The default
// variants fit in about two minutes; the long ones run with
// PORTCULLIS_DRILLS_LONG=1 (or -drills.long when this package alone is
// tested). TestMain builds the binary, unless PORTCULLIS_DRILLS_BIN names
// one. The kill -9 drill uses the shared PostgreSQL of internal/pgtest
// (skipped when none is reachable, except under CI=true); the restart
// drill runs a cluster of its own (initdb from PORTCULLIS_DRILLS_PG_BIN or
// /usr/lib/postgresql/*/bin; as root, as the OS user postgres). Their
// latest figures are in RELIABILITY.md.
package gateway
