// Package apiclient is the gateway's API seen from a client: the replica
// to call among several, the token sent as a bearer, the answers that come
// from something other than a Portcullis gateway, the typed errors the
// gateway's error details carry (validation problems, a proposal's
// refusals and rate limit), following a committed version to the proxies
// (WatchEnforcement), a tail of decision records until the caller stops
// it, proposals read as the token may see them (the approval queue, or a
// sandbox's own), the API's messages as JSON with 64-bit integers as
// numbers, and the values of requests' time flags (Since, Until). The CLI is built on it; it reads no flag or environment
// variable itself.
package apiclient

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connecthttp"

	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
)

// Config is what a Client needs.
type Config struct {
	// URL is the gateway's API (http or https). Credentials in it are
	// never sent: the token is the one credential.
	URL *url.URL
	// Token is sent as the bearer token of every call; empty sends none
	// (the gateway then answers Unauthenticated).
	Token string
	// Timeout bounds every unary call (0: none). Streams that follow
	// something (Stream, Enforcement) are never cut by it.
	Timeout time.Duration
}

// Client holds the gateway's services, authenticated with the token.
type Client struct {
	Sandbox  portcullisv1connect.SandboxServiceClient
	Token    portcullisv1connect.TokenServiceClient
	Policy   portcullisv1connect.PolicyServiceClient
	Proxy    portcullisv1connect.ProxyServiceClient
	Decision portcullisv1connect.DecisionServiceClient
	Advisor  portcullisv1connect.AdvisorServiceClient
	Audit    portcullisv1connect.AuditServiceClient
	Approval portcullisv1connect.ApprovalServiceClient
	Sentry   portcullisv1connect.SentryServiceClient
	Calls    portcullisv1connect.CallServiceClient
	Provider portcullisv1connect.ProviderServiceClient
	// Stream is the decision service for streams that last until the
	// caller stops them (TailDecisions): its calls have no Timeout.
	Stream portcullisv1connect.DecisionServiceClient
	// Enforcement follows a version to the proxies (AwaitEnforcement):
	// bounded by the wait's own timeout, not Timeout.
	Enforcement portcullisv1connect.ProxyServiceClient

	http  *http.Client
	check *gatewayCheck
	base  string // the gateway's URL, without credentials or a trailing /
}

// New returns a Client of the gateway at cfg.URL. It connects to nothing
// until the first call.
func New(cfg Config) *Client {
	check := &gatewayCheck{next: http.DefaultTransport.(*http.Transport).Clone(), gateway: cfg.URL.Redacted()}
	httpClient := &http.Client{Transport: check, Timeout: cfg.Timeout}
	// Streams share the transport (and its connections) but not the
	// timeout, which would cut them.
	streamClient := *httpClient
	streamClient.Timeout = 0
	base := *cfg.URL
	base.User = nil // credentials travel as the bearer token, nowhere else
	baseURL := strings.TrimSuffix(base.String(), "/")
	c := connect.NewClient(connecthttp.NewTransport(httpClient, baseURL), Bearer(cfg.Token))
	sc := connect.NewClient(connecthttp.NewTransport(&streamClient, baseURL), Bearer(cfg.Token))
	return &Client{
		Sandbox:  portcullisv1connect.NewSandboxServiceClient(c),
		Token:    portcullisv1connect.NewTokenServiceClient(c),
		Policy:   portcullisv1connect.NewPolicyServiceClient(c),
		Proxy:    portcullisv1connect.NewProxyServiceClient(c),
		Decision: portcullisv1connect.NewDecisionServiceClient(c),
		Advisor:  portcullisv1connect.NewAdvisorServiceClient(c),
		Audit:    portcullisv1connect.NewAuditServiceClient(c),
		Approval: portcullisv1connect.NewApprovalServiceClient(c),
		Sentry:   portcullisv1connect.NewSentryServiceClient(c),
		Calls:    portcullisv1connect.NewCallServiceClient(c),
		Provider: portcullisv1connect.NewProviderServiceClient(c),
		Stream:   portcullisv1connect.NewDecisionServiceClient(sc),

		Enforcement: portcullisv1connect.NewProxyServiceClient(sc),

		http:  httpClient,
		check: check,
		base:  baseURL,
	}
}

// NotGateway is the first answer that did not come from a Portcullis
// gateway, nil while there is none. A caller reports it instead of the
// call's own error ("404 Not Found", "invalid content-type"), which would
// hide that the address is wrong.
func (c *Client) NotGateway() *NotGatewayError {
	c.check.mu.Lock()
	defer c.check.mu.Unlock()
	return c.check.first
}

// CloseIdleConnections releases the client's idle connections.
func (c *Client) CloseIdleConnections() {
	c.http.CloseIdleConnections()
}

// Bearer sends token as the Authorization header of every call (none when
// token is empty).
func Bearer(token string) connect.ClientInterceptor {
	return func(next connect.ClientFunc) connect.ClientFunc {
		return func(ctx context.Context, spec connect.Spec) (connect.ClientStream, error) {
			if info, ok := connect.CallInfoForClientContext(ctx); ok && token != "" {
				info.RequestHeader().Set("Authorization", "Bearer "+token)
			}
			return next(ctx, spec)
		}
	}
}

// NotGatewayError is an address that answers, but not as a Portcullis
// gateway does (another web server, a console's port, a typo'd path).
type NotGatewayError struct {
	Gateway string // the URL, redacted
	Status  string // what it answered, "404 Not Found"
	// Proxy: a Portcullis proxy answered (its not_a_proxy_request
	// refusal), the usual slip of giving a proxy's port for the gateway's.
	Proxy bool
}

func (e *NotGatewayError) Error() string {
	if e.Proxy {
		return e.Gateway + " answered as a Portcullis proxy, not a gateway: point --gateway at the gateway's address (the one the proxy's own --gateway names)"
	}
	return e.Gateway + " is not a Portcullis gateway: it answered " + e.Status + " to an API call"
}

// gatewayCheck notes an answer that no Portcullis gateway gives: one that
// is not an RPC answer (Connect or gRPC), such as another web server's 404
// page. A proxy or load balancer answering 502, 503 or 504 is a gateway
// that is down, not a wrong address: those are left to the call's error
// (unavailable).
type gatewayCheck struct {
	next    http.RoundTripper
	gateway string

	mu    sync.Mutex
	first *NotGatewayError
}

func (c *gatewayCheck) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := c.next.RoundTrip(req)
	if err != nil {
		return res, err
	}
	proxy := proxyAnswer(res)
	if !proxy && rpcAnswer(res) {
		return res, nil
	}
	switch res.StatusCode {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return res, nil
	}
	c.mu.Lock()
	if c.first == nil {
		c.first = &NotGatewayError{Gateway: c.gateway, Status: res.Status, Proxy: proxy}
	}
	c.mu.Unlock()
	return res, nil
}

// proxyAnswer reports whether res is a Portcullis proxy's refusal of a
// request that is not a proxy request (400, JSON whose error is
// not_a_proxy_request): an API call sent to a proxy's port. Only such an
// answer's start is read, and put back for the caller.
func proxyAnswer(res *http.Response) bool {
	if res.StatusCode != http.StatusBadRequest || !strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") {
		return false
	}
	start, _ := io.ReadAll(io.LimitReader(res.Body, 512))
	res.Body = readCloser{io.MultiReader(bytes.NewReader(start), res.Body), res.Body}
	var refusal struct {
		Error string `json:"error"`
	}
	return json.Unmarshal(bytes.TrimSpace(start), &refusal) == nil && refusal.Error == "not_a_proxy_request"
}

// readCloser reads from one reader and closes another.
type readCloser struct {
	io.Reader
	io.Closer
}

// rpcAnswer reports whether res is an answer a gateway's API gives.
func rpcAnswer(res *http.Response) bool {
	ct := res.Header.Get("Content-Type")
	for _, prefix := range []string{"application/proto", "application/json", "application/connect+", "application/grpc"} {
		if strings.HasPrefix(ct, prefix) {
			return true
		}
	}
	return false
}

// CloseIdleConnections passes on to the transport (Client.CloseIdleConnections).
func (c *gatewayCheck) CloseIdleConnections() {
	if ci, ok := c.next.(interface{ CloseIdleConnections() }); ok {
		ci.CloseIdleConnections()
	}
}
