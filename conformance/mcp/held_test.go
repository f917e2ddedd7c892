package mcp

import (
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connecthttp"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/portcullis-dev/portcullis/demo"
	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
)

// A held call as the TypeScript SDK's client makes it: through the real
// proxy (the binary, following a real gateway), the client asks for
// progress, so the proxy answers with an event stream and reports the
// wait as notifications/progress; a person's approval through CallService
// completes the client's own request with the server's answer, and a
// denial ends it with the error that names the review. The SDK's request
// timeout (reset on progress) and its event-stream reader are the ones
// agents run.
func TestTypeScriptClientHeldCall(t *testing.T) {
	tl := setup(t)
	gw := gatewaytest.Start(t, "sqlite")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	orders := &http.Server{Handler: demo.OrdersHandler(&sdk.StreamableHTTPOptions{DisableLocalhostProtection: true})}
	go orders.Serve(ln)
	t.Cleanup(func() { orders.Close() })

	ctx := context.Background()
	api := connect.NewClient(connecthttp.NewTransport(http.DefaultClient, gw.URL), gatewaytest.Bearer(gatewaytest.AdminToken))
	policy, err := os.ReadFile(writePolicy(t, "held-policy.yaml", "ORDERS_PORT", strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)))
	if err != nil {
		t.Fatal(err)
	}
	created, err := portcullisv1connect.NewSandboxServiceClient(api).CreateSandbox(ctx, &portcullisv1.CreateSandboxRequest{Name: "held", Policy: string(policy)})
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(created.GetToken()), 0o600); err != nil {
		t.Fatal(err)
	}
	proxy := start(t, "portcullis proxy", exec.Command(tl.bin, "proxy", "--gateway", gw.URL, "--sandbox", "held",
		"--token-file", tokenFile, "--dev-allow-loopback", "--listen", "127.0.0.1:0", "--data-dir", t.TempDir()))
	addr := proxy.await(t, regexp.MustCompile(`^Portcullis proxy listening on (\S+)`))
	calls := portcullisv1connect.NewCallServiceClient(api)
	dir := workDir(t, tl)
	server := "http://" + ln.Addr().String() + "/mcp"

	for _, c := range []struct {
		approve bool
		order   string
		want    *regexp.Regexp
	}{
		{true, "A-1042", regexp.MustCompile(`^result (.*refunded.*)`)},
		{false, "A-1043", regexp.MustCompile(`^error (.*review_denied.*)`)},
	} {
		for _, rt := range routes(addr)[1:] {
			t.Run(rt.name+"/"+c.order, func(t *testing.T) {
				cmd := exec.Command(tl.node, "--require", "./proxy.cjs", "held.mjs", server, "refund_order", `{"order_id":"`+c.order+`"}`)
				cmd.Dir, cmd.Env = dir, rt.env()
				client := start(t, "held.mjs", cmd)
				client.await(t, regexp.MustCompile(`^(connected)$`))
				held := waitHeld(t, calls, c.order)
				// The wait is reported before anyone decides.
				client.await(t, regexp.MustCompile(`^progress (.*)`))
				reason := "checked with the customer"
				if c.approve {
					_, err = calls.ApproveCall(ctx, &portcullisv1.ApproveCallRequest{Id: held.GetId(), Reason: reason, ArgumentsDigest: held.GetArgumentsDigest()})
				} else {
					_, err = calls.DenyCall(ctx, &portcullisv1.DenyCallRequest{Id: held.GetId(), Reason: reason})
				}
				if err != nil {
					t.Fatal(err)
				}
				client.await(t, c.want)
			})
		}
	}
}

// waitHeld waits until the gateway lists the held call whose arguments
// name order, and returns it.
func waitHeld(t *testing.T, calls portcullisv1connect.CallServiceClient, order string) *portcullisv1.HeldCall {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		list, err := calls.ListCalls(context.Background(), &portcullisv1.ListCallsRequest{Sandbox: "held", Status: "held"})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range list.GetCalls() {
			if strings.Contains(c.GetArgumentsJson(), `"`+order+`"`) {
				return c
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no held call for %s after 30s", order)
	return nil
}
