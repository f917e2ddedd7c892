package main

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

var (
	ordersV1File = filepath.Join("..", "..", "gateway", "testdata", "orders-v1.json")
	ordersV2File = filepath.Join("..", "..", "gateway", "testdata", "orders-v2.yaml")
)

// grpcDistribution is a stock grpc-go client of the gateway's
// DistributionService authenticated with token, as a proxy is.
func grpcDistribution(t *testing.T, gw *gatewaytest.Gateway, token string) (portcullisv1.DistributionServiceClient, context.Context) {
	t.Helper()
	conn, err := grpc.NewClient(strings.TrimPrefix(gw.URL, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token))
	t.Cleanup(cancel)
	return portcullisv1.NewDistributionServiceClient(conn), ctx
}

// simulatedProxy subscribes to sandbox's versions as proxy id would.
type simulatedProxy struct {
	t  *testing.T
	st portcullisv1.DistributionService_StreamPolicyClient
}

func startSimulatedProxy(t *testing.T, gw *gatewaytest.Gateway, token, sandbox, id string) *simulatedProxy {
	t.Helper()
	c, ctx := grpcDistribution(t, gw, token)
	st, err := c.StreamPolicy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hello := &portcullisv1.StreamPolicyRequest{Message: &portcullisv1.StreamPolicyRequest_Hello{
		Hello: &portcullisv1.ProxyHello{Sandbox: sandbox, ProxyId: id, Build: "cli-test"},
	}}
	if err := st.Send(hello); err != nil {
		t.Fatal(err)
	}
	return &simulatedProxy{t: t, st: st}
}

// next waits for the next pushed version.
func (p *simulatedProxy) next() *portcullisv1.SignedPolicy {
	p.t.Helper()
	for {
		res, err := p.st.Recv()
		if err != nil {
			p.t.Fatalf("receive: %v", err)
		}
		if sp := res.GetPolicy(); sp != nil {
			return sp
		}
	}
}

func (p *simulatedProxy) ack(sp *portcullisv1.SignedPolicy) {
	p.t.Helper()
	msg := &portcullisv1.StreamPolicyRequest{Message: &portcullisv1.StreamPolicyRequest_Ack{
		Ack: &portcullisv1.PolicyAck{Nonce: sp.GetNonce(), Version: sp.GetVersion(), Hash: sp.GetHash()},
	}}
	if err := p.st.Send(msg); err != nil {
		p.t.Fatal(err)
	}
}

func (p *simulatedProxy) nack(sp *portcullisv1.SignedPolicy, why string) {
	p.t.Helper()
	msg := &portcullisv1.StreamPolicyRequest{Message: &portcullisv1.StreamPolicyRequest_Nack{
		Nack: &portcullisv1.PolicyNack{Nonce: sp.GetNonce(), Version: sp.GetVersion(), Hash: sp.GetHash(), Error: why},
	}}
	if err := p.st.Send(msg); err != nil {
		p.t.Fatal(err)
	}
}

// waitProxiesJSON runs `proxies list -o json` until ok accepts the entry of
// proxy id, and returns that entry.
func waitProxiesJSON(t *testing.T, gw *gatewaytest.Gateway, id string, ok func(map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var last map[string]any
	for time.Now().Before(deadline) {
		list, _ := jsonOut(t, gw, gatewaytest.AdminToken, "proxies", "list")["proxies"].([]any)
		for _, p := range list {
			if m, _ := p.(map[string]any); m["proxy_id"] == id {
				last = m
				if ok(m) {
					return m
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("proxy %s never reached the expected status; last: %v", id, last)
	return nil
}

func TestProxiesList(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	admin := gatewaytest.AdminToken

	// No proxy yet: the header alone, and an empty list in JSON.
	stdout, stderr, code := cliAgainst(t, gw, admin, "proxies", "list")
	ok(t, code, stderr)
	if strings.TrimSpace(stdout) != "SANDBOX  PROXY  CONNECTED  APPLIED  LAST ACK  LAST NACK  LAG  DROPPED" {
		t.Errorf("proxies list with no proxy:\n%s", stdout)
	}
	if list, isList := jsonOut(t, gw, admin, "proxies", "list")["proxies"].([]any); !isList || len(list) != 0 {
		t.Errorf("proxies list -o json with no proxy: proxies = %v, want []", list)
	}

	created := jsonOut(t, gw, admin, "sandbox", "create", "orders", "-f", ordersV1File)
	sbToken := created["token"].(string)
	jsonOut(t, gw, admin, "sandbox", "create", "other")
	p := startSimulatedProxy(t, gw, sbToken, "orders", "p1")
	v1 := p.next()
	p.ack(v1)

	got := waitProxiesJSON(t, gw, "p1", func(m map[string]any) bool {
		return m["connected"] == true && m["applied_version"] == float64(1)
	})
	// The contract's fields are there, zero values included.
	hasKeys(t, got, "sandbox", "proxy_id", "connected", "applied_version", "applied_hash",
		"last_nack_version", "last_nack_error", "lag_ms", "current_version")
	if got["sandbox"] != "orders" || got["applied_hash"] != v1.GetHash() || got["last_nack_version"] != float64(0) || got["last_nack_error"] != "" {
		t.Errorf("status after ACK: %v", got)
	}

	stdout, stderr, code = cliAgainst(t, gw, admin, "proxies", "list")
	ok(t, code, stderr)
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 2 {
		t.Fatalf("proxies list: want the header and one proxy:\n%s", stdout)
	}
	if f := strings.Fields(lines[1]); len(f) < 8 || f[0] != "orders" || f[1] != "p1" || f[2] != "yes" || f[3] != "1" || f[5] != "-" || f[len(f)-1] != "0" {
		t.Errorf("proxies list row: %q", lines[1])
	}

	// A newer version the proxy refuses: behind, with the NACK's reason.
	jsonOut(t, gw, admin, "policy", "set", "orders", "-f", ordersV2File)
	v2 := p.next()
	p.nack(v2, "cannot compile:\x1b[31m a feature from the future that this build of the proxy does not know")
	waitProxiesJSON(t, gw, "p1", func(m map[string]any) bool { return m["last_nack_version"] == float64(2) })
	stdout, stderr, code = cliAgainst(t, gw, admin, "proxies", "list", "--sandbox", "orders")
	ok(t, code, stderr)
	if !strings.Contains(stdout, "1 (current 2)") || !strings.Contains(stdout, "2: cannot compile:") || !strings.Contains(stdout, "…") {
		t.Errorf("proxies list after a NACK: want the applied version behind the current one and the NACK cut short:\n%s", stdout)
	}
	if strings.Contains(stdout, "\x1b") {
		t.Errorf("the NACK's control characters reached the terminal:\n%q", stdout)
	}

	// --sandbox narrows the list.
	if list, _ := jsonOut(t, gw, admin, "proxies", "list", "--sandbox", "other")["proxies"].([]any); len(list) != 0 {
		t.Errorf("proxies list --sandbox other: %v", list)
	}

	// Operators read it; a sandbox token does not.
	op := jsonOut(t, gw, admin, "token", "create", "--role", "operator", "--name", "olive")["token"].(string)
	if _, stderr, code := cliAgainst(t, gw, op, "proxies", "list"); code != exitOK {
		t.Errorf("operator: exit %d: %s", code, stderr)
	}
	if _, _, code := cliAgainst(t, gw, sbToken, "proxies", "list"); code != exitNo {
		t.Errorf("sandbox token: exit %d, want 1", code)
	}
}

func TestSandboxCA(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	admin := gatewaytest.AdminToken
	sbToken := jsonOut(t, gw, admin, "sandbox", "create", "orders")["token"].(string)
	op := jsonOut(t, gw, admin, "token", "create", "--role", "operator", "--name", "olive")["token"].(string)

	first, stderr, code := cliAgainst(t, gw, admin, "sandbox", "ca", "orders")
	ok(t, code, stderr)
	block, rest := pem.Decode([]byte(first))
	if block == nil || block.Type != "CERTIFICATE" || len(bytes.TrimSpace(rest)) != 0 {
		t.Fatalf("sandbox ca: stdout is not one PEM certificate:\n%s", first)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if !cert.IsCA || !cert.BasicConstraintsValid || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Errorf("the sandbox's certificate is not a CA: IsCA %v, key usage %v", cert.IsCA, cert.KeyUsage)
	}

	// One CA per sandbox: the same on every call, for operators too.
	again, stderr, code := cliAgainst(t, gw, op, "sandbox", "ca", "orders")
	ok(t, code, stderr)
	if again != first {
		t.Errorf("a second call printed another certificate")
	}
	js := jsonOut(t, gw, admin, "sandbox", "ca", "orders")
	if got, _ := js["cert_pem"].(string); got != first {
		t.Errorf("-o json cert_pem %q is not the PEM printed", got)
	}

	// A sandbox token may not read it; an unknown sandbox is not found.
	if stdout, _, code := cliAgainst(t, gw, sbToken, "sandbox", "ca", "orders"); code != exitNo || stdout != "" {
		t.Errorf("sandbox token: exit %d, stdout %q; want 1 and nothing", code, stdout)
	}
	if _, stderr, code := cliAgainst(t, gw, admin, "sandbox", "ca", "nope"); code != exitNo || !strings.Contains(stderr, "not found") {
		t.Errorf("unknown sandbox: exit %d, stderr %q; want 1, not found", code, stderr)
	}
	if _, _, code := cliAgainst(t, gw, admin, "sandbox", "ca"); code != exitInvalid {
		t.Errorf("no NAME: exit %d, want 2", code)
	}
}
