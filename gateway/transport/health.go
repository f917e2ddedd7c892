package transport

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"connectrpc.com/connect/v2"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// The standard grpc.health.v1 service, so load balancers and grpc-health-probe
// work. A service is SERVING while the store answers.
const (
	// HealthCheckProcedure and HealthWatchProcedure are public: load
	// balancers call them without a token.
	HealthCheckProcedure = "/grpc.health.v1.Health/Check"
	HealthWatchProcedure = "/grpc.health.v1.Health/Watch"
	healthWatchInterval  = 5 * time.Second
	// maxHealthWatchers bounds the open Watch streams: they need no token.
	maxHealthWatchers = 64
)

// RegisterHealth registers grpc.health.v1 on rpc: every service rpc has
// is SERVING while ping (the store's) succeeds. Watch streams end when
// streams is done (shutdown began). Register it after every other service.
func RegisterHealth(rpc *connect.Server, ping func(context.Context) error, streams context.Context) {
	watchers := make(chan struct{}, maxHealthWatchers)
	methods := healthpb.File_grpc_health_v1_health_proto.Services().ByName("Health").Methods()
	known := map[string]bool{"": true}
	for spec := range rpc.Specs() {
		if svc := serviceOf(spec.Procedure); svc != "" {
			known[svc] = true
		}
	}
	status := func(ctx context.Context, service string) (healthpb.HealthCheckResponse_ServingStatus, error) {
		if !known[service] {
			return 0, connect.NewError(connect.CodeNotFound, "unknown service "+service)
		}
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if ping(ctx) != nil {
			return healthpb.HealthCheckResponse_NOT_SERVING, nil
		}
		return healthpb.HealthCheckResponse_SERVING, nil
	}
	// method serves one of the service's methods, each of which starts
	// with one request.
	method := func(name string, typ connect.StreamType, procedure string, serve func(context.Context, *healthpb.HealthCheckRequest, connect.ServerStream) error) connect.Method {
		return connect.Method{
			Spec: connect.Spec{StreamType: typ, Schema: methods.ByName(protoreflect.Name(name)), Procedure: procedure},
			Handler: func(ctx context.Context, _ connect.Spec, stream connect.ServerStream) error {
				var req healthpb.HealthCheckRequest
				if err := stream.Receive(&req); err != nil {
					return err
				}
				return serve(ctx, &req, stream)
			},
		}
	}
	rpc.Register(
		method("Check", connect.StreamTypeUnary, HealthCheckProcedure,
			func(ctx context.Context, req *healthpb.HealthCheckRequest, stream connect.ServerStream) error {
				s, err := status(ctx, req.GetService())
				if err != nil {
					return err
				}
				return stream.Send(&healthpb.HealthCheckResponse{Status: s})
			}),
		method("Watch", connect.StreamTypeServer, HealthWatchProcedure,
			func(ctx context.Context, req *healthpb.HealthCheckRequest, stream connect.ServerStream) error {
				select {
				case watchers <- struct{}{}:
					defer func() { <-watchers }()
				default:
					return connect.NewError(connect.CodeResourceExhausted, "too many health watchers; poll Check instead")
				}
				var last healthpb.HealthCheckResponse_ServingStatus = -1
				ticker := time.NewTicker(healthWatchInterval)
				defer ticker.Stop()
				for {
					s, err := status(ctx, req.GetService())
					if err != nil {
						s = healthpb.HealthCheckResponse_SERVICE_UNKNOWN
					}
					if s != last {
						if err := stream.Send(&healthpb.HealthCheckResponse{Status: s}); err != nil {
							return err
						}
						last = s
					}
					select {
					case <-ctx.Done():
						return nil
					case <-streams.Done():
						return nil
					case <-ticker.C:
					}
				}
			}),
	)
}

// serviceOf returns "pkg.Service" of "/pkg.Service/Method".
func serviceOf(procedure string) string {
	for i := len(procedure) - 1; i > 0; i-- {
		if procedure[i] == '/' {
			return procedure[1:i]
		}
	}
	return ""
}

// ErrProbeURL is Probe's error for a URL it cannot make a request of.
var ErrProbeURL = errors.New("not a URL to probe")

// Probe asks url (a gateway's /readyz) once, within 3 s, and returns nil
// when it answers 200 OK: `portcullis healthcheck`, the probe for
// container images that have no curl.
func Probe(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("--url: %w: %w", ErrProbeURL, err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %s", url, res.Status)
	}
	return nil
}
