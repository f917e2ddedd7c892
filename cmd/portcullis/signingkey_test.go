package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/gateway"
	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	"github.com/portcullis-dev/portcullis/internal/signing"
)

// Run where there is no store or CA, signing-key and proxy ca refuse
// with a way forward, and the directory stays empty: a key or CA made
// here would not be the gateway's or the proxy's.
func TestNothingCreatedSilently(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"signing-key", "list"}, "give --gateway URL"},
		{[]string{"signing-key", "list", "--data-dir", "gw"}, "no gateway store at gw/portcullis.db"},
		{[]string{"signing-key", "rotate"}, "no gateway store at portcullis-data/portcullis.db"},
		{[]string{"proxy", "ca"}, "no proxy CA in ./portcullis-proxy"},
		{[]string{"proxy", "ca", "--data-dir", "proxy"}, "--create"},
	} {
		stdout, stderr, code := runCLI(t, tt.args...)
		if code == exitOK || stdout != "" || !strings.Contains(stderr, tt.want) || !strings.Contains(stderr, "nothing was created") {
			t.Errorf("%v in an empty directory: exit %d, stdout %q, stderr %q; want a refusal saying %q", tt.args, code, stdout, stderr, tt.want)
		}
		if left, _ := os.ReadDir(dir); len(left) != 0 {
			t.Fatalf("%v created %v", tt.args, left)
		}
	}

	// Asked for, the CA is made once and then read.
	first, stderr, code := runCLI(t, "proxy", "ca", "--data-dir", "proxy", "--create")
	ok(t, code, stderr)
	again, stderr, code := runCLI(t, "proxy", "ca", "--data-dir", "proxy")
	ok(t, code, stderr)
	if !strings.HasPrefix(first, "-----BEGIN CERTIFICATE-----") || again != first {
		t.Fatalf("proxy ca --create printed %q, then %q", first, again)
	}
}

// signing-key list --gateway shows the key the gateway signs with.
func TestSigningKeyFromGateway(t *testing.T) {
	g := startGateway(t)
	want, err := gateway.SigningKeyChain(t.Context(), g.Store)
	if err != nil {
		t.Fatal(err)
	}
	for _, token := range []string{gatewaytest.AdminToken, g.json(t, gatewaytest.AdminToken, "sandbox", "create", "orders")["token"].(string)} {
		if got := strings.Fields(g.must(t, token, "signing-key", "list")); len(got) != 1 || got[0] != want[0] {
			t.Errorf("signing-key list --gateway: %q, want the gateway's key %q", got, want)
		}
	}
	if keys, _ := g.json(t, gatewaytest.AdminToken, "signing-key", "list")["keys"].([]any); len(keys) != 1 || keys[0] != want[0] {
		t.Errorf("signing-key list -o json: %v, want keys [%s]", keys, want[0])
	}
}

// On the gateway's store: list shows the chain and creates nothing;
// rotate appends a key and keeps the chain's start.
func TestSigningKeyOnStore(t *testing.T) {
	dir := t.TempDir()
	_, stderr, code := runCLI(t, "migrate", "--data-dir", dir)
	ok(t, code, stderr)
	if _, stderr, code := runCLI(t, "signing-key", "list", "--data-dir", dir); code == exitOK || !strings.Contains(stderr, "no signing key yet") {
		t.Fatalf("list on a store without a key: exit %d, stderr %q", code, stderr)
	}
	list := func() []string {
		t.Helper()
		stdout, stderr, code := runCLI(t, "signing-key", "list", "--data-dir", dir)
		ok(t, code, stderr)
		return strings.Fields(stdout)
	}
	stdout, stderr, code := runCLI(t, "signing-key", "rotate", "--data-dir", dir)
	ok(t, code, stderr)
	first := list()
	if len(first) == 0 || !strings.Contains(stdout, first[len(first)-1]) {
		t.Fatalf("after rotate: chain %q, output %q", first, stdout)
	}
	for _, k := range first {
		if _, err := signing.ParsePublicKey(k); err != nil {
			t.Fatalf("listed key %q: %v", k, err)
		}
	}
	if again := list(); strings.Join(again, " ") != strings.Join(first, " ") {
		t.Fatalf("a second list changed the chain: %q, then %q", first, again)
	}
	_, stderr, code = runCLI(t, "signing-key", "rotate", "--data-dir", dir)
	ok(t, code, stderr)
	if after := list(); len(after) != len(first)+1 || after[0] != first[0] {
		t.Fatalf("after a second rotate: %q, before %q", after, first)
	}
	if _, _, code := runCLI(t, "signing-key", "rotate", "extra-arg", "--data-dir", dir); code != exitInvalid {
		t.Fatalf("an extra argument: exit %d, want %d", code, exitInvalid)
	}
	if _, err := os.Stat(filepath.Join(dir, "portcullis.db")); err != nil {
		t.Fatal(err)
	}
}
