package gateway_test

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/gateway"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// TestRunSecretsKey: an SQLite gateway without --secrets-key-file makes
// its key beside its database on the first start, says where, and keeps
// it; a key file given is read, and refused when others may read it or
// it is not one.
func TestRunSecretsKey(t *testing.T) {
	dir := t.TempDir()
	logs := &lockedBuffer{}
	cfg := gateway.RunConfig{
		Server: gateway.Config{Listen: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(logs, nil))},
		Store:  gateway.StoreConfig{DataDir: filepath.Join(dir, "data")},
	}
	s, stop := runProcess(t, cfg)
	_, err := providerClient("http://"+s.Addr.String(), s.AdminToken).CreateProvider(t.Context(), &portcullisv1.CreateProviderRequest{
		Name: "gh", Type: "bearer", Hosts: []string{"api.github.com"}, Secret: map[string][]byte{"token": []byte(leakSecret)},
	})
	if err != nil {
		t.Errorf("CreateProvider on a gateway with its default key: %v", err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "data", gateway.SecretsKeyFile)
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("default key file: %v, %v", fi, err)
	}
	first, _ := os.ReadFile(path)
	if !strings.Contains(logs.String(), path) || !strings.Contains(logs.String(), "never in them") {
		t.Errorf("the start did not say where the key is:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), strings.TrimSpace(string(first))) {
		t.Error("the key itself was logged")
	}
	if _, stop := runProcess(t, cfg); stop() != nil {
		t.Fatal("second start failed")
	}
	if again, _ := os.ReadFile(path); string(again) != string(first) {
		t.Error("the second start made another key")
	}

	// Given explicitly: read as it is, refused when unsafe or malformed.
	cfg.SecretsKeyFile = path
	if _, stop := runProcess(t, cfg); stop() != nil {
		t.Fatal("a start with --secrets-key-file failed")
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	err = gateway.Run(t.Context(), cfg)
	if _, ok := errors.AsType[*gateway.SettingError](err); !ok || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("Run with a world-readable key = %v", err)
	}
	bad := filepath.Join(dir, "bad.key")
	if err := os.WriteFile(bad, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.SecretsKeyFile = bad
	err = gateway.Run(t.Context(), cfg)
	if _, ok := errors.AsType[*gateway.SettingError](err); !ok || !strings.Contains(err.Error(), "--secrets-key-file") {
		t.Errorf("Run with a malformed key = %v", err)
	}
}
