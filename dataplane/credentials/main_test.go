package credentials_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine the proxy and its token fetches start ends with the
// test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
