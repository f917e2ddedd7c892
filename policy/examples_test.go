package policy

import (
	"os"
	"path/filepath"
	"testing"
)

// The policies under examples/ (the README's walkthrough, the compose
// file's proxy) stay valid.
func TestExamplesParse(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "examples", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no example policies found: %v", err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := Parse(data); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}
