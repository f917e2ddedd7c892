package gateway

import (
	"context"
	"errors"
	"math"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portcullis-dev/portcullis/gateway/distribution"
	"github.com/portcullis-dev/portcullis/gateway/transport"
	"github.com/portcullis-dev/portcullis/internal/version"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
	"github.com/portcullis-dev/portcullis/store"
)

// The proxy-facing API: DistributionService on Connect and on grpc-go,
// handed to distribution after authorization, and ProxyService, the
// proxies' stored statuses.

// HeartbeatInterval is how often a proxy sends a heartbeat on its policy
// stream (and the gateway answers it).
const HeartbeatInterval = distribution.HeartbeatInterval

// grpcRoute says which connections go to the grpc-go server: gRPC calls
// to DistributionService as the first request (see transport.GRPCRoute).
var grpcRoute = transport.GRPCRoute(portcullisv1connect.DistributionServiceStreamPolicyProcedure, portcullisv1connect.DistributionServiceShipDecisionsProcedure,
	portcullisv1connect.DistributionServiceHoldCallProcedure)

type distributionService struct{ *Server }

// caller is the stream's proxy as distribution sees it.
func (s *Server) caller(ctx context.Context) distribution.Caller {
	p := mustPrincipal(ctx)
	return distribution.Caller{Sandbox: p.Sandbox, Token: p.tokenHash, Auth: reauthenticator{s}}
}

// reauthenticator re-checks the tokens of long streams.
type reauthenticator struct{ s *Server }

// Reauthenticate checks that the stream's token (its hash) is still live.
func (r reauthenticator) Reauthenticate(ctx context.Context, tokenHash string) error {
	s := r.s
	tok, err := s.store.TokenByHash(ctx, tokenHash)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		// The store is unreachable: keep the stream, try again later.
		s.log.WarnContext(ctx, "could not re-check a stream's token", "err", err)
		return nil
	}
	if err != nil || tok.RevokedAt != nil {
		return errRevokedToken
	}
	if tok.Expired(s.cfg.Now()) {
		return expiredToken(tok)
	}
	return nil
}

// StreamPolicy serves one proxy's push stream on Connect.
func (s distributionService) StreamPolicy(ctx context.Context, stream portcullisv1connect.DistributionServiceStreamPolicyServerStream) error {
	return s.dist.StreamPolicy(ctx, s.caller(ctx), stream)
}

// ShipDecisions stores a proxy's decision records on Connect.
func (s distributionService) ShipDecisions(ctx context.Context, stream portcullisv1connect.DistributionServiceShipDecisionsServerStream) (*portcullisv1.ShipDecisionsResponse, error) {
	return s.dist.ShipDecisions(ctx, s.caller(ctx), stream.Receive)
}

// HoldCall files one held call and waits for its decision on Connect.
func (s distributionService) HoldCall(ctx context.Context, stream portcullisv1connect.DistributionServiceHoldCallServerStream) error {
	return s.dist.HoldCall(ctx, s.caller(ctx), stream)
}

// grpcDistribution serves DistributionService on grpc-go with the
// handlers Connect uses.
type grpcDistribution struct {
	portcullisv1.UnimplementedDistributionServiceServer
	s *Server
}

func (g grpcDistribution) StreamPolicy(st grpc.BidiStreamingServer[portcullisv1.StreamPolicyRequest, portcullisv1.StreamPolicyResponse]) error {
	return g.s.dist.StreamPolicy(st.Context(), g.s.caller(st.Context()), grpcPolicyConn{st})
}

func (g grpcDistribution) ShipDecisions(st grpc.ClientStreamingServer[portcullisv1.ShipDecisionsRequest, portcullisv1.ShipDecisionsResponse]) error {
	res, err := g.s.dist.ShipDecisions(st.Context(), g.s.caller(st.Context()), st.Recv)
	if err != nil {
		return err
	}
	return st.SendAndClose(res)
}

func (g grpcDistribution) HoldCall(st grpc.BidiStreamingServer[portcullisv1.HoldCallRequest, portcullisv1.HoldCallResponse]) error {
	return g.s.dist.HoldCall(st.Context(), g.s.caller(st.Context()), grpcCallConn{st})
}

// grpcCallConn is a grpc-go HoldCall stream as a distribution.CallConn.
type grpcCallConn struct {
	st grpc.BidiStreamingServer[portcullisv1.HoldCallRequest, portcullisv1.HoldCallResponse]
}

func (c grpcCallConn) Receive() (*portcullisv1.HoldCallRequest, error) { return c.st.Recv() }

func (c grpcCallConn) Send(m *portcullisv1.HoldCallResponse) error { return c.st.Send(m) }

// grpcPolicyConn is a grpc-go policy stream as a distribution.PolicyConn.
type grpcPolicyConn struct {
	st grpc.BidiStreamingServer[portcullisv1.StreamPolicyRequest, portcullisv1.StreamPolicyResponse]
}

func (c grpcPolicyConn) Receive() (*portcullisv1.StreamPolicyRequest, error) { return c.st.Recv() }

func (c grpcPolicyConn) Send(m *portcullisv1.StreamPolicyResponse) error { return c.st.Send(m) }

type proxyService struct{ *Server }

func (s proxyService) ListProxies(ctx context.Context, req *portcullisv1.ListProxiesRequest) (*portcullisv1.ListProxiesResponse, error) {
	if req.GetSandbox() != "" {
		if _, err := s.store.GetSandbox(ctx, req.GetSandbox()); err != nil {
			return nil, missing(err, "sandbox %q not found", req.GetSandbox())
		}
	}
	list, err := s.store.ListProxyStatuses(ctx, req.GetSandbox())
	if err != nil {
		return nil, err
	}
	current := make(map[string]int64)
	sandboxes, err := s.store.ListSandboxes(ctx)
	if err != nil {
		return nil, err
	}
	for _, sb := range sandboxes {
		current[sb.Name] = sb.CurrentVersion
	}
	now := s.cfg.Now()
	res := &portcullisv1.ListProxiesResponse{Proxies: make([]*portcullisv1.ProxyStatus, 0, len(list)), GatewayBuild: version.Get().String()}
	for _, p := range list {
		res.Proxies = append(res.Proxies, &portcullisv1.ProxyStatus{
			Sandbox:               p.Sandbox,
			ProxyId:               p.ProxyID,
			Connected:             distribution.StillConnected(p, now),
			Replica:               p.Replica,
			Build:                 p.Build,
			ConnectedAt:           timestamppb.New(p.ConnectedAt),
			LastSeenAt:            timestamppb.New(p.LastSeenAt),
			AppliedVersion:        uint32(p.AppliedVersion),
			AppliedHash:           p.AppliedHash,
			LastAckAt:             optionalTime(p.LastAckAt),
			LastNackVersion:       uint32(p.LastNackVersion),
			LastNackError:         p.LastNackError,
			LastNackAt:            optionalTime(p.LastNackAt),
			LagMs:                 uint32(min(max(p.LagMillis, 0), math.MaxUint32)),
			CurrentVersion:        uint32(current[p.Sandbox]),
			DecisionsDropped:      uint64(p.DecisionsDropped),
			CredentialsGeneration: uint64(p.CredentialsGeneration),
			CredentialsError:      p.CredentialsError,
		})
	}
	return res, nil
}

func optionalTime(t *time.Time) *timestamppb.Timestamp {
	if t == nil {
		return nil
	}
	return timestamppb.New(*t)
}
