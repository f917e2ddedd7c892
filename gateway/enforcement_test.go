package gateway_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect/v2"

	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
)

// testProxy is one proxy's policy stream, driven by hand: it ACKs or
// NACKs what it receives when the test says so.
type testProxy struct {
	id string
	st portcullisv1.DistributionService_StreamPolicyClient
}

func connectProxy(t *testing.T, gw *gatewaytest.Gateway, token, sandbox, id string) *testProxy {
	t.Helper()
	p := &testProxy{id: id, st: policyStream(t, gw, token)}
	if err := p.st.Send(hello(sandbox, id)); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *testProxy) ack(t *testing.T, sp *portcullisv1.SignedPolicy) {
	t.Helper()
	if err := p.st.Send(ack(sp)); err != nil {
		t.Fatal(err)
	}
}

func (p *testProxy) nack(t *testing.T, sp *portcullisv1.SignedPolicy, why string) {
	t.Helper()
	msg := &portcullisv1.StreamPolicyRequest{Message: &portcullisv1.StreamPolicyRequest_Nack{Nack: &portcullisv1.PolicyNack{Nonce: sp.Nonce, Version: sp.Version, Hash: sp.Hash, Error: why}}}
	if err := p.st.Send(msg); err != nil {
		t.Fatal(err)
	}
}

// enforcementWatch reads a WatchEnforcement stream message by message.
type enforcementWatch struct {
	st portcullisv1connect.ProxyServiceWatchEnforcementClientStream
}

func watchEnforcement(t *testing.T, c portcullisv1connect.ProxyServiceClient, sandbox string, version uint32) enforcementWatch {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	st, err := c.WatchEnforcement(ctx, &portcullisv1.WatchEnforcementRequest{Sandbox: sandbox, Version: version})
	if err != nil {
		t.Fatal(err)
	}
	return enforcementWatch{st}
}

// next is the stream's next message; it fails the test if the stream ended.
func (w enforcementWatch) next(t *testing.T) *portcullisv1.Enforcement {
	t.Helper()
	e, err := w.st.Receive()
	if err != nil {
		t.Fatalf("WatchEnforcement ended early: %v", err)
	}
	return e
}

// ended checks that the stream ended cleanly after its last message.
func (w enforcementWatch) ended(t *testing.T) {
	t.Helper()
	if e, err := w.st.Receive(); !errors.Is(err, io.EOF) {
		t.Fatalf("WatchEnforcement went on after settling: %v, %v", e, err)
	}
}

// counts is an Enforcement's counters as "acked/nacked/pending/total".
func counts(e *portcullisv1.Enforcement) [4]uint32 {
	return [4]uint32{e.GetAcked(), e.GetNacked(), e.GetPending(), e.GetTotal()}
}

func proxyState(e *portcullisv1.Enforcement, id string) *portcullisv1.ProxyEnforcement {
	for _, p := range e.GetProxies() {
		if p.GetProxyId() == id {
			return p
		}
	}
	return nil
}

// TestWatchEnforcement follows committed versions to two proxies: every
// ACK and NACK is a message, a NACK carries the proxy's error, the stream
// ends once no proxy is pending, and a proxy that goes is no longer
// counted.
func TestWatchEnforcement(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	c := newConnectAPI(t, gw.URL, gatewaytest.AdminToken)
	proxies := newProxyClient(gw.URL, gatewaytest.AdminToken)
	created, err := c.sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: "agent-1", Policy: pushPolicy})
	if err != nil {
		t.Fatal(err)
	}

	// No proxy connected yet: total 0, at once, and the stream ends.
	w := watchEnforcement(t, proxies, "agent-1", 1)
	if e := w.next(t); counts(e) != [4]uint32{0, 0, 0, 0} || e.GetVersion() != 1 || e.GetSandbox() != "agent-1" {
		t.Fatalf("with no proxy: %v", e)
	}
	w.ended(t)

	p1 := connectProxy(t, gw, created.Token, "agent-1", "p1")
	p2 := connectProxy(t, gw, created.Token, "agent-1", "p2")
	p1.ack(t, recvPolicy(t, p1.st))
	p2.ack(t, recvPolicy(t, p2.st))
	waitProxy(t, c, gw, "agent-1", "p2", func(p *portcullisv1.ProxyStatus) bool { return p.AppliedVersion == 1 })
	waitProxy(t, c, gw, "agent-1", "p1", func(p *portcullisv1.ProxyStatus) bool { return p.AppliedVersion == 1 })
	w = watchEnforcement(t, proxies, "agent-1", 1)
	if e := w.next(t); counts(e) != [4]uint32{2, 0, 0, 2} {
		t.Fatalf("version 1 after both ACKs: %v", e)
	}
	w.ended(t)

	// Version 2: both pending, then one ACK, then the other's NACK.
	if _, err := c.policy.SetPolicy(t.Context(), &portcullisv1.SetPolicyRequest{Sandbox: "agent-1", Document: strings.Replace(pushPolicy, "read-only", "read-write", 1)}); err != nil {
		t.Fatal(err)
	}
	w = watchEnforcement(t, proxies, "agent-1", 2)
	if e := w.next(t); counts(e) != [4]uint32{0, 0, 2, 2} || proxyState(e, "p1").GetState() != "pending" || proxyState(e, "p1").GetAppliedVersion() != 1 {
		t.Fatalf("version 2 before any answer: %v", e)
	}
	v2p1, v2p2 := recvPolicy(t, p1.st), recvPolicy(t, p2.st)
	p1.ack(t, v2p1)
	e := w.next(t)
	if counts(e) != [4]uint32{1, 0, 1, 2} || proxyState(e, "p1").GetState() != "acked" || proxyState(e, "p2").GetState() != "pending" {
		t.Fatalf("after p1's ACK: %v", e)
	}
	p2.nack(t, v2p2, "cannot compile: too new")
	e = w.next(t)
	if counts(e) != [4]uint32{1, 1, 0, 2} {
		t.Fatalf("after p2's NACK: %v", e)
	}
	if got := proxyState(e, "p2"); got.GetState() != "nacked" || got.GetError() != "cannot compile: too new" || got.GetAppliedVersion() != 1 {
		t.Fatalf("p2 after its NACK: %v", got)
	}
	if ids := []string{e.GetProxies()[0].GetProxyId(), e.GetProxies()[1].GetProxyId()}; ids[0] != "p1" || ids[1] != "p2" {
		t.Fatalf("proxies not by id: %v", ids)
	}
	w.ended(t)

	// Version 3: p2 goes without answering; p1's ACK settles it, total 1.
	if _, err := c.policy.SetPolicy(t.Context(), &portcullisv1.SetPolicyRequest{Sandbox: "agent-1", Document: strings.Replace(pushPolicy, "443", "8443", 1)}); err != nil {
		t.Fatal(err)
	}
	w = watchEnforcement(t, proxies, "agent-1", 3)
	if e := w.next(t); counts(e) != [4]uint32{0, 0, 2, 2} {
		t.Fatalf("version 3 before any answer: %v", e)
	}
	recvPolicy(t, p2.st)
	if err := p2.st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if e := w.next(t); counts(e) != [4]uint32{0, 0, 1, 1} || proxyState(e, "p2") != nil {
		t.Fatalf("after p2 went: %v", e)
	}
	p1.ack(t, recvPolicy(t, p1.st))
	if e := w.next(t); counts(e) != [4]uint32{1, 0, 0, 1} {
		t.Fatalf("after p1's ACK of version 3: %v", e)
	}
	w.ended(t)

	// An older version counts a proxy that applied a later one as ACKed.
	w = watchEnforcement(t, proxies, "agent-1", 2)
	if e := w.next(t); counts(e) != [4]uint32{1, 0, 0, 1} || proxyState(e, "p1").GetAppliedVersion() != 3 {
		t.Fatalf("version 2 once p1 applied 3: %v", e)
	}
	w.ended(t)

	// The client's deadline passing with a proxy pending ends the stream
	// with DeadlineExceeded, never as if it had settled.
	if _, err := c.policy.SetPolicy(t.Context(), &portcullisv1.SetPolicyRequest{Sandbox: "agent-1", Document: strings.Replace(pushPolicy, "443", "9443", 1)}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	st, err := proxies.WatchEnforcement(ctx, &portcullisv1.WatchEnforcementRequest{Sandbox: "agent-1", Version: 4})
	if err != nil {
		t.Fatal(err)
	}
	if e, err := st.Receive(); err != nil || counts(e) != [4]uint32{0, 0, 1, 1} {
		t.Fatalf("version 4 before p1 answers: %v, %v", e, err)
	}
	if e, err := st.Receive(); connect.CodeOf(err) != connect.CodeDeadlineExceeded {
		t.Fatalf("past the deadline with p1 pending: %v, %v; want DeadlineExceeded", e, err)
	}
}

// TestWatchEnforcementRefused: a request naming no committed version, or
// an unknown sandbox, is refused before anything is streamed.
func TestWatchEnforcementRefused(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	c := newConnectAPI(t, gw.URL, gatewaytest.AdminToken)
	if _, err := c.sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: "agent-1", Policy: pushPolicy}); err != nil {
		t.Fatal(err)
	}
	proxies := newProxyClient(gw.URL, gatewaytest.AdminToken)
	for _, tc := range []struct {
		sandbox string
		version uint32
		code    connect.Code
		says    string
	}{
		{"agent-1", 0, connect.CodeInvalidArgument, "version"},
		{"agent-1", 2, connect.CodeNotFound, "no version 2"},
		{"nobody", 1, connect.CodeNotFound, `"nobody" not found`},
		{"", 1, connect.CodeInvalidArgument, "sandbox"},
	} {
		st, err := proxies.WatchEnforcement(t.Context(), &portcullisv1.WatchEnforcementRequest{Sandbox: tc.sandbox, Version: tc.version})
		if err == nil {
			var e *portcullisv1.Enforcement
			e, err = st.Receive()
			if err == nil {
				t.Errorf("%q v%d: streamed %v, want %v", tc.sandbox, tc.version, e, tc.code)
				continue
			}
		}
		if connect.CodeOf(err) != tc.code || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%q v%d: %v, want %v saying %q", tc.sandbox, tc.version, err, tc.code, tc.says)
		}
	}
}

// TestWatchProposalEnforcement: the sandbox following its proposal sees
// it applied with its enforcement, then again once its proxy ACKed.
func TestWatchProposalEnforcement(t *testing.T) {
	e := startAdvisor(t, "sqlite")
	px := connectProxy(t, e.gw, e.token, "support", "p1")
	px.ack(t, recvPolicy(t, px.st))
	waitProxy(t, e.admin, e.gw, "support", "p1", func(p *portcullisv1.ProxyStatus) bool { return p.AppliedVersion == 1 })

	p := e.mustSubmit(t, trackShipment)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	st, err := e.advisor.WatchProposal(ctx, &portcullisv1.WatchProposalRequest{Id: p.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := st.Receive(); err != nil || m.GetStatus() != "pending" || m.GetEnforcement() != nil {
		t.Fatalf("first message: %v %v", m, err)
	}
	if _, err := approve(t, e.operator(t, "olive"), p); err != nil {
		t.Fatal(err)
	}
	m, err := st.Receive()
	if err != nil || m.GetStatus() != "applied" || m.GetAppliedVersion() != 2 {
		t.Fatalf("after approval: %v %v", m, err)
	}
	// The proxy ACKs only when this test says so: pending until then.
	if en := m.GetEnforcement(); en.GetVersion() != 2 || counts(en) != [4]uint32{0, 0, 1, 1} {
		t.Fatalf("applied without its enforcement: %v", en)
	}
	px.ack(t, recvPolicy(t, px.st))
	if m, err = st.Receive(); err != nil || counts(m.GetEnforcement()) != [4]uint32{1, 0, 0, 1} || m.GetStatus() != "applied" {
		t.Fatalf("after the ACK: %v %v", m, err)
	}
	if m, err := st.Receive(); !errors.Is(err, io.EOF) {
		t.Fatalf("stream went on after enforcement settled: %v %v", m, err)
	}
}
