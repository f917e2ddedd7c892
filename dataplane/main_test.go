package dataplane_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine the proxy starts (tunnels, intercepted connections,
// watchers) ends when its owner stops.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString("goroutines leaked: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}
