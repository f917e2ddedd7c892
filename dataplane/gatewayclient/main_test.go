package gatewayclient_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The subscription and the shipper end every goroutine (and release every
// gateway connection) once their context ends and Close is called.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
