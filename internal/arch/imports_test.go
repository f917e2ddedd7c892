package arch

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// layers is ARCHITECTURE.md's package map as rules: what each package's
// non-test files may import of the module ("x/..." is x and everything
// below it). A package missing here fails the test: add it to the map and
// here. The generated API (proto/...) is imported only at the API's edges.
var layers = map[string][]string{
	"policy":                     {"internal/jcs", "internal/spelling"},
	"prover":                     {"policy"},
	"provider":                   {"policy"},
	"advisor":                    {"policy", "prover", "decision"},
	"approval":                   {"prover"},
	"decision":                   nil,
	"decision/decisionpb":        {"decision", "proto/portcullis/v1"},
	"store":                      {"store/internal/strmap", "decision"},
	"store/internal/strmap":      nil,
	"store/internal/sqlwhere":    nil,
	"store/internal/decisionsql": {"store", "store/internal/sqlwhere", "decision"},
	"store/internal/sentrysql":   {"store", "store/internal/sqlexec", "store/internal/sqlwhere"},
	"store/internal/tooldefsql":  {"store", "store/internal/sqlexec", "store/internal/sqlwhere"},
	"store/internal/callsql":     {"store", "store/internal/sqlexec", "store/internal/sqlwhere"},
	"store/internal/providersql": {"store", "store/internal/sqlexec", "store/internal/strmap"},
	"store/internal/sqlexec":     nil,
	"store/internal/versionsql":  {"store", "store/internal/sqlexec", "store/internal/strmap"},
	"store/internal/sqlread":     {"store", "store/internal/sqlexec", "store/internal/versionsql", "store/internal/tooldefsql", "store/internal/sentrysql", "store/internal/callsql", "store/internal/providersql"},
	"store/postgres":             {"store/...", "migrations"},
	"store/sqlite":               {"store/...", "migrations"},
	"store/storetest":            {"store", "decision"},
	"store/backup":               {"store", "migrations"},
	"migrations":                 nil,
	"lifecycle":                  {"store", "advisor", "prover", "approval", "policy", "provider", "internal/secretbox", "internal/telemetry", "internal/events"},
	"gateway": {"gateway/...", "lifecycle", "store", "provider", "internal/secretbox", "store/postgres", "store/sqlite", "store/backup", "migrations", "advisor", "prover", "policy", "sentry", "web", "decision/...",
		"internal/ocsf/...", "internal/events", "internal/telemetry/otlp", "internal/version", "proto/..."},
	"gateway/transport":    {"internal/telemetry"},
	"gateway/distribution": {"gateway/transport", "lifecycle", "internal/events", "store", "decision/...", "policy", "provider", "internal/signing", "internal/ca", "internal/telemetry", "proto/portcullis/v1"},
	"gateway/decisions":    {"store", "decision", "lifecycle"},
	"gateway/notify":       {"store", "lifecycle", "internal/events"},
	"gateway/sentryintake": {"store", "sentry", "lifecycle", "internal/events"},
	"gateway/gatewaytest":  {"gateway", "store/...", "internal/pgtest", "internal/apiclient", "internal/secretbox", "policy", "proto/..."},
	"sentry":               {"internal/jcs", "internal/strictjson"},
	"dataplane": {"dataplane/credentials", "dataplane/decision", "dataplane/gatewayclient", "dataplane/h1", "dataplane/hold", "dataplane/identity", "dataplane/match",
		"dataplane/mcp", "dataplane/mcp/relay", "dataplane/policylocal", "dataplane/ratelimit", "dataplane/sandboxdns", "dataplane/transparent", "dataplane/tunnelstart", "dataplane/wsframe", "dataplane/wsproxy", "policy", "internal/ca", "internal/telemetry", "internal/rotate", "internal/exetrim"},
	"dataplane/h1":              nil,
	"dataplane/credentials":     {"dataplane/h1", "policy", "provider"},
	"dataplane/hold":            {"dataplane/mcp", "policy"},
	"dataplane/wsframe":         {"provider"},
	"dataplane/wsproxy":         {"dataplane/h1", "dataplane/wsframe", "policy"},
	"dataplane/tunnelstart":     {"dataplane/h1", "policy"},
	"dataplane/transparent":     {"dataplane/tunnelstart"},
	"dataplane/match":           {"policy", "internal/strictjson"},
	"dataplane/mcp":             {"policy", "internal/strictjson"},
	"dataplane/mcp/relay":       {"dataplane/mcp", "dataplane/decision"},
	"dataplane/mcp/ssetest":     nil,
	"dataplane/mcp/listing":     {"dataplane/mcp"},
	"dataplane/identity":        nil,
	"dataplane/sandboxdns":      {"policy"},
	"dataplane/ratelimit":       {"dataplane/match", "policy"},
	"dataplane/decision":        {"decision"},
	"dataplane/gatewayclient":   {"policy", "provider", "dataplane/decision", "dataplane/hold", "decision/decisionpb", "internal/signing", "internal/ca", "internal/atomicfile", "internal/telemetry", "proto/portcullis/v1"},
	"dataplane/policylocal":     {"advisor", "policy", "dataplane/decision", "proto/portcullis/v1"},
	"dataplane/dataplanetest":   {"dataplane", "dataplane/hold", "gateway/gatewaytest", "proto/..."},
	"internal/ocsf":             {"decision", "internal/rotate", "internal/version", "internal/telemetry/otlp"},
	"internal/ocsf/gatewayocsf": {"internal/ocsf", "store", "sentry"},
	"internal/ocsf/ocsftest":    nil,
	"internal/jcs":              {"internal/strictjson"},
	"internal/strictjson":       nil,
	"internal/secretbox":        nil,
	"internal/events":           {"store", "sentry"},
	"internal/ca":               {"internal/atomicfile"},
	"internal/signing":          {"proto/portcullis/v1"},
	"internal/atomicfile":       nil,
	"internal/exetrim":          nil,
	"internal/rotate":           nil,
	"internal/pprofserve":       nil,
	"internal/cliconfig":        {"internal/spelling"},
	"internal/spelling":         nil,
	"internal/secretinput":      {"provider"},
	"internal/cliexit":          {"internal/apiclient", "internal/apitext", "prover"},
	"internal/clitree":          {"internal/cliexit"},
	"internal/telemetry":        nil,
	"internal/telemetry/otlp":   nil,
	"internal/version":          nil,
	"internal/apitext":          {"policy", "prover", "proto/portcullis/v1"},
	"prover/offline":            {"policy", "prover", "internal/apitext"},
	"internal/pgtest":           nil,
	"internal/netnstest":        nil,
	"internal/arch":             nil,
	"internal/apiclient":        {"proto/..."},
	"internal/doctor":           {"internal/apiclient", "internal/signing", "proto/portcullis/v1"},
	"web":                       nil,
	"web/webtest":               nil,
	"demo":                      nil,
	"boundary":                  nil,
	"deploy":                    nil, // tests only
	"cmd/portcullis":            {"..."},
}

// external is who may import a library that only one layer should hold.
var external = map[string][]string{
	"github.com/open-policy-agent/opa": {"approval"},
	"github.com/jackc/pgx":             {"store/postgres", "internal/pgtest"},
	"modernc.org/sqlite":               {"store/sqlite"},
	"github.com/google/nftables":       {"boundary"},
	"github.com/vishvananda/netlink":   {"boundary", "internal/netnstest"},
	"github.com/aws/smithy-go":         {"dataplane/credentials"},
	"golang.org/x/oauth2":              {"dataplane/credentials"},
}

func TestImports(t *testing.T) {
	for _, p := range products(t) {
		name := rel(p.ImportPath)
		allowed, ok := layers[name]
		if !ok {
			t.Errorf("%s is not in the package map: add its row to ARCHITECTURE.md and to layers", name)
			continue
		}
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, module+"/") {
				if !allows(allowed, rel(imp)) {
					t.Errorf("%s imports %s: its row of the package map allows %v", name, rel(imp), allowed)
				}
				continue
			}
			for lib, who := range external {
				if (imp == lib || strings.HasPrefix(imp, lib+"/")) && !allows(who, name) {
					t.Errorf("%s imports %s: only %v may", name, imp, who)
				}
			}
		}
	}
}

// allows reports whether the patterns admit path.
func allows(patterns []string, path string) bool {
	return slices.ContainsFunc(patterns, func(p string) bool {
		if p == "..." {
			return true
		}
		if base, ok := strings.CutSuffix(p, "/..."); ok {
			return path == base || strings.HasPrefix(path, base+"/")
		}
		return path == p
	})
}

// TestGatewayNeverLinksTheProxy: the gateway's packages never link the
// data plane, directly or through another package.
func TestGatewayNeverLinksTheProxy(t *testing.T) {
	for _, p := range goList(t, "-deps", "./gateway/...", "./lifecycle/...") {
		if r := rel(p.ImportPath); strings.HasPrefix(r, "dataplane") {
			t.Errorf("the gateway links %s", r)
		}
	}
}

// proxyOnly is what the sidecar image's build (-tags proxyonly) links of
// the module: the proxy, what it shares with the gateway (ARCHITECTURE.md
// says why each), and nothing of the gateway, its stores or the console.
var proxyOnly = []string{
	"cmd/portcullis",
	"dataplane", "dataplane/credentials", "dataplane/decision", "dataplane/gatewayclient", "dataplane/h1", "dataplane/hold", "dataplane/identity",
	"internal/strictjson", "dataplane/match", "dataplane/mcp", "dataplane/mcp/relay", "dataplane/policylocal", "dataplane/ratelimit",
	"dataplane/sandboxdns", "dataplane/transparent", "dataplane/tunnelstart", "dataplane/wsframe", "dataplane/wsproxy", "decision", "decision/decisionpb", "policy", "prover", "provider", "advisor",
	"internal/atomicfile", "internal/ca", "internal/signing", "internal/telemetry", "internal/telemetry/otlp",
	"internal/jcs", "internal/exetrim", "internal/rotate", "internal/version", "internal/ocsf", "internal/apitext",
	"internal/apiclient", "internal/pprofserve", "internal/cliconfig", "internal/spelling", "internal/cliexit", "internal/clitree",
	"proto/portcullis/v1", "proto/portcullis/v1/portcullisv1connect",
}

func TestProxyOnlyBuild(t *testing.T) {
	var linked []string
	for _, p := range goList(t, "-deps", "-tags", "proxyonly", "./cmd/portcullis") {
		if p.ours() {
			linked = append(linked, rel(p.ImportPath))
		}
	}
	want := slices.Clone(proxyOnly)
	slices.Sort(want)
	slices.Sort(linked)
	if !slices.Equal(linked, want) {
		t.Errorf("the proxy-only build links\n  %v\nthe map says\n  %v", linked, want)
	}
}

// TestMapNamesEveryPackage: ARCHITECTURE.md's package map has a row for
// every package of the product, and no row for a package that is gone.
func TestMapNamesEveryPackage(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(root(t), "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	mapped := map[string]bool{}
	for line := range strings.Lines(string(data)) {
		cells := strings.Split(line, "|")
		if !strings.HasPrefix(line, "| `") || len(cells) < 3 {
			continue
		}
		for _, name := range strings.Split(cells[1], ",") {
			mapped[strings.Trim(strings.TrimSpace(name), "`")] = true
		}
	}
	for _, p := range products(t) {
		name := rel(p.ImportPath)
		if !mapped[name] {
			t.Errorf("ARCHITECTURE.md's package map has no row naming `%s`", name)
		}
		delete(mapped, name)
	}
	for name := range mapped {
		if _, ok := layers[name]; !ok && !strings.HasPrefix(name, "proto/") {
			t.Errorf("ARCHITECTURE.md's package map names `%s`, which is not a package", name)
		}
	}
}
