package mcp

import (
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestServerScenarios runs the suite's server scenarios (--suite all)
// against js/server.mjs and the everything-server, directly and through
// the proxy as absolute-form requests and in CONNECT tunnels: every
// scenario that passes directly passes through the proxy, and none other.
func TestServerScenarios(t *testing.T) {
	tl := setup(t)
	began := time.Now()
	dir := workDir(t, tl)

	server := exec.Command(tl.node, "server.mjs")
	server.Dir, server.Env = dir, route{}.env()
	subjectURL := start(t, "js/server.mjs", server).await(t, regexp.MustCompile(`^listening on (http://\S+)`))
	everythingPort := freePorts(t, 1)[0]
	everything := exec.Command(tl.node, everythingJ, "streamableHttp")
	everything.Dir = dir
	everything.Env = append(route{}.env(), "PORT="+strconv.Itoa(everythingPort))
	start(t, "server-everything", everything).await(t, regexp.MustCompile(`(listening) on port`))

	subjectPort := portOf(t, subjectURL)
	policy := writePolicy(t, "server-policy.yaml",
		"SUBJECT_PORT", strconv.Itoa(subjectPort), "EVERYTHING_PORT", strconv.Itoa(everythingPort))
	proxy, data := startProxy(t, tl, policy)

	servers := []struct {
		name string
		url  string
		port int
	}{
		{"js/server.mjs", subjectURL, subjectPort},
		{"server-everything", fmt.Sprintf("http://127.0.0.1:%d/mcp", everythingPort), everythingPort},
	}
	var order []string
	for _, rt := range routes(proxy) {
		order = append(order, rt.name)
	}
	for _, srv := range servers {
		runs := map[string]map[string]outcome{}
		for _, rt := range routes(proxy) {
			var preload []string
			if rt.proxy != "" {
				preload = []string{"--require", "./proxy.cjs"}
			}
			before, _ := decisions(t, data, []int{srv.port})
			runs[rt.name] = runSuite(t, tl, dir, rt.env(), preload, "server", "--url", srv.url, "--suite", "all")
			after, denied := decisions(t, data, []int{srv.port})
			if rt.proxy != "" && after == before {
				t.Errorf("%s through the proxy (%s): the proxy recorded no allowed request: the suite did not go through it", srv.name, rt.name)
			}
			if rt.proxy != "" && len(denied) > 0 {
				t.Logf("%s: the proxy's denials so far: %v", srv.name, denied)
			}
		}
		compare(t, srv.name, runs, order)
	}
	t.Logf("server scenarios: %s", time.Since(began).Round(time.Second))
}

// TestClientAuthScenarios runs the suite's client auth/* scenarios (--suite
// auth) with js/client.mjs, an OAuth client, directly and through the
// proxy in both forms, under a policy declaring mcp.oauth. Each scenario's
// servers listen on ports handed out in advance (js/listen.cjs), so that
// the policy can name them; the three runs go at once, each with ports of
// its own.
func TestClientAuthScenarios(t *testing.T) {
	tl := setup(t)
	began := time.Now()
	dir := workDir(t, tl)
	const perRun = 48
	all := freePorts(t, 3*perRun)
	var list []string
	for _, p := range all {
		list = append(list, strconv.Itoa(p))
	}
	policy := writePolicy(t, "auth-policy.yaml", "PORTS", "["+strings.Join(list, ", ")+"]")
	proxy, data := startProxy(t, tl, policy)

	var mu sync.Mutex
	runs := map[string]map[string]outcome{}
	var order []string
	t.Run("runs", func(t *testing.T) {
		for i, rt := range routes(proxy) {
			order = append(order, rt.name)
			ports := all[i*perRun : (i+1)*perRun]
			t.Run(rt.name, func(t *testing.T) {
				t.Parallel()
				client := tl.node + " client.mjs"
				if rt.proxy != "" {
					client = tl.node + " --require ./proxy.cjs client.mjs"
				}
				env := rt.env("PORTCULLIS_LISTEN_PORTS=" + strings.Join(list[i*perRun:(i+1)*perRun], ","))
				res := runSuite(t, tl, dir, env, []string{"--require", "./listen.cjs"},
					"client", "--command", client, "--suite", "auth", "--timeout", "120000")
				mu.Lock()
				runs[rt.name] = res
				mu.Unlock()
				allowed, denied := decisions(t, data, ports)
				if rt.proxy != "" && allowed == 0 {
					t.Errorf("the proxy recorded no allowed request: the client did not go through it")
				}
				if len(denied) > 0 {
					t.Logf("the proxy's denials: %v", denied)
				}
			})
		}
	})
	if len(runs) != len(order) {
		t.Fatalf("%d of %d runs finished", len(runs), len(order))
	}
	compare(t, "auth", runs, order)
	t.Logf("client auth scenarios: %s", time.Since(began).Round(time.Second))
}

func portOf(t *testing.T, url string) int {
	t.Helper()
	m := regexp.MustCompile(`:(\d+)/`).FindStringSubmatch(url)
	if m == nil {
		t.Fatalf("no port in %s", url)
	}
	p, _ := strconv.Atoi(m[1])
	return p
}
