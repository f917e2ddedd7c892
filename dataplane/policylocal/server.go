package policylocal

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/portcullis-dev/portcullis/advisor"
	"github.com/portcullis-dev/portcullis/dataplane/decision"
	"github.com/portcullis-dev/portcullis/policy"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"log/slog"
	"sync/atomic"
)

// policy.local: the agent is untrusted and never holds a token; its proxy
// does. Requests for the reserved host policy.local (absolute-form HTTP,
// port 80) are answered by the proxy itself — never judged by policy,
// never forwarded, never dialled — and what needs the gateway is relayed
// to its AdvisorService with the proxy's sandbox token:
//
//	GET  /v1/policy                    the policy version in force (local)
//	GET  /v1/denials?last=N            recent denials with a suggestion (local)
//	POST /v1/proposals                 a proposal file, or {denial_id, …}
//	GET  /v1/proposals/{id}            a proposal
//	GET  /v1/proposals/{id}/wait?timeout=30s   long-poll until decided
//	POST /mcp                          the same as MCP tools: list_denials,
//	                                   propose, proposal_status
//
// Every answer is JSON; errors are {"error": message, "code": …, …}.

// Host is the reserved host the proxy answers itself.
const Host = "policy.local"

// Bounds of policy.local.
const (
	defaultDenials = 20
	maxDenials     = 200
	defaultWait    = 30 * time.Second
	maxWait        = 5 * time.Minute
	// maxLocalMCPBody leaves room for the JSON-RPC envelope around a
	// proposal of the largest size the advisor takes.
	maxLocalMCPBody = advisor.MaxProposalBytes + 64<<10
	// relayTimeout bounds one unary call to the gateway; flushTimeout the
	// wait for decision records to reach it.
	relayTimeout = 30 * time.Second
	flushTimeout = 10 * time.Second
	// bodyReadTimeout and initialBodyBuffer bound reading a body as the
	// proxy bounds reading a judged one.
	bodyReadTimeout   = 30 * time.Second
	initialBodyBuffer = 16 << 10
)

// advisorRelay is how policy.local reaches the gateway.
type advisorRelay struct {
	client portcullisv1.AdvisorServiceClient
	flush  func(context.Context) error
}

// State is what policy.local reads of the proxy it runs in.
type State interface {
	// Current returns the policy in force and its version label (nil and
	// "" when none is loaded).
	Current() (*policy.Policy, string)
	// Decisions returns the recent decision records, oldest first.
	Decisions() []decision.Record
	// DeniedArguments returns the arguments of a recent denied tools/call
	// by denial id, while the proxy keeps them (records carry only their
	// digest): a proposal from a denial by an arguments_schema admits
	// exactly them.
	DeniedArguments(denialID string) ([]byte, bool)
}

// Config configures a Server.
type Config struct {
	// Sandbox names the sandbox in /v1/policy ("" standalone).
	Sandbox string
	// State is the proxy's policy and decision ring.
	State State
	// Framing returns what the proxy's request reader found wrong with the
	// connection of a request's context ("" if nothing): policy.local
	// refuses such requests as the proxy does.
	Framing func(context.Context) string
	Logger  *slog.Logger
	// DevAllowLoopback drafts /v1/denials' suggestions as the proxy run
	// with --dev-allow-loopback judges: a loopback upstream is reachable.
	DevAllowLoopback bool
}

// Server answers the requests for policy.local the proxy hands it.
type Server struct {
	sandbox string
	state   State
	framing func(context.Context) string
	log     *slog.Logger
	// devLoopback: suggestions judge loopback upstreams reachable.
	devLoopback bool

	// advisor is the relay to the gateway's AdvisorService (nil in file
	// mode); mcpHandler the MCP server, built at the first MCP request (an
	// idle proxy does not hold the SDK's server and tool schemas); origin
	// the check that keeps web pages from posting to policy.local.
	advisor    atomic.Pointer[advisorRelay]
	mcpHandler func() http.Handler
	origin     *http.CrossOriginProtection
}

// New returns policy.local's server for the proxy whose state is cfg.State.
func New(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	pl := &Server{sandbox: cfg.Sandbox, state: cfg.State, framing: cfg.Framing, log: cfg.Logger, devLoopback: cfg.DevAllowLoopback, origin: http.NewCrossOriginProtection()}
	pl.mcpHandler = sync.OnceValue(func() http.Handler { return newMCPHandler(pl) })
	return pl
}

// SetAdvisor connects policy.local's proposal endpoints to the gateway:
// client is an AdvisorService client whose connection carries the sandbox
// token (Subscriber.AdvisorClient), and flush, if not nil, ships every
// decision record recorded so far and returns once the gateway stored
// them (Shipper.Flush) — a proposal quoting a denial_id is relayed only
// after it. Without an advisor (file mode) those endpoints answer 503.
// The proxy is built before its subscriber, hence a setter rather than a
// Config field.
func (pl *Server) SetAdvisor(client portcullisv1.AdvisorServiceClient, flush func(context.Context) error) {
	if client == nil {
		pl.advisor.Store(nil)
		return
	}
	pl.advisor.Store(&advisorRelay{client: client, flush: flush})
}

// IsHost returns whether authority (host, host:port, any case,
// trailing dot) names policy.local.
func IsHost(authority string) bool {
	host, _, err := net.SplitHostPort(authority)
	if err != nil {
		host = authority
	}
	return strings.EqualFold(strings.TrimSuffix(host, "."), Host)
}

// Refuse answers a request for policy.local that is not plain
// HTTP (CONNECT, https://): the proxy serves policy.local itself, over
// plain HTTP only, and never opens a tunnel to it.
func Refuse(w http.ResponseWriter) {
	writeLocalError(w, http.StatusBadRequest, "policy_local_plain_http_only",
		"policy.local is answered by the proxy itself over plain HTTP: use http://policy.local/... through the proxy (not https://, not CONNECT)")
}

// Serve answers one absolute-form HTTP request for
// policy.local. Paths, methods, query parameters and bodies are checked
// strictly: nothing here reaches anything but the proxy's own state and
// its AdvisorService relay.
func (pl *Server) Serve(w http.ResponseWriter, r *http.Request, port int) {
	pl.log.Debug("policy.local", "method", r.Method, "path", r.URL.EscapedPath())
	if port != 80 {
		writeLocalError(w, http.StatusBadRequest, "policy_local_port", "policy.local answers on port 80 only: use http://policy.local/...")
		return
	}
	if problem := pl.framing(r.Context()); problem != "" {
		w.Header().Set("Connection", "close")
		writeLocalError(w, http.StatusBadRequest, "malformed_request", problem)
		return
	}
	if r.Header.Get("Upgrade") != "" {
		writeLocalError(w, http.StatusBadRequest, "malformed_request", "policy.local does not upgrade connections")
		return
	}
	if err := pl.origin.Check(r); err != nil {
		// A web page in the sandbox must not file proposals in the
		// agent's name.
		writeLocalError(w, http.StatusForbidden, "cross_origin", "cross-origin requests to policy.local are refused")
		return
	}

	path := r.URL.EscapedPath()
	var (
		methods []string
		params  []string
		serve   func(http.ResponseWriter, *http.Request)
	)
	switch {
	case path == "/v1/policy":
		methods, serve = []string{http.MethodGet}, pl.localPolicy
	case path == "/v1/denials":
		methods, params, serve = []string{http.MethodGet}, []string{"last"}, pl.localDenials
	case path == "/v1/proposals":
		methods, serve = []string{http.MethodPost}, pl.localSubmit
	case path == "/mcp":
		// Stateless: no session to end (DELETE) and no standalone stream
		// (GET), which MCP clients expect a server may refuse with 405.
		methods, serve = []string{http.MethodPost}, pl.localMCP
	case strings.HasPrefix(path, "/v1/proposals/"):
		rest := strings.TrimPrefix(path, "/v1/proposals/")
		idText, wait := strings.CutSuffix(rest, "/wait")
		id, ok := proposalID(idText)
		if !ok {
			writeLocalError(w, http.StatusNotFound, "not_found", "no such policy.local endpoint: a proposal is /v1/proposals/{id} with a positive integer id, or /v1/proposals/{id}/wait")
			return
		}
		methods = []string{http.MethodGet}
		if wait {
			params = []string{"timeout"}
			serve = func(w http.ResponseWriter, r *http.Request) { pl.localWait(w, r, id) }
		} else {
			serve = func(w http.ResponseWriter, r *http.Request) { pl.localGet(w, r, id) }
		}
	default:
		writeLocalError(w, http.StatusNotFound, "not_found", "no such policy.local endpoint; there are /v1/policy, /v1/denials, /v1/proposals, /v1/proposals/{id}, /v1/proposals/{id}/wait and /mcp")
		return
	}
	if !slices.Contains(methods, r.Method) {
		w.Header().Set("Allow", strings.Join(methods, ", "))
		writeLocalError(w, http.StatusMethodNotAllowed, "method_not_allowed", fmt.Sprintf("%s %s is not allowed; use %s", r.Method, path, strings.Join(methods, " or ")))
		return
	}
	if r.Method != http.MethodPost && (r.ContentLength != 0 || len(r.TransferEncoding) > 0) {
		writeLocalError(w, http.StatusBadRequest, "unexpected_body", r.Method+" requests to policy.local must not carry a body")
		return
	}
	if path != "/mcp" {
		query, err := url.ParseQuery(r.URL.RawQuery)
		if err != nil {
			writeLocalError(w, http.StatusBadRequest, "invalid_query", "malformed query string")
			return
		}
		for k := range query {
			if !slices.Contains(params, k) || len(query[k]) > 1 {
				writeLocalError(w, http.StatusBadRequest, "invalid_query", fmt.Sprintf("unexpected query parameter %q", k))
				return
			}
		}
	}
	serve(w, r)
}

// proposalID parses a proposal id: a positive decimal integer, digits only.
func proposalID(s string) (uint64, bool) {
	if s == "" || len(s) > 20 || strings.Trim(s, "0123456789") != "" {
		return 0, false
	}
	id, err := strconv.ParseUint(s, 10, 64)
	return id, err == nil && id > 0
}

// localError is an error answer of policy.local: an HTTP status and the
// JSON body {"error": message, "code": …, …}. The MCP tools return the
// same body as their error text.
type localError struct {
	status     int
	body       map[string]any
	retryAfter int // seconds; 0 for none
}

func (e *localError) Error() string {
	b, err := json.Marshal(e.body)
	if err != nil {
		return fmt.Sprint(e.body["error"])
	}
	return string(b)
}

func newLocalError(status int, code, message string) *localError {
	return &localError{status: status, body: map[string]any{"error": message, "code": code}}
}

func writeLocalError(w http.ResponseWriter, status int, code, message string) {
	writeErrorBody(w, newLocalError(status, code, message))
}

func writeErrorBody(w http.ResponseWriter, e *localError) {
	if e.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.retryAfter))
	}
	writeJSON(w, e.status, e.body)
}

// errNoGateway: file mode has no gateway to relay proposals to.
var errNoGateway = newLocalError(http.StatusServiceUnavailable, "no_gateway",
	"this proxy runs from a policy file and has no gateway: proposals cannot be filed here; ask the operator to edit the policy")

// relayError turns an AdvisorService error into policy.local's answer.
// Messages of gRPC status errors come from the gateway, which writes them
// for the sandbox; the details (refusal, rate limit) travel along.
func (pl *Server) relayError(err error) *localError {
	st, ok := status.FromError(err)
	if !ok {
		if errors.Is(err, context.DeadlineExceeded) {
			return newLocalError(http.StatusGatewayTimeout, "gateway_timeout", "the gateway did not answer in time; retry")
		}
		pl.log.Warn("policy.local relay failed", "err", err)
		return newLocalError(http.StatusBadGateway, "gateway_error", "the gateway could not be asked")
	}
	msg := st.Message()
	switch st.Code() {
	case codes.InvalidArgument:
		e := newLocalError(http.StatusBadRequest, "invalid_argument", msg)
		// Every violation the advisor found, in order ("refusals"); the
		// first is also "refusal".
		var refusals []map[string]any
		for _, d := range st.Details() {
			if ref, ok := d.(*portcullisv1.ProposalRefusal); ok {
				refusals = append(refusals, map[string]any{
					"operation": ref.GetOperation(), "field": ref.GetField(), "rule": ref.GetRule(), "reason": ref.GetReason(),
				})
			}
		}
		if len(refusals) > 0 {
			e.body["refusal"] = refusals[0]
			e.body["refusals"] = refusals
		}
		return e
	case codes.NotFound:
		return newLocalError(http.StatusNotFound, "not_found", msg)
	case codes.AlreadyExists, codes.FailedPrecondition, codes.Aborted:
		return newLocalError(http.StatusConflict, "conflict", msg)
	case codes.ResourceExhausted:
		e := newLocalError(http.StatusTooManyRequests, "rate_limited", msg)
		e.retryAfter = 60
		for _, d := range st.Details() {
			if rl, ok := d.(*portcullisv1.ProposalRateLimit); ok && rl.GetRetryAfterSeconds() > 0 {
				e.retryAfter = int(rl.GetRetryAfterSeconds())
			}
		}
		e.body["retry_after_seconds"] = e.retryAfter
		return e
	case codes.Unauthenticated, codes.PermissionDenied:
		// The agent holds no token; the proxy's own was refused.
		pl.log.Error("the gateway refused this proxy's sandbox token on AdvisorService", "code", st.Code().String(), "err", msg)
		return newLocalError(http.StatusBadGateway, "proxy_token_refused",
			"the gateway refused this proxy's sandbox token ("+msg+"): proposals cannot be filed until an operator fixes the proxy's token; the agent cannot fix this")
	case codes.Unavailable:
		e := newLocalError(http.StatusServiceUnavailable, "gateway_unavailable",
			"the gateway is unreachable, so no proposal can be filed or read now; the proxy keeps enforcing its policy: retry later")
		e.retryAfter = 5
		return e
	case codes.DeadlineExceeded, codes.Canceled:
		return newLocalError(http.StatusGatewayTimeout, "gateway_timeout", "the gateway did not answer in time; retry")
	case codes.Unimplemented:
		return newLocalError(http.StatusNotImplemented, "not_implemented", "the gateway does not offer this yet: "+msg)
	}
	pl.log.Warn("policy.local relay failed", "code", st.Code().String(), "err", msg)
	return newLocalError(http.StatusBadGateway, "gateway_error", "the gateway failed: "+msg)
}

// localPolicy answers the version in force: {version, hash, policy}.
func (pl *Server) localPolicy(w http.ResponseWriter, _ *http.Request) {
	pol, version := pl.state.Current()
	if pol == nil {
		writeLocalError(w, http.StatusServiceUnavailable, "no_policy", "no policy is loaded: the proxy denies every request")
		return
	}
	doc := pol.CanonicalJSON()
	sum := sha256.Sum256(doc) // policy.Hash digests the same bytes
	body := map[string]any{
		"version": versionJSON(version),
		"hash":    hex.EncodeToString(sum[:]),
		"policy":  json.RawMessage(doc),
	}
	if pl.sandbox != "" {
		body["sandbox"] = pl.sandbox
	}
	writeJSON(w, http.StatusOK, body)
}

// versionJSON is a version label as JSON: a stored version (gateway mode)
// is a number, as the gateway's API and the CLI give it; a file-mode label
// ("sha256:…") stays a string.
func versionJSON(label string) any {
	if n, err := strconv.ParseUint(label, 10, 32); err == nil {
		return n
	}
	return label
}

// localDenial is one denial as policy.local shows it; the names are those
// of the proto Denial (advisor.proto).
type localDenial struct {
	DenialID       string          `json:"denial_id"`
	Time           time.Time       `json:"time"`
	Binary         string          `json:"binary,omitempty"`
	Host           string          `json:"host"`
	Port           int             `json:"port"`
	HTTPMethod     string          `json:"http_method,omitempty"`
	Path           string          `json:"path,omitempty"`
	MCPMethod      string          `json:"mcp_method,omitempty"`
	Tool           string          `json:"tool,omitempty"`
	Reason         string          `json:"reason,omitempty"`
	PolicyVersion  string          `json:"policy_version,omitempty"`
	ReasonCode     string          `json:"reason_code,omitempty"`
	ToolDefinition string          `json:"tool_definition,omitempty"`
	Suggestion     json.RawMessage `json:"suggestion,omitempty"`
	NotOffered     string          `json:"not_offered,omitempty"`
}

func (pl *Server) localDenials(w http.ResponseWriter, r *http.Request) {
	last := defaultDenials
	if s := r.URL.Query().Get("last"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			writeLocalError(w, http.StatusBadRequest, "invalid_query", "last must be a positive integer (at most 200)")
			return
		}
		last = n
	}
	writeJSON(w, http.StatusOK, map[string]any{"denials": pl.recentDenials(last)})
}

// recentDenials returns the last n denials of the decision ring (at most
// maxDenials), newest first, each with the narrowest proposal that would
// have allowed it against the policy in force now.
func (pl *Server) recentDenials(n int) []localDenial {
	n = min(n, maxDenials)
	base, _ := pl.state.Current()
	recs := pl.state.Decisions()
	out := make([]localDenial, 0, min(n, len(recs)))
	for i := len(recs) - 1; i >= 0 && len(out) < n; i-- {
		rec := recs[i]
		if rec.Decision != decision.Deny || rec.DenialID == "" {
			continue
		}
		d := localDenial{
			DenialID: rec.DenialID, Time: rec.Time, Binary: rec.Binary, Host: rec.Host, Port: rec.Port,
			HTTPMethod: rec.HTTPMethod, Path: rec.Path, MCPMethod: rec.MCPMethod, Tool: rec.Tool,
			Reason: rec.Reason, PolicyVersion: rec.PolicyVersion, ReasonCode: rec.ReasonCode, ToolDefinition: rec.ToolDefinition,
		}
		args, _ := pl.state.DeniedArguments(rec.DenialID)
		d.Suggestion, d.NotOffered = suggest(base, rec, args, pl.devLoopback)
		out = append(out, d)
	}
	return out
}

// suggest is advisor.FromDenial for a record (and the denied call's
// arguments, if the proxy still keeps them): the proposal's JSON, or why
// none is offered.
func suggest(base *policy.Policy, rec decision.Record, args []byte, devLoopback bool) (json.RawMessage, string) {
	if base == nil {
		return nil, "no policy is loaded"
	}
	dr := advisor.DenialOf(&rec)
	dr.Arguments, dr.DevAllowLoopback = args, devLoopback
	if rec.Path != "" {
		// Records keep the path as sent; proposals name canonical ones.
		path, err := policy.CanonicalPath(rec.Path, false)
		if err != nil {
			return nil, "the request path is malformed: " + err.Error()
		}
		dr.Path = path
	}
	prop, err := advisor.FromDenial(base, dr)
	if err != nil {
		if ref, ok := advisor.AsRefusal(err); ok {
			return nil, ref.Reason
		}
		return nil, err.Error()
	}
	doc, err := prop.Encode()
	if err != nil {
		return nil, err.Error()
	}
	return doc, ""
}

// readLocalBody reads a POST body of at most limit bytes, bounded in time
// like a judged body.
func readLocalBody(w http.ResponseWriter, r *http.Request, limit int) ([]byte, *localError) {
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(bodyReadTimeout))
	defer rc.SetReadDeadline(time.Time{})
	buf := bytes.NewBuffer(make([]byte, 0, min(max(r.ContentLength, 0), initialBodyBuffer)+1))
	if _, err := buf.ReadFrom(io.LimitReader(r.Body, int64(limit)+1)); err != nil {
		return nil, newLocalError(http.StatusBadRequest, "unreadable_body", "cannot read the request body")
	}
	if buf.Len() > limit {
		return nil, newLocalError(http.StatusRequestEntityTooLarge, "body_too_large", fmt.Sprintf("the request body is over %d bytes", limit))
	}
	return buf.Bytes(), nil
}

// submitRequest reads a POST /v1/proposals body: {"denial_id": …,
// "rationale": …, "idempotency_key": …} when it names a denial_id, else a
// proposal file (JSON or YAML) that the gateway parses.
func submitRequest(body []byte) (*portcullisv1.SubmitProposalRequest, *localError) {
	if !utf8.Valid(body) {
		return nil, newLocalError(http.StatusBadRequest, "invalid_argument", "the proposal is not valid UTF-8")
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, newLocalError(http.StatusBadRequest, "invalid_argument", `the body is empty: send a proposal (rationale, operations) or {"denial_id": …, "rationale": …}`)
	}
	var probe map[string]json.RawMessage
	if json.Unmarshal(body, &probe) == nil {
		if _, ok := probe["denial_id"]; ok {
			var d struct {
				DenialID       string `json:"denial_id"`
				Rationale      string `json:"rationale"`
				IdempotencyKey string `json:"idempotency_key"`
			}
			dec := json.NewDecoder(bytes.NewReader(body))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&d); err != nil {
				return nil, newLocalError(http.StatusBadRequest, "invalid_argument", "a proposal from a denial takes denial_id, rationale and idempotency_key only: "+err.Error())
			}
			if d.DenialID == "" {
				return nil, newLocalError(http.StatusBadRequest, "invalid_argument", "denial_id is empty")
			}
			return &portcullisv1.SubmitProposalRequest{DenialId: d.DenialID, Rationale: d.Rationale, IdempotencyKey: d.IdempotencyKey}, nil
		}
	}
	return &portcullisv1.SubmitProposalRequest{Document: string(body)}, nil
}

// submit relays a proposal. A proposal from a denial waits until the
// proxy's decision records (the denial among them) reached the gateway.
func (pl *Server) submit(ctx context.Context, req *portcullisv1.SubmitProposalRequest) (*portcullisv1.Proposal, *localError) {
	relay := pl.advisor.Load()
	if relay == nil {
		return nil, errNoGateway
	}
	if id := req.GetDenialId(); id != "" && req.GetArguments() == "" {
		// A denial by an arguments_schema is proposed with exactly the
		// denied arguments, which only this proxy kept; the gateway checks
		// them against the record's digest.
		if args, ok := pl.state.DeniedArguments(id); ok {
			req = proto.Clone(req).(*portcullisv1.SubmitProposalRequest)
			req.Arguments = string(args)
		}
	}
	if req.GetDenialId() != "" && relay.flush != nil {
		fctx, cancel := context.WithTimeout(ctx, flushTimeout)
		err := relay.flush(fctx)
		cancel()
		if err != nil {
			pl.log.Warn("policy.local: decision records not shipped before a proposal from a denial", "err", err)
			if status.Code(err) == codes.Unavailable {
				// The shipper's attempt found no gateway: say so now
				// rather than after flushTimeout.
				e := newLocalError(http.StatusServiceUnavailable, "gateway_unavailable",
					"the gateway is unreachable, so no proposal can be filed now; the proxy keeps enforcing its policy: retry later")
				e.retryAfter = 5
				return nil, e
			}
			e := newLocalError(http.StatusServiceUnavailable, "denials_not_shipped", "the proxy could not send its recent denials to the gateway yet; retry shortly")
			e.retryAfter = 5
			return nil, e
		}
	}
	ctx, cancel := context.WithTimeout(ctx, relayTimeout)
	defer cancel()
	prop, err := relay.client.SubmitProposal(ctx, req)
	if err != nil {
		return nil, pl.relayError(err)
	}
	return prop, nil
}

func (pl *Server) localSubmit(w http.ResponseWriter, r *http.Request) {
	if pl.advisor.Load() == nil {
		writeErrorBody(w, errNoGateway)
		return
	}
	body, lerr := readLocalBody(w, r, advisor.MaxProposalBytes)
	if lerr != nil {
		writeErrorBody(w, lerr)
		return
	}
	req, lerr := submitRequest(body)
	if lerr != nil {
		writeErrorBody(w, lerr)
		return
	}
	prop, lerr := pl.submit(r.Context(), req)
	if lerr != nil {
		writeErrorBody(w, lerr)
		return
	}
	code := http.StatusCreated
	if prop.GetDeduplicated() {
		code = http.StatusOK
	}
	w.Header().Set("Location", fmt.Sprintf("http://%s/v1/proposals/%d", Host, prop.GetId()))
	writeProposal(w, code, prop)
}

// getProposal relays GetProposal.
func (pl *Server) getProposal(ctx context.Context, id uint64) (*portcullisv1.Proposal, *localError) {
	relay := pl.advisor.Load()
	if relay == nil {
		return nil, errNoGateway
	}
	ctx, cancel := context.WithTimeout(ctx, relayTimeout)
	defer cancel()
	prop, err := relay.client.GetProposal(ctx, &portcullisv1.GetProposalRequest{Id: id})
	if err != nil {
		return nil, pl.relayError(err)
	}
	return prop, nil
}

func (pl *Server) localGet(w http.ResponseWriter, r *http.Request, id uint64) {
	prop, lerr := pl.getProposal(r.Context(), id)
	if lerr != nil {
		writeErrorBody(w, lerr)
		return
	}
	writeProposal(w, http.StatusOK, prop)
}

// waitProposal follows a proposal (WatchProposal) until it is decided or
// wait passes, and returns the latest state either way. Approved counts
// as undecided: the gateway applies an approval at once, and applied is
// what the agent waits for — applied and enforced by this proxy, within
// the same wait, so that the call the agent retries at once passes.
func (pl *Server) waitProposal(ctx context.Context, id uint64, wait time.Duration) (*portcullisv1.Proposal, *localError) {
	relay := pl.advisor.Load()
	if relay == nil {
		return nil, errNoGateway
	}
	if wait <= 0 {
		return pl.getProposal(ctx, id)
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	st, err := relay.client.WatchProposal(wctx, &portcullisv1.WatchProposalRequest{Id: id})
	if err != nil {
		return nil, pl.relayError(err)
	}
	var latest *portcullisv1.Proposal
	for {
		prop, err := st.Recv()
		if err != nil {
			switch {
			case latest != nil:
				return latest, nil
			case ctx.Err() == nil && wctx.Err() != nil:
				// The wait passed before the first answer: ask once.
				return pl.getProposal(ctx, id)
			}
			return nil, pl.relayError(err)
		}
		latest = prop
		if s := prop.GetStatus(); s != "pending" && s != "approved" {
			if s == "applied" {
				pl.awaitLocal(wctx, prop.GetAppliedVersion())
			}
			return latest, nil
		}
	}
}

// awaitLocal waits, until ctx ends, for this proxy to enforce version
// (or a later one): an agent told its proposal is applied retries at
// once, and the version committed may still be on its way here.
func (pl *Server) awaitLocal(ctx context.Context, version uint32) {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, label := pl.state.Current(); label != "" {
			if v, err := strconv.ParseUint(label, 10, 32); err == nil && uint32(v) >= version {
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (pl *Server) localWait(w http.ResponseWriter, r *http.Request, id uint64) {
	wait := defaultWait
	if s := r.URL.Query().Get("timeout"); s != "" {
		d, err := parseWait(s)
		if err != nil {
			writeLocalError(w, http.StatusBadRequest, "invalid_query", err.Error())
			return
		}
		wait = d
	}
	prop, lerr := pl.waitProposal(r.Context(), id, wait)
	if lerr != nil {
		writeErrorBody(w, lerr)
		return
	}
	writeProposal(w, http.StatusOK, prop)
}

// parseWait reads a timeout: a Go duration ("30s", "2m") or seconds
// ("30"), at least 0, capped at maxWait.
func parseWait(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		n, nerr := strconv.Atoi(s)
		if nerr != nil {
			return 0, fmt.Errorf("timeout %q: want a duration such as 30s or a number of seconds (at most %s)", s, maxWait)
		}
		d = time.Duration(n) * time.Second
	}
	if d < 0 {
		return 0, fmt.Errorf("timeout %q is negative", s)
	}
	return min(d, maxWait), nil
}

// proposalJSON is a stored proposal as protojson with the proto field
// names, as the CLI's -o json prints it, with its 64-bit integers (id,
// superseded_by, …) as JSON numbers rather than protojson's strings.
func proposalJSON(prop *portcullisv1.Proposal) []byte {
	b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(prop)
	if err != nil {
		// A message received from the gateway always marshals.
		return []byte(`{"error":"cannot encode the proposal"}`)
	}
	return numbers(b, prop.ProtoReflect().Descriptor())
}

func writeProposal(w http.ResponseWriter, code int, prop *portcullisv1.Proposal) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(append(proposalJSON(prop), '\n'))
}

// trimmedProposal is a proposal for an MCP tool result: without the whole
// resulting policy, which GET /v1/proposals/{id} still shows.
func trimmedProposal(prop *portcullisv1.Proposal) json.RawMessage {
	c := proto.Clone(prop).(*portcullisv1.Proposal)
	c.ResultingPolicy = nil
	return proposalJSON(c)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
