package credentials_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine the proxy and its token fetches start ends with the
// test.
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
