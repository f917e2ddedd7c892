package gatewayclient

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// KeptProxyID returns the proxy id kept in dataDir (the file proxy-id),
// creating one (host name and a random suffix) on first start: the name
// the gateway knows the proxy by across its restarts.
func KeptProxyID(dataDir string) (string, error) {
	path := filepath.Join(dataDir, "proxy-id")
	if b, err := os.ReadFile(path); err == nil {
		if id := strings.TrimSpace(string(b)); id != "" {
			return id, nil
		}
	}
	host, _ := os.Hostname()
	host = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' {
			return r
		}
		return -1
	}, host)
	if host == "" {
		host = "proxy"
	}
	var b [3]byte
	rand.Read(b[:])
	id := fmt.Sprintf("%s-%x", host, b)
	if err := os.WriteFile(path, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("keep proxy id: %w", err)
	}
	return id, nil
}
