package deploy

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// composeFiles are the compose files the Compose Specification's schema
// checks: this directory's and the repository's own.
var composeFiles = []string{"compose/docker-compose.yml", "../docker-compose.yml"}

func readComposeFile(t *testing.T, path string) map[string]any {
	t.Helper()
	docs := yamlDocs(t, path)
	if len(docs) != 1 {
		t.Fatalf("%s: %d documents", path, len(docs))
	}
	return docs[0].(map[string]any)
}

// TestComposeFiles: each compose file is valid against the Compose
// Specification (as docker compose loads it: no field it does not know,
// values of the right types, required fields present), and what its
// services name exists: dependencies, networks, volumes, the services
// whose namespace another joins.
func TestComposeFiles(t *testing.T) {
	s := loadCompose(t)
	for _, path := range composeFiles {
		c := readComposeFile(t, path)
		if err := validateJSON(s, c); err != nil {
			t.Errorf("%s: %v", path, err)
		}
		services, _ := c["services"].(map[string]any)
		for name, svc := range services {
			for dep := range mapOf(get(svc, "depends_on")) {
				if services[dep] == nil {
					t.Errorf("%s: %s depends on %s, which is not a service", path, name, dep)
				}
			}
			for _, n := range strs(get(svc, "networks")) {
				if _, ok := mapOf(c["networks"])[n]; !ok {
					t.Errorf("%s: %s joins network %s, which is not declared", path, name, n)
				}
			}
			for _, v := range strs(get(svc, "volumes")) {
				src, _, _ := strings.Cut(v, ":")
				if strings.HasPrefix(src, ".") || strings.HasPrefix(src, "/") {
					continue
				}
				if _, ok := mapOf(c["volumes"])[src]; !ok {
					t.Errorf("%s: %s mounts volume %s, which is not declared", path, name, src)
				}
			}
			if mode, ok := strings.CutPrefix(str(svc, "network_mode"), "service:"); ok {
				if services[mode] == nil {
					t.Errorf("%s: %s joins the namespace of %s, which is not a service", path, name, mode)
				}
				// docker refuses these beside a joined namespace.
				for _, k := range []string{"networks", "ports", "dns", "hostname", "extra_hosts"} {
					if get(svc, k) != nil {
						t.Errorf("%s: %s has %s and network_mode %s", path, name, k, str(svc, "network_mode"))
					}
				}
			}
		}
	}
}

// TestComposeSchemaRefusesMistakes: the schema catches a misspelled key,
// a value of the wrong type and a missing required field, each on a copy
// of the real file with one mistake.
func TestComposeSchemaRefusesMistakes(t *testing.T) {
	s := loadCompose(t)
	for _, tc := range []struct {
		name   string
		mutate func(services map[string]any)
		want   string
	}{
		{"misspelled key", func(svcs map[string]any) {
			a := svcs["agent"].(map[string]any)
			a["network_mod"] = a["network_mode"]
			delete(a, "network_mode")
		}, "network_mod"},
		{"wrong type", func(svcs map[string]any) {
			svcs["netinit"].(map[string]any)["cap_add"] = "NET_ADMIN"
		}, "want array"},
		{"missing required field", func(svcs map[string]any) {
			delete(get(svcs, "agent", "depends_on", "netinit").(map[string]any), "condition")
		}, "missing property 'condition'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := readComposeFile(t, composeFiles[0])
			if err := validateJSON(s, c); err != nil {
				t.Fatalf("the unchanged file: %v", err)
			}
			tc.mutate(c["services"].(map[string]any))
			err := validateJSON(s, c)
			if err == nil || !strings.Contains(errorText(err), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestComposeBoundary checks the wiring the boundary needs in
// compose/docker-compose.yml (docs/isolation.md): the agent has no network
// but the proxy's namespace, joined only once netinit installed the rules
// there; the rules send the agent's traffic to the proxy's transparent
// listener and exempt the proxy's uid and no other; only netinit holds
// NET_ADMIN; the gateway and the upstream are on networks of their own.
func TestComposeBoundary(t *testing.T) {
	c := readComposeFile(t, composeFiles[0])
	svc := func(name string) map[string]any {
		s, _ := get(c, "services", name).(map[string]any)
		if s == nil {
			t.Fatalf("no service %s", name)
		}
		return s
	}
	proxy, netinit, agent := svc("proxy"), svc("netinit"), svc("agent")

	transparent := flagValue(strs(proxy["command"]), "transparent-listen")
	if !strings.HasPrefix(transparent, "127.0.0.1:") {
		t.Errorf("proxy's --transparent-listen is %q: want the namespace's loopback", transparent)
	}
	proxyUID, _, _ := strings.Cut(str(proxy, "user"), ":")
	agentUID, _, _ := strings.Cut(str(agent, "user"), ":")
	if proxyUID == "" || agentUID == "" || agentUID == proxyUID || agentUID == "0" {
		t.Errorf("agent runs as %q, proxy as %q: each must be named, and the agent another non-root uid", agentUID, proxyUID)
	}

	for _, s := range []map[string]any{netinit, agent} {
		if str(s, "network_mode") != "service:proxy" {
			t.Errorf("network_mode %q: want service:proxy", str(s, "network_mode"))
		}
	}
	script := strings.Join(strs(netinit["command"]), "\n")
	run := portcullisLines(script)
	if len(run) != 1 || run[0][0] != "run" || !slices.Contains(run[0], "--print-rules") || !strings.Contains(script, "| nft -f -") {
		t.Fatalf("netinit does not feed portcullis run --print-rules to nft: %q", script)
	}
	if got := flagValue(run[0], "proxy"); got != transparent {
		t.Errorf("netinit's rules send traffic to %q, the proxy listens on %q", got, transparent)
	}
	if got := flagValue(run[0], "proxy-uid"); got != proxyUID {
		t.Errorf("netinit exempts uid %q, the proxy runs as %q", got, proxyUID)
	}
	for _, m := range regexp.MustCompile(`skuid != (\d+)`).FindAllStringSubmatch(script, -1) {
		if m[1] != proxyUID {
			t.Errorf("netinit's own rule exempts uid %s, the proxy runs as %s", m[1], proxyUID)
		}
	}
	if get(agent, "depends_on", "netinit", "condition") != "service_completed_successfully" {
		t.Errorf("the agent may start before the rules are installed")
	}
	if get(netinit, "depends_on", "proxy") == nil {
		t.Errorf("netinit does not wait for the proxy's namespace")
	}

	for name := range mapOf(get(c, "services")) {
		s := svc(name)
		add := strs(get(s, "cap_add"))
		if name == "netinit" {
			if !slices.Equal(add, []string{"NET_ADMIN"}) || !slices.Equal(strs(get(s, "cap_drop")), []string{"ALL"}) {
				t.Errorf("netinit's capabilities: add %v, drop %v: want NET_ADMIN alone", add, strs(get(s, "cap_drop")))
			}
		} else if len(add) > 0 || get(s, "privileged") != nil {
			t.Errorf("%s adds capabilities %v: only netinit may", name, add)
		}
	}
	if !slices.Equal(strs(get(agent, "cap_drop")), []string{"ALL"}) || !slices.Contains(strs(get(agent, "security_opt")), "no-new-privileges:true") {
		t.Errorf("the agent keeps capabilities or may gain privileges")
	}
	for k := range mapOf(get(agent, "environment")) {
		if strings.HasSuffix(strings.ToUpper(k), "_PROXY") {
			t.Errorf("the agent sets %s: the boundary needs no proxy settings", k)
		}
	}
	for _, v := range strs(get(agent, "volumes")) {
		if strings.Contains(v, "secrets") {
			t.Errorf("the agent mounts %s", v)
		}
	}

	gw, up := strs(get(svc("gateway"), "networks")), strs(get(svc("demo-mcp"), "networks"))
	if len(gw) != 1 || len(up) != 1 || gw[0] == up[0] {
		t.Errorf("the gateway (%v) and the upstream (%v) are not on networks of their own", gw, up)
	}
	if px := strs(get(proxy, "networks")); !slices.Contains(px, gw[0]) || !slices.Contains(px, up[0]) {
		t.Errorf("the proxy is on %v: it needs the gateway's network and the upstream's", px)
	}

	// The images the file builds: the Dockerfile's netinit stage has nft.
	dockerfile, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	if str(netinit, "build", "target") != "netinit" || !regexp.MustCompile(`(?m)^FROM \S+ AS netinit\n(.*\n)*?RUN .*install .*nftables`).Match(dockerfile) {
		t.Errorf("netinit's image (Dockerfile target netinit) does not install nftables")
	}
}

// mapOf is a YAML mapping (nil if v is none).
func mapOf(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}
