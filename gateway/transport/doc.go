// Package transport owns how the gateway's one port is served: the
// connection router (TLS termination, the h2c peek that sends policy
// streams to a grpc-go server and everything else to net/http), the
// grpc-go server and its bridge to Connect's errors and interceptors,
// graceful shutdown, grpc.health.v1, the interceptors that are not
// authorization (panic recovery, error mapping's shell, RPC metrics), and
// the means for a long stream to end its own pending read (interrupters,
// OffStack).
//
// It knows no service and no principal: the gateway root hands it
// handlers, the route, an error mapping and an authorization function. It
// may import connect, grpc-go, net/http and the standard library; it
// imports neither the gateway root nor the generated API (its tests may).
package transport
