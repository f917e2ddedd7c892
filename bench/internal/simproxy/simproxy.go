// Package simproxy is the benchmarks' simulated proxy: a real
// portcullis.v1.DistributionService/StreamPolicy stream over stock grpc-go,
// dialled the way dataplane/gatewayclient.Subscriber dials (keepalive 10 s + 5 s,
// the sandbox's bearer token on every RPC), that ACKs every version as soon
// as it has read it. It neither verifies the signature nor compiles the
// policy (real proxies do, on their own machines), so what a benchmark
// times with it is the delivery, not the proxy's work. It can also ship
// decision records (ShipDecisions), as a proxy does for the calls it
// decided. pushload and sentryload share it.
package simproxy

import (
	"context"
	"errors"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portcullis-dev/portcullis/gateway"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// bearer sends the sandbox token with every RPC, as the proxy's does.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return false }

// Dial returns a plaintext client connection to the gateway at addr
// (host:port) that sends token with every RPC.
func Dial(addr, token string) (*grpc.ClientConn, error) {
	return grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(bearer(token)),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: true}),
	)
}

// Stream is one simulated proxy's policy stream.
type Stream struct {
	mu sync.Mutex // grpc-go streams allow one sender at a time
	st portcullisv1.DistributionService_StreamPolicyClient
}

// Open opens a policy stream on conn and says hello as proxy id of
// sandbox. The stream ends with ctx.
func Open(ctx context.Context, conn *grpc.ClientConn, sandbox, id, build string) (*Stream, error) {
	return OpenHeld(ctx, conn, sandbox, id, build, 0)
}

// OpenHeld is Open for a proxy that already holds version held (it says
// so in its hello, as a reconnecting proxy does).
func OpenHeld(ctx context.Context, conn *grpc.ClientConn, sandbox, id, build string, held uint32) (*Stream, error) {
	st, err := portcullisv1.NewDistributionServiceClient(conn).StreamPolicy(ctx)
	if err != nil {
		return nil, err
	}
	s := &Stream{st: st}
	hello := &portcullisv1.StreamPolicyRequest{Message: &portcullisv1.StreamPolicyRequest_Hello{Hello: &portcullisv1.ProxyHello{
		Sandbox: sandbox, ProxyId: id, Build: build, HeldVersion: held}}}
	if err := s.send(hello); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Stream) send(m *portcullisv1.StreamPolicyRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.Send(m)
}

// ErrGoaway is Next's error when the gateway asked the proxy to go away
// (it is shutting down): a proxy reconnects, to another replica if any.
var ErrGoaway = errors.New("the gateway asked the proxy to go away")

// Next reads until the next pushed version, ACKs it, and returns it with
// when it was read and when its ACK was handed to grpc-go.
func (s *Stream) Next() (res *portcullisv1.StreamPolicyResponse, arrived, acked time.Time, err error) {
	for {
		res, err = s.st.Recv()
		if err != nil {
			return nil, time.Time{}, time.Time{}, err
		}
		if res.GetGoaway() != nil {
			return nil, time.Time{}, time.Time{}, ErrGoaway
		}
		sp := res.GetPolicy()
		if sp == nil {
			continue // a heartbeat's answer
		}
		arrived = time.Now()
		err = s.send(&portcullisv1.StreamPolicyRequest{Message: &portcullisv1.StreamPolicyRequest_Ack{Ack: &portcullisv1.PolicyAck{
			Nonce: sp.GetNonce(), Version: sp.GetVersion(), Hash: sp.GetHash()}}})
		return res, arrived, time.Now(), err
	}
}

// Heartbeat sends one heartbeat.
func (s *Stream) Heartbeat() error {
	return s.send(&portcullisv1.StreamPolicyRequest{Message: &portcullisv1.StreamPolicyRequest_Heartbeat{Heartbeat: &portcullisv1.Heartbeat{SentAt: timestamppb.Now()}}})
}

// Heartbeats sends each stream a heartbeat every
// gateway.HeartbeatInterval, spread evenly over the interval, as proxies
// do (so no stream hits the gateway's idle timeout), until stop is
// closed; then it closes done. A failed stream reports itself through
// Next.
func Heartbeats(streams []*Stream, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	if len(streams) == 0 {
		<-stop
		return
	}
	const tick = 10 * time.Millisecond
	t := time.NewTicker(tick)
	defer t.Stop()
	perTick := float64(len(streams)) * float64(tick) / float64(gateway.HeartbeatInterval)
	owed, next := 0.0, 0
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		for owed += perTick; owed >= 1; owed-- {
			hb := &portcullisv1.StreamPolicyRequest{Message: &portcullisv1.StreamPolicyRequest_Heartbeat{Heartbeat: &portcullisv1.Heartbeat{SentAt: timestamppb.Now()}}}
			streams[next].send(hb)
			next = (next + 1) % len(streams)
		}
	}
}

// ShipDecisions ships records over conn as one ShipDecisions message of
// proxy id, as a proxy ships its decision records (the gateway stores
// them as the sandbox of conn's token), and returns how many the gateway
// stored.
func ShipDecisions(ctx context.Context, conn *grpc.ClientConn, id string, records ...*portcullisv1.DecisionRecord) (uint64, error) {
	st, err := portcullisv1.NewDistributionServiceClient(conn).ShipDecisions(ctx)
	if err != nil {
		return 0, err
	}
	if err := st.Send(&portcullisv1.ShipDecisionsRequest{ProxyId: id, Records: records}); err != nil {
		// The server's status, if it ended the stream, comes with CloseAndRecv.
		if _, rerr := st.CloseAndRecv(); rerr != nil {
			return 0, rerr
		}
		return 0, err
	}
	res, err := st.CloseAndRecv()
	if err != nil {
		return 0, err
	}
	return res.GetStored(), nil
}
