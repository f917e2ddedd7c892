package cliconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// tree is a root like portcullis's: a global repeatable --gateway and
// --token, and two commands that take --config.
type tree struct {
	root             *cobra.Command
	gateways         []string
	token, listen    string
	tokenFile        string
	rate             float64
	insecure         bool
	maxAge           time.Duration
	databaseURL, tls string
	ran              string
}

func newTree(env map[string]string) *tree {
	t := &tree{}
	t.root = &cobra.Command{Use: "portcullis", SilenceErrors: true, SilenceUsage: true}
	t.root.PersistentFlags().StringArrayVar(&t.gateways, "gateway", nil, "")
	t.root.PersistentFlags().StringVar(&t.token, "token", "", "")
	t.root.PersistentFlags().StringVar(&t.tokenFile, "token-file", "", "")
	run := func(cmd *cobra.Command, _ []string) error { t.ran = cmd.Name(); return nil }
	proxy := &cobra.Command{Use: "proxy", RunE: run}
	proxy.Flags().StringVar(&t.listen, "listen", "127.0.0.1:3128", "")
	proxy.Flags().BoolVar(&t.insecure, "insecure", false, "")
	proxy.Flags().DurationVar(&t.maxAge, "max-reconnect-delay", 30*time.Second, "")
	gateway := &cobra.Command{Use: "gateway", RunE: run}
	gateway.Flags().StringVar(&t.databaseURL, "database-url", "", "")
	gateway.Flags().StringVar(&t.tls, "tls-cert", "", "")
	gateway.Flags().Float64Var(&t.rate, "decision-rate", 100, "")
	t.root.AddCommand(proxy, gateway)
	Add(t.root, Spec{
		Commands: map[string][]string{"proxy": {"gateway", "token-file"}, "gateway": nil},
		Env:      map[string]string{"gateway": "PORTCULLIS_GATEWAY", "database-url": "PORTCULLIS_DATABASE_URL"},
	}, func(k string) string { return env[k] })
	return t
}

// run runs the tree with a config file holding yaml and args after it.
func (t *tree) run(tb testing.TB, yaml string, args ...string) error {
	tb.Helper()
	file := filepath.Join(tb.TempDir(), "portcullis.yaml")
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		tb.Fatal(err)
	}
	t.root.SetArgs(append(append(args[:1:1], "--config", file), args[1:]...))
	return t.root.Execute()
}

func TestFileSetsWhatNothingElseDid(t *testing.T) {
	tr := newTree(nil)
	err := tr.run(t, "listen: 127.0.0.1:9999\ninsecure: true\nmax-reconnect-delay: 5s\ntoken-file: /run/orders.token\n", "proxy")
	if err != nil {
		t.Fatal(err)
	}
	if tr.ran != "proxy" || tr.listen != "127.0.0.1:9999" || !tr.insecure || tr.maxAge != 5*time.Second || tr.tokenFile != "/run/orders.token" {
		t.Errorf("ran %q listen %q insecure %v delay %v token-file %q", tr.ran, tr.listen, tr.insecure, tr.maxAge, tr.tokenFile)
	}
}

func TestPrecedence(t *testing.T) {
	const file = "gateway: [http://file-a:7070, http://file-b:7070]\nlisten: 127.0.0.1:1111\n"
	// The flag beats the environment and the file.
	tr := newTree(map[string]string{"PORTCULLIS_GATEWAY": "http://env:7070"})
	if err := tr.run(t, file, "proxy", "--gateway", "http://flag:7070", "--listen", "127.0.0.1:2222"); err != nil {
		t.Fatal(err)
	}
	if strings.Join(tr.gateways, ",") != "http://flag:7070" || tr.listen != "127.0.0.1:2222" {
		t.Errorf("flags: gateway %v listen %q", tr.gateways, tr.listen)
	}
	// The environment beats the file: the flag stays unset for the
	// command to read its variable.
	tr = newTree(map[string]string{"PORTCULLIS_GATEWAY": "http://env:7070"})
	if err := tr.run(t, file, "proxy"); err != nil {
		t.Fatal(err)
	}
	if len(tr.gateways) != 0 || tr.listen != "127.0.0.1:1111" {
		t.Errorf("environment: gateway %v (want none: the variable's), listen %q", tr.gateways, tr.listen)
	}
	// The file beats the defaults; a list is a repeated flag.
	tr = newTree(nil)
	if err := tr.run(t, file, "proxy"); err != nil {
		t.Fatal(err)
	}
	if strings.Join(tr.gateways, ",") != "http://file-a:7070,http://file-b:7070" {
		t.Errorf("file: gateway %v", tr.gateways)
	}
	// One value for a repeatable flag is a list of one.
	tr = newTree(nil)
	if err := tr.run(t, "gateway: http://one:7070\n", "proxy"); err != nil {
		t.Fatal(err)
	}
	if strings.Join(tr.gateways, ",") != "http://one:7070" {
		t.Errorf("one value: gateway %v", tr.gateways)
	}
}

func TestRefused(t *testing.T) {
	for _, tc := range []struct {
		name, cmd, yaml string
		want            []string
	}{
		{"unknown key", "proxy", "colour: blue\n", []string{`:1: unknown key "colour": portcullis proxy has no flag --colour`}},
		{"near miss", "proxy", "insecure: true\nlisen: b\n", []string{`:2: unknown key "lisen"`, `did you mean "listen"?`}},
		{"dashes", "gateway", "--tls-cert: c.pem\n", []string{`did you mean "tls-cert"?`}},
		{"other command's flag", "proxy", "tls-cert: c.pem\n", []string{`key "tls-cert" is a flag of portcullis gateway, not of portcullis proxy`}},
		{"global flag of the other command", "gateway", "gateway: http://x\n", []string{`key "gateway" is a flag of portcullis proxy, not of portcullis gateway`}},
		{"wrong type: bool", "proxy", "insecure: yes\n", []string{`key "insecure": want a boolean (true or false), got "yes"`}},
		{"wrong type: number", "gateway", "decision-rate: fast\n", []string{`key "decision-rate": want a number, got "fast"`}},
		{"wrong type: duration", "proxy", "max-reconnect-delay: soon\n", []string{`key "max-reconnect-delay": want a duration (30s, 5m, 168h), got "soon"`}},
		{"wrong type: list", "proxy", "listen: [a, b]\n", []string{`key "listen": want a string, got a list`}},
		{"wrong type: mapping", "proxy", "listen: {host: a}\n", []string{`key "listen": want a string, got a mapping`}},
		{"no value", "proxy", "listen:\n", []string{`key "listen": want a string, got no value`}},
		{"duplicate key", "proxy", "listen: a:1\ninsecure: true\nlisten: b:2\n", []string{`:3: key "listen" given twice (first on line 1)`}},
		{"token", "proxy", "token: s3cret\n", []string{`key "token" refused: tokens never go in a config file`, "token-file"}},
		{"config", "proxy", "config: other.yaml\n", []string{`key "config" refused`}},
		{"not a mapping", "proxy", "- listen\n", []string{"want a mapping of flag names to values"}},
		{"two documents", "proxy", "listen: a:1\n---\nlisten: b:2\n", []string{"a second document"}},
		{"every problem", "proxy", "colour: blue\ninsecure: 3\n", []string{`:1: unknown key "colour"`, `:2: key "insecure"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTree(nil)
			err := tr.run(t, tc.yaml, tc.cmd)
			if err == nil {
				t.Fatalf("accepted %q", tc.yaml)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nwants %q", err, w)
				}
			}
			if tr.ran != "" {
				t.Errorf("%s ran", tr.ran)
			}
		})
	}
}

// A file with one bad key sets nothing, so the command never half-runs.
func TestInvalidFileSetsNothing(t *testing.T) {
	tr := newTree(nil)
	if err := tr.run(t, "listen: 127.0.0.1:9999\ninsecure: maybe\n", "proxy"); err == nil {
		t.Fatal("accepted")
	}
	if tr.listen != "127.0.0.1:3128" {
		t.Errorf("listen %q was set from an invalid file", tr.listen)
	}
}

func TestEmptyFileAndNoFile(t *testing.T) {
	tr := newTree(nil)
	if err := tr.run(t, "# nothing yet\n", "proxy"); err != nil || tr.listen != "127.0.0.1:3128" {
		t.Errorf("empty file: %v, listen %q", err, tr.listen)
	}
	tr = newTree(nil)
	tr.root.SetArgs([]string{"proxy"})
	if err := tr.root.Execute(); err != nil || tr.ran != "proxy" {
		t.Errorf("no --config: %v, ran %q", err, tr.ran)
	}
	tr = newTree(nil)
	tr.root.SetArgs([]string{"proxy", "--config", filepath.Join(t.TempDir(), "missing.yaml")})
	if err := tr.root.Execute(); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing file: %v", err)
	}
}

func TestNearest(t *testing.T) {
	keys := []string{"listen", "data-dir", "policy", "token", "insecure"}
	for name, want := range map[string]string{"lisen": "listen", "datadir": "data-dir", "polcy": "policy", "toke": "", "colour": "", "insecur": "insecure"} {
		if got := nearest(name, keys); got != want {
			t.Errorf("nearest(%q) = %q, want %q", name, got, want)
		}
	}
}
