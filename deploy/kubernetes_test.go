package deploy

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// manifests reads every document of deploy/kubernetes, by "kind/name".
func manifests(t *testing.T) map[string]map[string]any {
	t.Helper()
	files, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in kubernetes/ (%v)", err)
	}
	out := map[string]map[string]any{}
	for _, f := range files {
		for _, doc := range yamlDocs(t, f) {
			m, _ := doc.(map[string]any)
			key := str(m, "kind") + "/" + str(m, "metadata", "name")
			if _, dup := out[key]; dup {
				t.Fatalf("%s: %s twice", f, key)
			}
			out[key] = m
		}
	}
	return out
}

// TestKubernetesManifests: every manifest is valid against Kubernetes'
// own OpenAPI schema for its apiVersion and kind, strictly: no field the
// schema does not name, every value of the schema's type, every required
// field present.
func TestKubernetesManifests(t *testing.T) {
	k := loadKubernetes(t)
	ms := manifests(t)
	for key, m := range ms {
		if err := k.validate(m); err != nil {
			t.Errorf("%s: %v", key, err)
		}
	}
	for _, want := range []string{"Deployment/orders-sandbox", "NetworkPolicy/orders-sandbox", "ServiceAccount/orders-sandbox", "Secret/orders-proxy-token", "ConfigMap/orders-proxy"} {
		if ms[want] == nil {
			t.Errorf("deploy/kubernetes has no %s", want)
		}
	}
}

// TestKubernetesSchemaRefusesMistakes: the check above catches what the
// API server would refuse — a misspelled field, a value of the wrong type,
// a required field missing, a kind of no API — each shown on a copy of the
// real Deployment with one mistake.
func TestKubernetesSchemaRefusesMistakes(t *testing.T) {
	k := loadKubernetes(t)
	for _, tc := range []struct {
		name   string
		mutate func(d map[string]any)
		want   string
	}{
		{"misspelled field", func(d map[string]any) {
			c := container(d, "initContainers", "proxy")
			c["imagePullPolcy"] = c["imagePullPolicy"]
			delete(c, "imagePullPolicy")
		}, "imagePullPolcy"},
		{"misspelled field in a nested object", func(d map[string]any) {
			sc := container(d, "containers", "agent")["securityContext"].(map[string]any)
			sc["runAsUSer"] = sc["runAsUser"]
			delete(sc, "runAsUser")
		}, "runAsUSer"},
		{"wrong type", func(d map[string]any) {
			container(d, "initContainers", "proxy")["securityContext"].(map[string]any)["runAsUser"] = "65532"
		}, "got string, want integer"},
		{"wrong type: a list given one string", func(d map[string]any) {
			container(d, "initContainers", "netinit")["securityContext"].(map[string]any)["capabilities"].(map[string]any)["add"] = "NET_ADMIN"
		}, "got string, want array"},
		{"missing required field", func(d map[string]any) {
			delete(d["spec"].(map[string]any), "selector")
		}, "missing property 'selector'"},
		{"missing required field in a list", func(d map[string]any) {
			delete(container(d, "containers", "agent"), "name")
		}, "missing property 'name'"},
		{"no such apiVersion", func(d map[string]any) { d["apiVersion"] = "apps/v1beta9" }, "no such kind"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := manifests(t)["Deployment/orders-sandbox"]
			if err := k.validate(d); err != nil {
				t.Fatalf("the unchanged Deployment: %v", err)
			}
			tc.mutate(d)
			err := k.validate(d)
			if err == nil || !strings.Contains(errorText(err), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestKubernetesBoundary checks what the schemas cannot: the pieces agree
// with each other the way the boundary needs (docs/isolation.md).
func TestKubernetesBoundary(t *testing.T) {
	ms := manifests(t)
	d := ms["Deployment/orders-sandbox"]
	pod := d["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	inits, _ := pod["initContainers"].([]any)
	if len(inits) < 2 || str(inits[0].(map[string]any), "name") != "netinit" || str(inits[1].(map[string]any), "name") != "proxy" {
		t.Fatalf("initContainers are not netinit then proxy: the rules must be in place before anything else runs")
	}
	netinit, proxy, agent := container(d, "initContainers", "netinit"), container(d, "initContainers", "proxy"), container(d, "containers", "agent")

	// The proxy: a native sidecar listening transparently where the rules send
	// traffic, as the uid the rules exempt.
	if str(proxy, "restartPolicy") != "Always" {
		t.Errorf("proxy is not a native sidecar (restartPolicy: Always)")
	}
	proxyArgs := strs(proxy["args"])
	transparent := flagValue(proxyArgs, "transparent-listen")
	if transparent == "" || !strings.HasPrefix(transparent, "127.0.0.1:") {
		t.Errorf("proxy's --transparent-listen is %q: want the pod's loopback", transparent)
	}
	script := strings.Join(strs(netinit["args"]), "\n")
	run := portcullisLines(script)
	if len(run) != 1 || run[0][0] != "run" || !slices.Contains(run[0], "--print-rules") || !strings.Contains(script, "| nft -f -") {
		t.Fatalf("netinit does not feed portcullis run --print-rules to nft: %q", script)
	}
	if got := flagValue(run[0], "proxy"); got != transparent {
		t.Errorf("netinit's rules send traffic to %q, the proxy listens on %q", got, transparent)
	}
	proxyUID := num(proxy, "securityContext", "runAsUser")
	if got := flagValue(run[0], "proxy-uid"); got != proxyUID || proxyUID == "" {
		t.Errorf("netinit exempts uid %q, the proxy runs as %q", got, proxyUID)
	}
	if str(proxy, "securityContext", "runAsNonRoot") != "true" {
		t.Errorf("proxy may run as root")
	}

	// The agent: another uid, no way to change the rules or its uid.
	agentUID := num(agent, "securityContext", "runAsUser")
	if agentUID == "" || agentUID == proxyUID || agentUID == "0" {
		t.Errorf("agent runs as uid %q (the proxy: %q): it must be another, non-root uid", agentUID, proxyUID)
	}
	if str(agent, "securityContext", "allowPrivilegeEscalation") != "false" || !slices.Equal(strs(get(agent, "securityContext", "capabilities", "drop")), []string{"ALL"}) {
		t.Errorf("agent keeps capabilities or may gain privileges: %v", agent["securityContext"])
	}
	for _, name := range []string{"initContainers", "containers"} {
		for _, c := range list(pod[name]) {
			c := c.(map[string]any)
			if add := strs(get(c, "securityContext", "capabilities", "add")); len(add) > 0 && (str(c, "name") != "netinit" || !slices.Equal(add, []string{"NET_ADMIN"})) {
				t.Errorf("%s adds capabilities %v: only netinit may, and only NET_ADMIN", str(c, "name"), add)
			}
			for _, e := range list(get(c, "env")) {
				if n := strings.ToUpper(str(e.(map[string]any), "name")); str(c, "name") == "agent" && strings.HasSuffix(n, "_PROXY") {
					t.Errorf("agent sets %s: the boundary needs no proxy settings", n)
				}
			}
		}
	}

	// The token: mounted in the proxy only; no API token anywhere.
	for _, c := range []map[string]any{netinit, agent} {
		for _, v := range list(get(c, "volumeMounts")) {
			if str(v.(map[string]any), "name") == "proxy-token" {
				t.Errorf("%s mounts the proxy's token", str(c, "name"))
			}
		}
	}
	if str(pod, "automountServiceAccountToken") != "false" || str(pod, "shareProcessNamespace") == "true" {
		t.Errorf("the pod mounts an API token or shares its process namespace")
	}
	sa := ms["ServiceAccount/"+str(pod, "serviceAccountName")]
	if sa == nil || str(sa, "automountServiceAccountToken") != "false" {
		t.Errorf("service account %q missing or automounting its token", str(pod, "serviceAccountName"))
	}
	for _, v := range list(pod["volumes"]) {
		if name := str(v.(map[string]any), "secret", "secretName"); name != "" && ms["Secret/"+name] == nil {
			t.Errorf("volume uses secret %s, which is not in deploy/kubernetes", name)
		}
	}
	for _, e := range list(get(proxy, "env")) {
		ref := get(e.(map[string]any), "valueFrom", "configMapKeyRef")
		if ref == nil {
			continue
		}
		cm := ms["ConfigMap/"+str(ref.(map[string]any), "name")]
		if cm == nil || get(cm, "data", str(ref.(map[string]any), "key")) == nil {
			t.Errorf("proxy's env reads %v, which no ConfigMap here holds", ref)
		}
	}

	// The NetworkPolicy: selects this pod, denies ingress, limits egress.
	np := ms["NetworkPolicy/orders-sandbox"]
	podLabels := get(d, "spec", "template", "metadata", "labels").(map[string]any)
	for k, v := range get(np, "spec", "podSelector", "matchLabels").(map[string]any) {
		if podLabels[k] != v {
			t.Errorf("the NetworkPolicy selects %s=%v, which the pod is not labelled", k, v)
		}
	}
	if types := strs(get(np, "spec", "policyTypes")); !slices.Contains(types, "Egress") || !slices.Contains(types, "Ingress") {
		t.Errorf("the NetworkPolicy's policyTypes %v: want Ingress and Egress", types)
	}
	for i, rule := range list(get(np, "spec", "egress")) {
		if get(rule.(map[string]any), "to") == nil || get(rule.(map[string]any), "ports") == nil {
			t.Errorf("egress rule %d allows any destination or any port", i)
		}
	}
}

// container is the pod template's container of that name in list
// ("containers" or "initContainers").
func container(d map[string]any, list, name string) map[string]any {
	cs, _ := get(d, "spec", "template", "spec", list).([]any)
	for _, c := range cs {
		if c, ok := c.(map[string]any); ok && c["name"] == name {
			return c
		}
	}
	panic("no " + list + " " + name)
}
