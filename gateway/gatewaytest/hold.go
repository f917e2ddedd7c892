package gatewaytest

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/portcullis-dev/portcullis/policy"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// Held is a call filed as a proxy files one (DistributionService.HoldCall
// over stock grpc-go): the id and deadline the gateway filed it with, and
// the stream the decision comes back on.
type Held struct {
	ID       uint64
	Deadline time.Time
	Stream   grpc.BidiStreamingClient[portcullisv1.HoldCallRequest, portcullisv1.HoldCallResponse]
}

// ToolCall is a tools/call a review rule holds, as a proxy of sandbox
// files it: /usr/bin/python3 calling tool at orders.example.com:443/mcp,
// arguments exactly as the agent sent them and their digest
// (policy.ArgumentsDigest), a key of its own, a two-minute timeout. The
// policy version, entry and rule are the caller's to set.
func ToolCall(t testing.TB, sandbox, tool, arguments string) *portcullisv1.CallToHold {
	t.Helper()
	digest, err := policy.ArgumentsDigest([]byte(arguments))
	if err != nil {
		t.Fatalf("digest of %s: %v", arguments, err)
	}
	return &portcullisv1.CallToHold{
		Sandbox: sandbox, ProxyId: "proxy-" + sandbox, Instance: "run-1", Key: strings.ReplaceAll(t.Name(), "/", "-") + "-" + tool + "-" + digest[7:19],
		Binary: "/usr/bin/python3", Host: "orders.example.com", Port: 443, Method: "POST", Path: "/mcp", McpMethod: "tools/call", Tool: tool,
		ArgumentsJson: arguments, ArgumentsDigest: digest, Timeout: durationpb.New(2 * time.Minute),
	}
}

// HoldCall files call with the sandbox token as its proxy would and waits
// until the gateway says it is filed. The stream ends with the test.
func (g *Gateway) HoldCall(t testing.TB, token string, call *portcullisv1.CallToHold) *Held {
	t.Helper()
	conn, err := grpc.NewClient(strings.TrimPrefix(g.URL, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); conn.Close() })
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	stream, err := portcullisv1.NewDistributionServiceClient(conn).HoldCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&portcullisv1.HoldCallRequest{Message: &portcullisv1.HoldCallRequest_Call{Call: call}}); err != nil {
		t.Fatal(err)
	}
	for {
		m, err := stream.Recv()
		if err != nil {
			t.Fatalf("hold %s: %v", call.GetTool(), err)
		}
		if f := m.GetFiled(); f != nil {
			return &Held{ID: f.GetId(), Deadline: f.GetDeadline().AsTime(), Stream: stream}
		}
	}
}

// Decision waits for the decision on the call's stream (heartbeats
// skipped), as its proxy does, for at most 30 seconds.
func (h *Held) Decision(t testing.TB) *portcullisv1.CallDecision {
	t.Helper()
	type answer struct {
		d   *portcullisv1.CallDecision
		err error
	}
	got := make(chan answer, 1)
	go func() {
		for {
			m, err := h.Stream.Recv()
			if err != nil || m.GetDecision() != nil {
				got <- answer{m.GetDecision(), err}
				return
			}
		}
	}()
	select {
	case a := <-got:
		if a.err != nil {
			t.Fatalf("call %d: no decision: %v", h.ID, a.err)
		}
		return a.d
	case <-time.After(30 * time.Second):
		t.Fatalf("call %d: no decision within 30 s", h.ID)
		return nil
	}
}
