package gateway_test

import (
	"net/http"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine the gateway starts has an owner that waits for it.
func TestMain(m *testing.M) {
	code := m.Run()
	// The tests' shared HTTP client keeps idle keep-alive connections; they
	// are the client's, not the gateway's.
	http.DefaultClient.CloseIdleConnections()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString("goroutines leaked: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}
