package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"time"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connecthttp"
	"github.com/spf13/cobra"

	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
)

// Environment variables read by the client commands, and the defaults they
// override. A flag beats its variable; the variable beats the default.
const (
	envGateway = "PORTCULLIS_GATEWAY"
	envToken   = "PORTCULLIS_TOKEN"

	defaultGateway = "http://127.0.0.1:7070"
	defaultTimeout = 30 * time.Second
)

// Values of -o/--output.
const (
	outputText = "text"
	outputJSON = "json"
	outputYAML = "yaml" // policy get only: the document alone
)

// annotationYAML marks a command that accepts -o yaml.
const annotationYAML = "portcullis/output-yaml"

// environment is what every command may touch: the process's streams and
// environment, the global flags, and the API clients built from them on
// first use (offline commands never build them, so they need no gateway and
// no token).
type environment struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string

	// Global flags, as given on the command line ("" when absent).
	gatewayFlag   []string // each may hold several, comma-separated
	tokenFlag     string
	tokenFileFlag string
	output        string
	timeout       time.Duration

	// httpClient carries every API call; nil means one built on first use.
	httpClient *http.Client

	// interactive: stdin is a terminal, so a command may ask (sandbox
	// delete's confirmation).
	interactive bool

	// started is set when a command's own code begins to run: an error
	// before that is cobra refusing the command line (exit 2).
	started bool
	// commandPath is the command that ran ("portcullis policy set"), for hints.
	commandPath string

	api *apiClients
	// gateway is the replica client commands talk to, once picked.
	gateway *url.URL
	// notGateway is set when an answer did not come from a Portcullis
	// gateway (gatewayCheck): run reports it instead of the call's error.
	notGateway *notGatewayError
}

// apiClients are the gateway's services, authenticated with the token.
type apiClients struct {
	sandbox  portcullisv1connect.SandboxServiceClient
	token    portcullisv1connect.TokenServiceClient
	policy   portcullisv1connect.PolicyServiceClient
	proxy    portcullisv1connect.ProxyServiceClient
	decision portcullisv1connect.DecisionServiceClient
	advisor  portcullisv1connect.AdvisorServiceClient
	audit    portcullisv1connect.AuditServiceClient
	approval portcullisv1connect.ApprovalServiceClient
	sentry   portcullisv1connect.SentryServiceClient
	// stream is the decision service for streams that last until the
	// user stops them (logs --tail): its calls have no --timeout.
	stream portcullisv1connect.DecisionServiceClient
	// enforcement follows a version to the proxies (--wait): bounded by
	// --wait-timeout, not --timeout.
	enforcement portcullisv1connect.ProxyServiceClient
}

func newEnvironment(stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) *environment {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	return &environment{stdin: stdin, stdout: stdout, stderr: stderr, getenv: getenv, interactive: isTerminal(stdin)}
}

// isTerminal reports whether r is a terminal (a character device).
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// addGlobalFlags registers the flags every command accepts.
func (e *environment) addGlobalFlags(cmd *cobra.Command) {
	f := cmd.PersistentFlags()
	f.StringArrayVar(&e.gatewayFlag, "gateway", nil, "gateway API `URL` (env "+envGateway+", default "+defaultGateway+"); several replicas: repeat it or separate with commas")
	f.StringVar(&e.tokenFlag, "token", "", "API `TOKEN` (env "+envToken+"; prefer --token-file, command lines are visible to other users)")
	f.StringVar(&e.tokenFileFlag, "token-file", "", "read the API token from `FILE` (surrounding white space is ignored)")
	f.StringVarP(&e.output, "output", "o", outputText, "output `FORMAT`: text or json (policy get also yaml)")
	f.DurationVar(&e.timeout, "timeout", defaultTimeout, "give up on a gateway call after `DURATION` (0: never; logs --tail is never cut)")
}

// checkOutput refuses an -o value the command cannot print.
func (e *environment) checkOutput(cmd *cobra.Command) error {
	switch e.output {
	case outputText, outputJSON:
		return nil
	case outputYAML:
		if cmd.Annotations[annotationYAML] != "" {
			return nil
		}
		return usagef("%s cannot print yaml; use -o text or -o json", cmd.CommandPath())
	default:
		return usagef("unknown output format %q; use text or json", e.output)
	}
}

func (e *environment) jsonOutput() bool { return e.output == outputJSON }

// gatewayURLs resolves --gateway (repeated or comma-separated: the
// replicas of one gateway), then PORTCULLIS_GATEWAY (comma-separated),
// then the default, and checks that each is an http(s) URL.
func (e *environment) gatewayURLs() ([]*url.URL, error) {
	raw, from := strings.Join(e.gatewayFlag, ","), "--gateway"
	if raw == "" {
		raw, from = e.getenv(envGateway), envGateway
	}
	if raw == "" {
		raw, from = defaultGateway, "default gateway"
	}
	var urls []*url.URL
	for _, r := range strings.Split(raw, ",") {
		r = strings.TrimSpace(r)
		if r == "" {
			continue
		}
		u, err := url.Parse(r)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, usagef("%s: %q is not an http:// or https:// URL", from, redactURL(r))
		}
		urls = append(urls, u)
	}
	if len(urls) == 0 {
		return nil, usagef("%s: no URL", from)
	}
	return urls, nil
}

// gatewayURL is the gateway client commands talk to: the one given, or
// of several replicas the first that accepts a connection (the first if
// none does; the call then says it is unavailable). Any replica serves
// every command: they share one store.
func (e *environment) gatewayURL() (*url.URL, error) {
	if e.gateway != nil {
		return e.gateway, nil
	}
	urls, err := e.gatewayURLs()
	if err != nil {
		return nil, err
	}
	e.gateway = urls[0]
	if len(urls) > 1 {
		for _, u := range urls {
			if reachable(u) {
				e.gateway = u
				break
			}
		}
	}
	return e.gateway, nil
}

// reachable reports whether u's host accepts a TCP connection within a
// couple of seconds.
func reachable(u *url.URL) bool {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	c, err := net.DialTimeout("tcp", net.JoinHostPort(u.Hostname(), port), 2*time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// token resolves --token or --token-file, then PORTCULLIS_TOKEN. An empty
// result is allowed: the gateway then answers Unauthenticated.
func (e *environment) token() (string, error) {
	switch {
	case e.tokenFlag != "" && e.tokenFileFlag != "":
		return "", usagef("give --token or --token-file, not both")
	case e.tokenFlag != "":
		return strings.TrimSpace(e.tokenFlag), nil
	case e.tokenFileFlag != "":
		data, err := os.ReadFile(e.tokenFileFlag)
		if err != nil {
			return "", inputErr(fmt.Errorf("read token file: %w", err))
		}
		tok := strings.TrimSpace(string(data))
		if tok == "" {
			return "", inputErr(fmt.Errorf("token file %s is empty", e.tokenFileFlag))
		}
		return tok, nil
	default:
		return strings.TrimSpace(e.getenv(envToken)), nil
	}
}

// hasToken reports whether a token was given in any way, for error hints.
func (e *environment) hasToken() bool {
	return e.tokenFlag != "" || e.tokenFileFlag != "" || e.getenv(envToken) != ""
}

// gatewayForMessages is the gateway URL as error messages may show it.
func (e *environment) gatewayForMessages() string {
	u, err := e.gatewayURL()
	if err != nil {
		return "(invalid gateway URL)"
	}
	return u.Redacted()
}

// client returns the API clients, building them on first use.
func (e *environment) client() (*apiClients, error) {
	if e.api != nil {
		return e.api, nil
	}
	u, err := e.gatewayURL()
	if err != nil {
		return nil, err
	}
	tok, err := e.token()
	if err != nil {
		return nil, err
	}
	if u.Scheme == "http" && tok != "" && !loopbackHost(u.Hostname()) {
		fmt.Fprintf(e.stderr, "warning: sending the token in plaintext to %s; use https:// beyond this host\n", u.Redacted())
	}
	if e.httpClient == nil {
		e.httpClient = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone(), Timeout: e.timeout}
	}
	e.httpClient.Transport = gatewayCheck{next: e.httpClient.Transport, env: e, gateway: u.Redacted()}
	httpClient := e.httpClient
	// Streams share the transport (and its connections) but not the
	// timeout, which would cut them after --timeout.
	streamClient := *httpClient
	streamClient.Timeout = 0
	base := *u
	base.User = nil // credentials travel as the bearer token, nowhere else
	baseURL := strings.TrimSuffix(base.String(), "/")
	c := connect.NewClient(connecthttp.NewTransport(httpClient, baseURL), bearer(tok))
	sc := connect.NewClient(connecthttp.NewTransport(&streamClient, baseURL), bearer(tok))
	e.api = &apiClients{
		sandbox:  portcullisv1connect.NewSandboxServiceClient(c),
		token:    portcullisv1connect.NewTokenServiceClient(c),
		policy:   portcullisv1connect.NewPolicyServiceClient(c),
		proxy:    portcullisv1connect.NewProxyServiceClient(c),
		decision: portcullisv1connect.NewDecisionServiceClient(c),
		advisor:  portcullisv1connect.NewAdvisorServiceClient(c),
		audit:    portcullisv1connect.NewAuditServiceClient(c),
		approval: portcullisv1connect.NewApprovalServiceClient(c),
		sentry:   portcullisv1connect.NewSentryServiceClient(c),
		stream:   portcullisv1connect.NewDecisionServiceClient(sc),

		enforcement: portcullisv1connect.NewProxyServiceClient(sc),
	}
	return e.api, nil
}

// close releases the API client's idle connections.
func (e *environment) close() {
	if e.httpClient != nil {
		e.httpClient.CloseIdleConnections()
	}
}

// bearer sends tok as the Authorization header of every call (none when
// tok is empty).
func bearer(tok string) connect.ClientInterceptor {
	return func(next connect.ClientFunc) connect.ClientFunc {
		return func(ctx context.Context, spec connect.Spec) (connect.ClientStream, error) {
			if info, ok := connect.CallInfoForClientContext(ctx); ok && tok != "" {
				info.RequestHeader().Set("Authorization", "Bearer "+tok)
			}
			return next(ctx, spec)
		}
	}
}

// loopbackHost reports whether host names this machine.
func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// redactURL hides a password in a URL that may not parse.
func redactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	if i := strings.LastIndex(raw, "@"); i >= 0 {
		return "…" + raw[i:]
	}
	return raw
}

// gatewayCheck notes an answer that no Portcullis gateway gives: one that
// is not an RPC answer (Connect or gRPC), such as another web server's 404
// page. A proxy or load balancer answering 502, 503 or 504 is a gateway
// that is down, not a wrong address: those are left to the call's error
// (unavailable).
type gatewayCheck struct {
	next    http.RoundTripper
	env     *environment
	gateway string
}

func (c gatewayCheck) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := c.next.RoundTrip(req)
	if err != nil || rpcAnswer(res) {
		return res, err
	}
	switch res.StatusCode {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return res, err
	}
	if c.env.notGateway == nil {
		c.env.notGateway = &notGatewayError{gateway: c.gateway, status: res.Status}
	}
	return res, nil
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

// CloseIdleConnections passes on to the transport (environment.close).
func (c gatewayCheck) CloseIdleConnections() {
	if ci, ok := c.next.(interface{ CloseIdleConnections() }); ok {
		ci.CloseIdleConnections()
	}
}
