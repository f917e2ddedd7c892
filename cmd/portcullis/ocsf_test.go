package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/internal/ocsf"
)

// Bad OCSF flags are refused before anything is opened or sent.
func TestOCSFFlagsRefused(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte("\n"), 0o600)
	file := filepath.Join(dir, "ocsf.jsonl")
	for _, c := range []struct {
		f    ocsfFlags
		want string
	}{
		{ocsfFlags{hecURL: "http://127.0.0.1:1/x", queue: 1}, "go together"},
		{ocsfFlags{hecTokenFile: empty, queue: 1}, "go together"},
		{ocsfFlags{hecURL: "ftp://x", hecTokenFile: empty, queue: 1}, "want an http(s) URL"},
		{ocsfFlags{hecURL: "http://127.0.0.1:1/x", hecTokenFile: empty, queue: 1, file: file}, "is empty"},
		{ocsfFlags{hecURL: "http://127.0.0.1:1/x", hecTokenFile: filepath.Join(dir, "missing"), queue: 1}, "missing"},
		{ocsfFlags{file: file, keep: -1, queue: 1}, "--ocsf-keep"},
		{ocsfFlags{file: file, queue: 0}, "--ocsf-queue"},
		{ocsfFlags{otlpEndpoint: "localhost:4318", file: file, queue: 1}, "--ocsf-otlp-endpoint"},
		{ocsfFlags{otlpEndpoint: "ftp://collector:4318", queue: 1}, "want an http:// or https:// URL"},
		{ocsfFlags{otlpEndpoint: "http://127.0.0.1:1", hecURL: "http://127.0.0.1:1/x", hecTokenFile: empty, queue: 1}, "is empty"},
	} {
		es, err := c.f.open(ocsf.Proxy, slog.New(slog.DiscardHandler))
		if err == nil || !strings.Contains(err.Error(), c.want) || es != nil {
			t.Errorf("%+v: err %v, emitters %v; want an error saying %q and none", c.f, err, es, c.want)
		}
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Errorf("a refused configuration created %s (%v)", file, err)
	}
}
