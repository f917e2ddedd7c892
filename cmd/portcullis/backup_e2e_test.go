package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"

	"github.com/portcullis-dev/portcullis/internal/pgtest"
)

// TestBackupRestore runs the real binaries on each engine: a gateway and
// its proxy, `portcullis backup` while another goroutine keeps creating
// sandboxes through the API, `portcullis restore` into a new store, and a
// gateway on it that the proxy, pinned to the key it first saw, follows to
// the restored gateway's next version, while a proxy that applied a version
// made after the backup refuses the restored history as a fork until it is
// reset (docs/operations.md). The restored store has the
// backup's sandboxes, tokens and signing key, and its audit chain
// verifies; a second restore into it is refused and writes nothing.
func TestBackupRestore(t *testing.T) {
	for _, engine := range []string{"sqlite", "postgres"} {
		t.Run(engine, func(t *testing.T) {
			dir := t.TempDir()
			// storeArgs gives the gateway and the offline commands one
			// store of the engine, a new one per name.
			stores := map[string][]string{}
			storeArgs := func(name string) []string {
				if stores[name] == nil {
					stores[name] = []string{"--data-dir", filepath.Join(dir, name)}
					if engine == "postgres" {
						stores[name] = []string{"--database-url", pgtest.Database(t)}
					}
				}
				return stores[name]
			}
			testBackupRestore(t, dir, storeArgs)
		})
	}
}

func testBackupRestore(t *testing.T, dir string, storeArgs func(string) []string) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	defer upstream.Close()
	upPort := upstream.Listener.Addr().(*net.TCPAddr).Port
	gwEnv := []string{"PORTCULLIS_BOOTSTRAP_TOKEN=" + pushAdminToken, "PORTCULLIS_DATABASE_URL="}

	src := startGatewayProcess(t, gwEnv, storeArgs("source")...)
	api := newPushAPI("http://" + src.addr)
	created, err := api.sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: "agent-1", Policy: pushDoc(upPort, "v1")})
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(created.GetToken()), 0o600); err != nil {
		t.Fatal(err)
	}
	proxyDir, laterDir := filepath.Join(dir, "proxy"), filepath.Join(dir, "later")
	p := startProxyProcess(t, "http://"+src.addr, tokenFile, proxyDir, "p1")
	later := startProxyProcess(t, "http://"+src.addr, tokenFile, laterDir, "p2")
	api.set(t, pushDoc(upPort, "v1", "v2"))
	api.waitStatuses(t, []string{"p1", "p2"}, "version 2 applied", func(s *portcullisv1.ProxyStatus) bool { return s.GetAppliedVersion() == 2 })
	pinned, err := os.ReadFile(filepath.Join(proxyDir, "gateway.key"))
	if err != nil {
		t.Fatal(err)
	}
	p.stop(t)

	// Sandboxes keep being made while the backup is taken.
	var made sync.WaitGroup
	stop := make(chan struct{})
	var mu sync.Mutex
	count, underWay := 0, make(chan struct{}) // closed at the third sandbox, or when the writer fails
	signal := sync.OnceFunc(func() { close(underWay) })
	made.Go(func() {
		defer signal()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := api.sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: fmt.Sprintf("w-%d", i), Policy: pushDoc(upPort, "w")}); err != nil {
				t.Errorf("create w-%d during the backup: %v", i, err)
				return
			}
			mu.Lock()
			if count++; count == 3 {
				signal()
			}
			mu.Unlock()
		}
	})
	madeBy := func() int { mu.Lock(); defer mu.Unlock(); return count }
	<-underWay
	before := madeBy()
	file := filepath.Join(dir, "portcullis.backup")
	out, code := runBinary(t, nil, append([]string{"backup", "--to", file}, storeArgs("source")...)...)
	after := madeBy()
	close(stop)
	made.Wait()
	if code != 0 {
		t.Fatalf("backup: exit %d: %s", code, out)
	}
	m := regexp.MustCompile(`backup of (\d+) sandbox\(es\) written`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("backup said %q", out)
	}
	backedUp, _ := strconv.Atoi(m[1])
	// agent-1 and the w-N made before the backup started, at least; at
	// most those made before it ended.
	if backedUp < 1+before || backedUp > 1+after {
		t.Fatalf("the backup holds %d sandboxes; %d were made before it started, %d before it ended (and agent-1)", backedUp, before, after)
	}
	t.Logf("backup of %d sandboxes while %d were made", backedUp, after-before)
	// p2 applies a version made after the backup, which the restore loses.
	api.set(t, pushDoc(upPort, "v1", "lost"))
	api.waitStatuses(t, []string{"p2"}, "version 3 applied", func(s *portcullisv1.ProxyStatus) bool { return s.GetAppliedVersion() == 3 })
	later.stop(t)
	src.stop(t)

	out, code = runBinary(t, nil, append([]string{"restore", "--from", file}, storeArgs("restored")...)...)
	if code != 0 || !strings.Contains(out, "agent-1 at version 2") {
		t.Fatalf("restore: exit %d: %s", code, out)
	}
	// Restoring again is refused: the store is not empty.
	again, code := runBinary(t, nil, append([]string{"restore", "--from", file}, storeArgs("restored")...)...)
	if code != 1 || !strings.Contains(again, "restore refused") {
		t.Fatalf("restore into a restored store: exit %d: %s", code, again)
	}

	gw := startGatewayProcess(t, gwEnv, storeArgs("restored")...)
	env := []string{"PORTCULLIS_GATEWAY=http://" + gw.addr, "PORTCULLIS_TOKEN=" + pushAdminToken}
	if out, code := runBinary(t, env, "audit", "verify"); code != 0 {
		t.Fatalf("audit verify on the restored store: exit %d: %s", code, out)
	}
	audit, _ := runBinary(t, env, "audit", "list", "--limit", "1000", "-o", "json")
	if n := strings.Count(audit, `"store.restore"`); n != 1 {
		t.Fatalf("the audit log has %d store.restore entries, want 1 (the refused restore wrote nothing)", n)
	}
	list, _ := runBinary(t, env, "sandbox", "list", "-o", "json")
	if n := len(decodeJSON(t, list)["sandboxes"].([]any)); n != backedUp {
		t.Fatalf("the restored gateway has %d sandboxes, the backup %d:\n%s", n, backedUp, list)
	}
	keys, _ := runBinary(t, env, "signing-key", "list")
	if !strings.Contains(keys, strings.TrimSpace(string(pinned))) {
		t.Fatalf("the restored gateway's keys %q lack the key the proxy pinned, %s", keys, pinned)
	}

	// The proxy, holding version 2 and the old key, follows the restored
	// gateway to its next version.
	api = newPushAPI("http://" + gw.addr)
	p = startProxyProcess(t, "http://"+gw.addr, tokenFile, proxyDir, "p1")
	if v := api.set(t, pushDoc(upPort, "v1", "v3")); v != 3 {
		t.Fatalf("the restored gateway's next version is %d, want 3", v)
	}
	api.waitStatuses(t, []string{"p1"}, "version 3 applied", func(s *portcullisv1.ProxyStatus) bool { return s.GetAppliedVersion() == 3 })
	p.wantStatus(t, upstream.URL, "/v3/a", 200)
	p.wantStatus(t, upstream.URL, "/v2/a", 403)

	// p2 holds the lost version 3: it refuses the restored history's as a
	// fork, says so, and keeps enforcing its own, until the operator
	// resets it as docs/operations.md says.
	later = startProxyProcess(t, "http://"+gw.addr, tokenFile, laterDir, "p2")
	api.waitStatuses(t, []string{"p2"}, "a fork refused", func(s *portcullisv1.ProxyStatus) bool {
		return strings.Contains(s.GetLastNackError(), "policy fork")
	})
	later.wantStatus(t, upstream.URL, "/lost/a", 200)
	later.stop(t)
	if err := os.Remove(filepath.Join(laterDir, "policy.signed")); err != nil {
		t.Fatal(err)
	}
	later = startProxyProcess(t, "http://"+gw.addr, tokenFile, laterDir, "p2")
	later.wantStatus(t, upstream.URL, "/v3/a", 200)
	later.wantStatus(t, upstream.URL, "/lost/a", 403)
}

// TestRestoreRefusesNewerSchema: a backup whose schema is newer than the
// binary's migrations is refused, and nothing is created.
func TestRestoreRefusesNewerSchema(t *testing.T) {
	dir := t.TempDir()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	meta := []byte(`{"format": 1, "engine": "sqlite", "schema_version": 99999, "heads": []}`)
	tw.WriteHeader(&tar.Header{Name: "portcullis-backup.json", Mode: 0o600, Size: int64(len(meta))})
	tw.Write(meta)
	tw.Close()
	file := filepath.Join(dir, "newer.backup")
	if err := os.WriteFile(file, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	out, code := runBinary(t, nil, "restore", "--from", file, "--data-dir", data)
	if code != 1 || !strings.Contains(out, "schema version is 99999, newer than this binary's migrations") {
		t.Fatalf("restore of a newer backup: exit %d: %s", code, out)
	}
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Fatalf("the refused restore made %s (%v)", data, err)
	}
	// Not a backup at all: refused as such.
	if err := os.WriteFile(file, []byte("not a backup"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, code = runBinary(t, nil, "restore", "--from", file, "--data-dir", data)
	if code != 1 || !strings.Contains(out, "not a portcullis backup") {
		t.Fatalf("restore of a file that is no backup: exit %d: %s", code, out)
	}
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Fatalf("the refused restore made %s (%v)", data, err)
	}
}
