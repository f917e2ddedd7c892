package credentials

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/portcullis-dev/portcullis/dataplane/h1"
	"github.com/portcullis-dev/portcullis/policy"
	"github.com/portcullis-dev/portcullis/provider"
)

// The reason codes of the denials Check makes (decision records'
// reason_code).
const (
	// CodeUnavailable: the endpoint binds a provider the proxy cannot use
	// for this request — not attached or not delivered, not covering the
	// host, or its token could not be fetched.
	CodeUnavailable = "credential_unavailable"
	// CodeSupplied: the agent sent a credential itself, where the proxy
	// sets one or anywhere in a header.
	CodeSupplied = "credential_supplied"
	// CodePlaceholder: a placeholder where no binding puts its provider's
	// credential.
	CodePlaceholder = "credential_placeholder"
)

// Bounds on the bodies Check reads.
const (
	MaxRewriteBody = 256 << 10 // request_body_credential_rewrite
	MaxSignedBody  = 10 << 20  // a SigV4 signature over the body
)

// MinSearchedSecret is the shortest secret value searched for in the
// agent's headers: a shorter one would match innocent text.
const MinSearchedSecret = 8

// Denial is a request Check refused: its reason code and a reason that
// holds no secret.
type Denial struct {
	Code   string
	Reason string
}

func (d *Denial) Error() string { return d.Code + ": " + d.Reason }

// Decision is the denial of the request d allowed (its entry, endpoint
// and rule), for d's record.
func (d *Denial) Decision(allowed policy.Decision) policy.Decision {
	return policy.Decision{Entry: allowed.Entry, Endpoint: allowed.Endpoint, Rule: allowed.Rule, Reason: d.Reason, ReasonCode: d.Code}
}

func deny(code, format string, args ...any) *Denial {
	return &Denial{Code: code, Reason: fmt.Sprintf(format, args...)}
}

// Config is what a Holder needs.
type Config struct {
	// DevAllowLoopback lets token fetches dial loopback addresses, as the
	// proxy's --dev-allow-loopback does for upstreams. Default false.
	DevAllowLoopback bool
	// RootCAs verify token servers (nil: the system's).
	RootCAs *x509.CertPool
	// Now is the clock tokens expire by and requests are signed at.
	// Default time.Now.
	Now func() time.Time
	// Logger, default slog.Default().
	Logger *slog.Logger
}

// Holder keeps the credentials a proxy holds and judges requests against
// them. Its zero value is not usable: New makes one, holding nothing.
type Holder struct {
	cfg    Config
	log    *slog.Logger
	client *http.Client // token fetches
	state  atomic.Pointer[state]
}

// state is one bundle as held.
type state struct {
	generation uint64
	providers  map[string]*entry
	secrets    []string // every secret value, for the agent's headers
}

// entry is one provider and its fetched token.
type entry struct {
	p      provider.Provider
	digest [sha256.Size]byte // of p's spec and secret: what the token was fetched with
	tokens tokenCache
}

// digestOf is the SHA-256 of p's whole spec (type, hosts, settings) and
// secret: a token fetched for one provider is kept only for the same
// digest (a provider deleted and created again restarts at revision 1).
func digestOf(p provider.Provider) [sha256.Size]byte {
	b, _ := json.Marshal(struct { // maps marshal in key order
		Spec   provider.Spec
		Secret map[string]string
	}{p.Spec, p.Secret})
	return sha256.Sum256(b)
}

// New makes a holder that holds nothing until SetCredentials.
func New(cfg Config) *Holder {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	h := &Holder{cfg: cfg, log: cfg.Logger.With("component", "credentials")}
	h.client = tokenClient(cfg)
	return h
}

// SetCredentials replaces what h holds with b (nil, or no providers:
// nothing). A provider whose spec and secret are unchanged (digestOf)
// keeps the token fetched for it; any other's is dropped.
func (h *Holder) SetCredentials(b *provider.Bundle) {
	old := h.state.Load()
	if b == nil || len(b.Providers) == 0 {
		var gen uint64
		if b != nil {
			gen = b.Generation
		}
		h.state.Store(&state{generation: gen})
		return
	}
	s := &state{generation: b.Generation, providers: make(map[string]*entry, len(b.Providers))}
	for _, p := range b.Providers {
		e := &entry{p: p, digest: digestOf(p)}
		if prev, ok := old.provider(p.Name); ok && prev.digest == e.digest {
			e.tokens = prev.tokens
		} else {
			e.tokens = newTokenCache()
		}
		s.providers[p.Name] = e
		s.addSecrets(p)
	}
	h.state.Store(s)
	h.log.Info("credentials held", "generation", b.Generation, "providers", len(b.Providers))
}

// provider is the entry s holds for name (s may be nil).
func (s *state) provider(name string) (*entry, bool) {
	if s == nil {
		return nil, false
	}
	e, ok := s.providers[name]
	return e, ok
}

func (s *state) addSecrets(p provider.Provider) {
	for _, v := range p.Secret {
		if len(v) >= MinSearchedSecret {
			s.secrets = append(s.secrets, v)
		}
	}
}

// Generation returns the generation of the bundle held, false when none
// was ever set.
func (h *Holder) Generation() (uint64, bool) {
	s := h.state.Load()
	if s == nil {
		return 0, false
	}
	return s.generation, true
}

// Request is what Check judges besides the HTTP request itself.
type Request struct {
	// Host and Port are the destination (the judged one).
	Host string
	Port int
	// TLS: the request goes upstream over TLS (https); else plain HTTP,
	// which takes a credential only to a provider host written http://.
	TLS bool
	// Endpoint is the endpoint that allowed the request (nil: none).
	Endpoint *policy.Endpoint
	// Body is the body the proxy read already (an MCP POST's), nil if
	// none.
	Body []byte
	// Held: the request is held for review and its body is read (at
	// most policy.MaxReviewedArguments) to be shown.
	Held bool
}

// Check judges r, an inspected request the policy allows, before its
// allow is recorded (w is where its answer goes: a body is read with
// h1.ReadBody's bounds on time). It returns what to do to the forwarded
// request (nil when nothing), and the body read to judge it (in.Body, or
// what Check read: to be forwarded in place of r's, nil when none was
// read); or the denial. Nothing Check returns in a Denial holds a secret.
func (h *Holder) Check(ctx context.Context, w http.ResponseWriter, r *http.Request, in Request) (*Plan, []byte, *Denial) {
	s := h.state.Load()
	var e *entry
	bound := ""
	if in.Endpoint != nil && in.Endpoint.CredentialBinding != nil {
		bound = in.Endpoint.CredentialBinding.Provider
		if s != nil {
			e = s.providers[bound]
		}
		if e == nil {
			return nil, nil, deny(CodeUnavailable, "provider %s is not attached to this sandbox or not delivered yet", bound)
		}
		if !provider.Covers(e.p.Hosts, in.Host, in.Port, in.TLS) {
			if !in.TLS && provider.Covers(e.p.Hosts, in.Host, in.Port, true) {
				return nil, nil, deny(CodeUnavailable, "provider %s's credential goes only over TLS to %s, and this request is plain HTTP", bound, hostPort(in.Host, in.Port))
			}
			return nil, nil, deny(CodeUnavailable, "provider %s does not cover %s", bound, hostPort(in.Host, in.Port))
		}
	}
	if d := s.checkHeaders(r, bound, e); d != nil {
		return nil, nil, d
	}
	if d := checkTarget(r, bound); d != nil {
		return nil, nil, d
	}
	body, d := readBody(w, r, in, e)
	if d != nil {
		return nil, nil, d
	}
	if provider.IndexPlaceholder(body) >= 0 {
		if d := checkPlaceholders("the request body", string(body), bound); d != nil {
			return nil, nil, d
		}
	}
	if e == nil {
		return nil, body, nil
	}
	plan, d := h.plan(ctx, r, in, e, body)
	if d != nil {
		return nil, nil, d
	}
	return plan, body, nil
}

// Recheck judges again, with what h holds now, a request Check allowed
// (in as Check had it) that was then held for review: a provider may have
// been rotated or detached, a token may have expired. body is the body
// read (nil: none). It returns the plan to forward with, or the denial's
// code (never empty) and reason.
func (h *Holder) Recheck(ctx context.Context, r *http.Request, in Request, body []byte) (plan *Plan, code, reason string) {
	if in.Body = body; body == nil {
		in.Body = []byte{} // r's body is read already: nothing more to read
	}
	plan, _, d := h.Check(ctx, nil, r, in)
	if d != nil {
		return nil, cmp.Or(d.Code, CodeUnavailable), d.Reason
	}
	return plan, "", ""
}

// readBody reads what must be read to judge or rewrite the request: a
// held call's body, a rewritten one, a signed one.
func readBody(w http.ResponseWriter, r *http.Request, in Request, e *entry) ([]byte, *Denial) {
	if in.Body != nil {
		return in.Body, nil
	}
	limit, what := 0, ""
	if in.Held {
		limit = policy.MaxReviewedArguments
	}
	if e != nil && in.Endpoint.RequestBodyCredentialRewrite && in.Endpoint.Protocol == policy.ProtocolREST && MaxRewriteBody > limit {
		limit, what = MaxRewriteBody, "request_body_credential_rewrite"
	}
	if e != nil && e.p.Type == provider.TypeAWS && signsBody(in.Endpoint.CredentialSigning, r) && MaxSignedBody > limit {
		limit, what = MaxSignedBody, "credential_signing "+in.Endpoint.CredentialSigning
	}
	if limit == 0 {
		return nil, nil
	}
	body, err := h1.ReadBody(w, r, limit)
	if err != nil {
		return nil, &Denial{Reason: err.Error()} // the body's own fault: no credential code
	}
	if len(body) > limit && what != "" {
		return nil, deny(CodeUnavailable, "request body over %d bytes, the bound of %s", limit, what)
	}
	return body, nil
}
