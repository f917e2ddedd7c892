// Package gateway is the Portcullis control-plane server. The root owns
// the Config and the Server (New, Listen, Serve, Bootstrap, Handler,
// SigningKey), the gateway process around it (Run, which opens the stores
// with OpenStore, the tracing exporter and the OCSF sinks, and closes
// them: run.go), authentication, the authorization table and the console
// session (auth.go, session.go, grpc.go for grpc-go), the one mapping of
// errors to Connect codes (errors.go), the metrics registry, and the API
// handlers, which only translate proto to and from domain types and call
// the package that does the work.
//
// The work lives elsewhere: the policy lifecycle (commits, proposal
// intake, review, approval, freeze, sweeps) in package lifecycle, and the
// rest in the gateway's subpackages, which the root wires by constructor
// injection and which never import it:
//
//   - gateway/distribution: the push hub, signing keys, policy streams,
//     decision shipping, sandbox CAs, per-proxy status;
//   - gateway/decisions: decision records' ingest limit, storage and
//     retention sweep;
//   - gateway/transport: the one port (router, TLS, h2c, the grpc-go
//     server), graceful shutdown, health, and the interceptors that are
//     not authorization;
//   - gateway/notify: webhooks and the audit head logger.
//
// The root may import those, store and its drivers (OpenStore), lifecycle,
// advisor, policy, prover, the generated API, web, internal/ocsf and the
// tracer provider (internal/telemetry/otlp); never dataplane.
package gateway
