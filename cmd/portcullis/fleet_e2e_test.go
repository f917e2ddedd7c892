package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/internal/pgtest"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// A proxy follows a fleet of gateway replicas, with real processes: two
// gateways on one Postgres, one proxy given both addresses. Each replica
// is killed (SIGKILL) in turn while the proxy streams from it, and a
// version committed through the survivor — with the CLI, which works
// against any replica — is enforced within 5 s. Then a replica is
// stopped in order (SIGTERM): it sends the proxy away, which reconnects
// once, at once, and misses no version committed meanwhile.
func TestFleetFailover(t *testing.T) {
	dsn := pgtest.Database(t)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	defer upstream.Close()
	upPort := upstream.Listener.Addr().(*net.TCPAddr).Port
	dir := t.TempDir()

	// Fixed ports: a restarted replica is where the proxy looks.
	env := []string{"PORTCULLIS_BOOTSTRAP_TOKEN=" + pushAdminToken, "PORTCULLIS_DATABASE_URL=" + dsn}
	addrs := map[string]string{}
	gws := map[string]*gatewayProcess{}
	for _, name := range []string{"a", "b"} {
		addrs[name] = "127.0.0.1:" + strconv.Itoa(freeFixedPort(t))
	}
	start := func(name string) {
		gws[name] = startGatewayProcess(t, env, "--listen", addrs[name])
	}
	start("a")
	start("b")
	api := func(name string) pushAPI { return newPushAPI("http://" + addrs[name]) }

	created, err := api("a").sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: "agent-1", Policy: pushDoc(upPort, "v1")})
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(created.GetToken()), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startProxyProcess(t, "http://"+addrs["a"]+",http://"+addrs["b"], tokenFile, filepath.Join(dir, "p"), "p1")

	// on waits until the proxy streams from a replica and has applied v,
	// and names that replica.
	on := func(via string, v uint32) string {
		t.Helper()
		s := api(via).waitStatuses(t, []string{"p1"}, fmt.Sprintf("version %d applied", v), func(s *portcullisv1.ProxyStatus) bool {
			return s.GetConnected() && s.GetAppliedVersion() == v
		})
		for name, addr := range addrs {
			if strings.HasSuffix(s["p1"].GetReplica(), "/"+addr) {
				return name
			}
		}
		t.Fatalf("the proxy streams from replica %q, neither of %v", s["p1"].GetReplica(), addrs)
		return ""
	}
	other := map[string]string{"a": "b", "b": "a"}
	version := uint32(1)
	// commit sets the next version through replica via with the CLI and
	// returns the path it opens.
	commit := func(via string) string {
		t.Helper()
		version++
		path := fmt.Sprintf("v%d", version)
		file := filepath.Join(dir, path+".yaml")
		if err := os.WriteFile(file, []byte(pushDoc(upPort, "v1", path)), 0o600); err != nil {
			t.Fatal(err)
		}
		out, code := runBinary(t, []string{"PORTCULLIS_GATEWAY=http://" + addrs[via], "PORTCULLIS_TOKEN=" + pushAdminToken},
			"policy", "set", "agent-1", "-f", file, "-o", "json")
		if code != 0 {
			t.Fatalf("policy set through replica %s: exit %d: %s", via, code, out)
		}
		// The validator's warnings come first, on stderr.
		var res struct{ Version uint32 }
		if err := json.NewDecoder(strings.NewReader(out[max(strings.Index(out, "{\n"), 0):])).Decode(&res); err != nil || res.Version != version {
			t.Fatalf("policy set through replica %s answered %s (%v), want version %d", via, out, err, version)
		}
		return "/" + path + "/a"
	}
	// enforced waits until a request to path passes the proxy, and
	// returns how long that took; 5 s is the bound.
	enforced := func(path string) time.Duration {
		t.Helper()
		start := time.Now()
		for p.get(t, upstream.URL, path) != 200 {
			if time.Since(start) > 5*time.Second {
				t.Fatalf("%s not allowed within 5s of its commit\nproxy log:\n%s", path, p.stderr.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
		return time.Since(start)
	}

	// Kill the replica the proxy streams from, twice: each one in turn.
	cur := on("a", 1)
	for range 2 {
		killed, survivor := cur, other[cur]
		killedAt := time.Now()
		gws[killed].cmd.Process.Kill()
		<-gws[killed].done
		path := commit(survivor)
		took := enforced(path)
		t.Logf("replica %s killed (SIGKILL): version %d, committed through %s, enforced by the proxy %v after its commit (%v after the kill)",
			killed, version, survivor, took.Round(time.Millisecond), time.Since(killedAt).Round(time.Millisecond))
		if cur = on(survivor, version); cur != survivor {
			t.Fatalf("the proxy streams from %s, want the survivor %s", cur, survivor)
		}
		start(killed)
	}

	// Stop the replica the proxy streams from in order: one goaway, one
	// reconnection, straight to the other replica; a version committed
	// while it drains and one after it stopped both reach the proxy.
	mark := len(p.stderr.String())
	stopped, survivor := cur, other[cur]
	if err := gws[stopped].cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	during := commit(survivor)
	took := enforced(during)
	t.Logf("replica %s stopped (SIGTERM): version %d, committed through %s while it drained, enforced %v after its commit", stopped, version, survivor, took.Round(time.Millisecond))
	select {
	case err := <-gws[stopped].done:
		if err != nil {
			t.Fatalf("replica %s exit after SIGTERM: %v", stopped, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("replica %s did not stop within 30s of SIGTERM", stopped)
	}
	after := commit(survivor)
	enforced(after)
	if cur = on(survivor, version); cur != survivor {
		t.Fatalf("the proxy streams from %s, want %s", cur, survivor)
	}
	var ended, opened []map[string]any
	for _, line := range strings.Split(p.stderr.String()[mark:], "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		switch rec["msg"] {
		case "policy stream ended; reconnecting":
			ended = append(ended, rec)
		case "policy stream open":
			opened = append(opened, rec)
		}
	}
	if len(ended) != 1 || ended[0]["goaway"] != true || len(opened) != 1 || opened[0]["gateway"] != "http://"+addrs[survivor] {
		t.Fatalf("after SIGTERM the proxy's stream ended %d times and opened %d times; want once each, by goaway, to %s:\n%v\n%v", len(ended), len(opened), survivor, ended, opened)
	}
	waited, _ := ended[0]["in"].(float64) // slog writes a duration in nanoseconds
	t.Logf("SIGTERM cost the proxy one reconnection, after waiting %v", time.Duration(waited))
	// Every version was enforced in turn: the last one is.
	if got := p.get(t, upstream.URL, during); got != 403 {
		t.Fatalf("%s still allowed after version %d replaced it: %d", during, version, got)
	}
}

// freeFixedPort returns a free loopback port below Linux's ephemeral
// range (32768 and up): a port there, left free while its replica is
// down, may be taken by any outgoing connection, and the replica could
// not listen on it again.
func freeFixedPort(t *testing.T) int {
	t.Helper()
	for range 100 {
		port := 20000 + rand.IntN(12000)
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err == nil {
			ln.Close()
			return port
		}
	}
	t.Fatal("no free port between 20000 and 32000")
	return 0
}
