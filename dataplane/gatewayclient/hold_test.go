package gatewayclient_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portcullis-dev/portcullis/dataplane/gatewayclient"
	"github.com/portcullis-dev/portcullis/dataplane/hold"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// holdServer is a DistributionService that serves HoldCall only: it
// files each call as id 5, sends a heartbeat, then decides it approved
// (a key "busy" is refused ResourceExhausted), and hands the test what it
// read.
type holdServer struct {
	portcullisv1.UnimplementedDistributionServiceServer
	calls chan *portcullisv1.CallToHold
	ended chan string
}

func (s *holdServer) HoldCall(st grpc.BidiStreamingServer[portcullisv1.HoldCallRequest, portcullisv1.HoldCallResponse]) error {
	m, err := st.Recv()
	if err != nil {
		return err
	}
	c := m.GetCall()
	s.calls <- c
	switch c.GetKey() {
	case "busy":
		return status.Error(codes.ResourceExhausted, "the sandbox holds 16 calls")
	case "invalid":
		return status.Error(codes.InvalidArgument, "call.arguments_json: is 70000 bytes, over 65536")
	}
	for _, r := range []*portcullisv1.HoldCallResponse{
		{Message: &portcullisv1.HoldCallResponse_Filed{Filed: &portcullisv1.CallFiled{Id: 5, Deadline: timestamppb.New(time.Date(2026, 12, 5, 13, 0, 0, 0, time.UTC))}}},
		{Message: &portcullisv1.HoldCallResponse_Heartbeat{Heartbeat: &portcullisv1.CallHeartbeat{SentAt: timestamppb.Now()}}},
		{Message: &portcullisv1.HoldCallResponse_Decision{Decision: &portcullisv1.CallDecision{Id: 5, Status: "approved", DecidedBy: "alice", ArgumentsDigest: c.GetArgumentsDigest(), PolicyVersion: c.GetPolicyVersion()}}},
	} {
		if err := st.Send(r); err != nil {
			return err
		}
	}
	m, err = st.Recv()
	if err != nil {
		return nil
	}
	s.ended <- m.GetEnded().GetReason()
	return nil
}

func TestHoldFiler(t *testing.T) {
	srv := &holdServer{calls: make(chan *portcullisv1.CallToHold, 3), ended: make(chan string, 1)}
	gs := grpc.NewServer()
	portcullisv1.RegisterDistributionServiceServer(gs, srv)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(ln)
	defer gs.Stop()
	sub, err := gatewayclient.NewSubscriber(gatewayclient.SubscribeConfig{
		Gateway: "http://" + ln.Addr().String(), Sandbox: "orders", ProxyID: "px-1", DataDir: t.TempDir(),
		Token: func() (string, error) { return "tok", nil },
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	filer := sub.HoldFiler()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()

	c := &hold.Call{Key: "k1", Tool: "refund_order", ArgumentsJSON: `{"a":1}`, ArgumentsDigest: "sha256:aa", PolicyVersion: 7, Port: 443, Timeout: 2 * time.Minute}
	st, err := filer.Open(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	got := <-srv.calls
	if got.GetSandbox() != "orders" || got.GetProxyId() != "px-1" || got.GetInstance() == "" || got.GetInstance() != sub.Instance() ||
		got.GetKey() != "k1" || got.GetArgumentsJson() != `{"a":1}` || got.GetPolicyVersion() != 7 || got.GetPort() != 443 || got.GetTimeout().AsDuration() != 2*time.Minute {
		t.Errorf("the gateway read %v", got)
	}
	m, err := st.Recv()
	if err != nil || m.Filed == nil || m.Filed.ID != 5 || !m.Filed.Deadline.Equal(time.Date(2026, 12, 5, 13, 0, 0, 0, time.UTC)) {
		t.Fatalf("first message %+v, %v; want filed 5", m, err)
	}
	if m, err = st.Recv(); err != nil || m.Filed != nil || m.Decision != nil {
		t.Fatalf("second message %+v, %v; want a heartbeat", m, err)
	}
	m, err = st.Recv()
	if err != nil || m.Decision == nil || *m.Decision != (hold.Decision{ID: 5, Status: "approved", DecidedBy: "alice", ArgumentsDigest: "sha256:aa", PolicyVersion: 7}) {
		t.Fatalf("third message %+v, %v; want the decision", m, err)
	}
	if err := st.End("review_stale: gone"); err != nil {
		t.Fatal(err)
	}
	if why := <-srv.ended; why != "review_stale: gone" {
		t.Errorf("the gateway read ended %q", why)
	}

	busy := &hold.Call{Key: "busy"}
	if st, err = filer.Open(ctx, busy); err == nil {
		_, err = st.Recv()
	}
	if !errors.Is(err, hold.ErrBusy) {
		t.Errorf("ResourceExhausted: %v, want hold.ErrBusy", err)
	}
	if st, err = filer.Open(ctx, &hold.Call{Key: "invalid"}); err == nil {
		_, err = st.Recv()
	}
	if !errors.Is(err, hold.ErrRefused) || !strings.Contains(err.Error(), "arguments_json") {
		t.Errorf("InvalidArgument: %v, want hold.ErrRefused saying why", err)
	}
}
