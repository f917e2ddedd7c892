package gateway

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect/v2"

	"github.com/portcullis-dev/portcullis/gateway/transport"
	"github.com/portcullis-dev/portcullis/lifecycle"
	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
	"github.com/portcullis-dev/portcullis/store"
)

// tokenPrefix marks Portcullis tokens so they are easy to spot in logs and
// secret scanners.
const tokenPrefix = "pcs_"

// newToken returns a fresh random token and its stored hash.
func newToken() (token, hash string, err error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", fmt.Errorf("generate token: %w", err)
	}
	token = tokenPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	return token, hashToken(token), nil
}

// hashToken is the only form in which tokens are stored.
func hashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// Principal is the authenticated caller of an RPC.
type Principal struct {
	TokenID int64
	Name    string
	Role    string
	// Sandbox is set for sandbox-role tokens: the one sandbox they may touch.
	Sandbox string
	// Sandboxes limits a sentry token to the sandboxes its watchdog
	// watches (name globs; none: every sandbox).
	Sandboxes []string
	// tokenHash finds the token again, for long streams that re-check it.
	tokenHash string
}

// Actor is how the principal appears in the audit log.
func (p Principal) Actor() string {
	if p.Role == store.RoleSandbox {
		return "sandbox:" + p.Sandbox
	}
	return p.Name
}

type principalKey struct{}

func principalFrom(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}

// rule is one row of the authorization table.
type rule struct {
	// public RPCs need no token (health, reflection).
	public bool
	roles  []string
	// scoped: a sandbox-role caller must name its own sandbox in the
	// request (the message's `sandbox` field).
	scoped bool
	// action is what the RPC does, in words that finish "a sandbox token
	// cannot …": permission errors name it instead of the RPC's path.
	action string
}

// to is r for the RPC that does action.
func (r rule) to(action string) rule {
	r.action = action
	return r
}

// denied is the permission error for a caller whose role r does not
// allow: "a sandbox token cannot approve proposals: that takes an admin
// or operator token".
func (r rule) denied(role string) error {
	msg := tokenOf(role) + " cannot " + r.action
	if len(r.roles) > 0 {
		roles := strings.Join(r.roles, ", ")
		if i := strings.LastIndex(roles, ", "); i >= 0 {
			roles = roles[:i] + " or " + roles[i+2:]
		}
		msg += ": that takes " + tokenOf(roles)
	}
	return connect.NewError(connect.CodePermissionDenied, msg)
}

// tokenOf is "an admin token", "a sandbox token".
func tokenOf(role string) string {
	if role != "" && strings.ContainsRune("aeiou", rune(role[0])) {
		return "an " + role + " token"
	}
	return "a " + role + " token"
}

func (r rule) allows(role string) bool {
	for _, allowed := range r.roles {
		if allowed == role {
			return true
		}
	}
	return false
}

// A sentry token is allowed two rows, the intake's (sentryOnly): it writes
// its own source's events (gateway/sentryintake refuses any other source)
// and reads nothing. Every other row refuses it.
var (
	adminOnly = rule{roles: []string{store.RoleAdmin}}
	readers   = rule{roles: []string{store.RoleAdmin, store.RoleOperator}}
	// ownPolicyReaders: operators read every sandbox, a sandbox its own.
	ownPolicyReaders = rule{roles: []string{store.RoleAdmin, store.RoleOperator, store.RoleSandbox}, scoped: true}
	anyRole          = rule{roles: []string{store.RoleAdmin, store.RoleOperator, store.RoleSandbox}}
	// proxyOnly: what a sandbox's proxy does with the sandbox token.
	proxyOnly = rule{roles: []string{store.RoleSandbox}}
	// sandboxOnly: the advisor, which serves the token's own sandbox
	// only (no request names a sandbox).
	sandboxOnly = rule{roles: []string{store.RoleSandbox}}
	public      = rule{public: true}
	// sentryOnly: a watchdog's intake.
	sentryOnly = rule{roles: []string{store.RoleSentry}}
)

// authzTable is the authorization policy of the gateway: one row per RPC,
// each saying who may call it and, in words, what it does. A procedure
// without a row is refused (the server will not even start with one
// registered), so a new RPC cannot ship unprotected by accident.
var authzTable = map[string]rule{
	portcullisv1connect.SandboxServiceCreateSandboxProcedure:        adminOnly.to("create sandboxes"),
	portcullisv1connect.SandboxServiceGetSandboxProcedure:           readers.to("read sandboxes"),
	portcullisv1connect.SandboxServiceListSandboxesProcedure:        readers.to("list sandboxes"),
	portcullisv1connect.SandboxServiceDeleteSandboxProcedure:        adminOnly.to("delete sandboxes"),
	portcullisv1connect.SandboxServiceRotateSandboxTokenProcedure:   adminOnly.to("rotate sandbox tokens"),
	portcullisv1connect.SandboxServiceGetSandboxCAProcedure:         readers.to("read a sandbox's CA"),
	portcullisv1connect.SandboxServiceSetSandboxBoundaryProcedure:   adminOnly.to("set a sandbox's boundary"),
	portcullisv1connect.SandboxServiceSetCredentialedHostsProcedure: adminOnly.to("set a sandbox's credentialed hosts"),
	portcullisv1connect.SandboxServiceAttachProviderProcedure:       adminOnly.to("attach a credential provider to a sandbox"),
	portcullisv1connect.SandboxServiceDetachProviderProcedure:       adminOnly.to("detach a credential provider from a sandbox"),
	// Credential providers: admins keep secrets; operators see what is
	// kept (never a secret's value: no answer has one).
	portcullisv1connect.ProviderServiceCreateProviderProcedure: adminOnly.to("create credential providers"),
	portcullisv1connect.ProviderServiceRotateProviderProcedure: adminOnly.to("rotate credential providers"),
	portcullisv1connect.ProviderServiceDeleteProviderProcedure: adminOnly.to("delete credential providers"),
	portcullisv1connect.ProviderServiceGetProviderProcedure:    readers.to("read credential providers"),
	portcullisv1connect.ProviderServiceListProvidersProcedure:  readers.to("list credential providers"),
	// Freezing only ever narrows: an operator may pull the kill switch.
	// Unfreezing widens again, so it is an admin's.
	portcullisv1connect.SandboxServiceFreezeSandboxProcedure:   readers.to("freeze sandboxes"),
	portcullisv1connect.SandboxServiceUnfreezeSandboxProcedure: adminOnly.to("unfreeze sandboxes"),
	portcullisv1connect.SandboxServiceListToolsProcedure:       readers.to("list a sandbox's MCP tools"),

	portcullisv1connect.TokenServiceCreateTokenProcedure: adminOnly.to("create tokens"),
	portcullisv1connect.TokenServiceListTokensProcedure:  adminOnly.to("list tokens"),
	portcullisv1connect.TokenServiceRevokeTokenProcedure: adminOnly.to("revoke tokens"),

	portcullisv1connect.PolicyServiceSetPolicyProcedure:          adminOnly.to("set policies"),
	portcullisv1connect.PolicyServiceRollbackPolicyProcedure:     adminOnly.to("roll back policies"),
	portcullisv1connect.PolicyServiceGetPolicyProcedure:          ownPolicyReaders.to("read policies"),
	portcullisv1connect.PolicyServiceListPolicyVersionsProcedure: ownPolicyReaders.to("list policy versions"),
	portcullisv1connect.PolicyServiceDiffPolicyProcedure:         ownPolicyReaders.to("diff policy versions"),
	portcullisv1connect.PolicyServiceValidatePolicyProcedure:     anyRole.to("validate policies"),

	// The stream serves the token's own sandbox, whatever else the
	// messages say (the hello must name it).
	portcullisv1connect.DistributionServiceStreamPolicyProcedure:  proxyOnly.to("follow a sandbox's policy as its proxy"),
	portcullisv1connect.DistributionServiceShipDecisionsProcedure: proxyOnly.to("ship decision records as a proxy"),
	portcullisv1connect.DistributionServiceHoldCallProcedure:      proxyOnly.to("hold a call for review as a proxy"),
	portcullisv1connect.ProxyServiceListProxiesProcedure:          readers.to("list proxies"),
	portcullisv1connect.ProxyServiceWatchEnforcementProcedure:     readers.to("watch policy enforcement"),
	// The public keys proxies pin: no secret, but not for watchdogs.
	portcullisv1connect.ProxyServiceListSigningKeysProcedure:  anyRole.to("list the gateway's signing keys"),
	portcullisv1connect.DecisionServiceListDecisionsProcedure: ownPolicyReaders.to("read decision logs"),
	portcullisv1connect.DecisionServiceTailDecisionsProcedure: ownPolicyReaders.to("tail decision logs"),

	// The sandbox may propose, never approve: the advisor is for sandbox
	// tokens alone, and every call is scoped to the token's sandbox.
	portcullisv1connect.AdvisorServiceSubmitProposalProcedure:   sandboxOnly.to("submit proposals (only a sandbox's own token proposes)"),
	portcullisv1connect.AdvisorServiceGetProposalProcedure:      sandboxOnly.to("read proposals as a sandbox"),
	portcullisv1connect.AdvisorServiceListProposalsProcedure:    sandboxOnly.to("list proposals as a sandbox"),
	portcullisv1connect.AdvisorServiceWatchProposalProcedure:    sandboxOnly.to("watch proposals as a sandbox"),
	portcullisv1connect.AdvisorServiceWithdrawProposalProcedure: sandboxOnly.to("withdraw proposals (only the proposing sandbox may)"),
	portcullisv1connect.AdvisorServiceListDenialsProcedure:      sandboxOnly.to("list denials as a sandbox"),
	portcullisv1connect.ProverServiceProveProcedure:             anyRole.to("prove policy changes"),
	portcullisv1connect.AuditServiceListAuditProcedure:          readers.to("read the audit log"),
	portcullisv1connect.AuditServiceVerifyAuditProcedure:        readers.to("verify the audit log"),

	// Approval is for people (or their rules), outside the sandbox.
	portcullisv1connect.ApprovalServiceListProposalsProcedure:     readers.to("review proposals"),
	portcullisv1connect.ApprovalServiceGetProposalProcedure:       readers.to("review proposals"),
	portcullisv1connect.ApprovalServiceApproveProposalProcedure:   readers.to("approve proposals"),
	portcullisv1connect.ApprovalServiceRejectProposalProcedure:    readers.to("reject proposals"),
	portcullisv1connect.ApprovalServiceGetApprovalPolicyProcedure: readers.to("read the approval policy"),
	portcullisv1connect.ApprovalServiceSetApprovalPolicyProcedure: adminOnly.to("set the approval policy"),

	// Watchdogs write their own source's events; operators read them and
	// decide held quarantines; keys are an admin's.
	portcullisv1connect.SentryServiceIngestEventsProcedure:    sentryOnly.to("send Sentry events"),
	portcullisv1connect.SentryServicePublishEventsProcedure:   sentryOnly.to("send Sentry events"),
	portcullisv1connect.SentryServiceListEventsProcedure:      readers.to("read Sentry events"),
	portcullisv1connect.SentryServiceListGapsProcedure:        readers.to("read Sentry gaps"),
	portcullisv1connect.SentryServiceListActionsProcedure:     readers.to("read Sentry actions"),
	portcullisv1connect.SentryServiceTimelineProcedure:        readers.to("read Sentry timelines"),
	portcullisv1connect.SentryServiceDecideActionProcedure:    readers.to("decide Sentry actions"),
	portcullisv1connect.SentryServiceSetSourceKeyProcedure:    adminOnly.to("set Sentry source keys"),
	portcullisv1connect.SentryServiceDeleteSourceKeyProcedure: adminOnly.to("delete Sentry source keys"),

	// Held calls are decided by people (the approval rules, input.kind
	// "call", say which), never by a sandbox: a proxy only files them
	// (DistributionService.HoldCall).
	portcullisv1connect.CallServiceListCallsProcedure:   readers.to("list held calls"),
	portcullisv1connect.CallServiceGetCallProcedure:     readers.to("read held calls"),
	portcullisv1connect.CallServiceApproveCallProcedure: readers.to("approve held calls"),
	portcullisv1connect.CallServiceDenyCallProcedure:    readers.to("deny held calls"),
	portcullisv1connect.CallServiceWatchCallsProcedure:  readers.to("watch held calls"),

	transport.HealthCheckProcedure: public,
	transport.HealthWatchProcedure: public,
	reflectionV1Procedure:          public,
	reflectionV1AlphaProcedure:     public,
}

const (
	reflectionV1Procedure      = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"
	reflectionV1AlphaProcedure = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
)

var (
	errNoToken      = connect.NewError(connect.CodeUnauthenticated, "missing bearer token")
	errBadToken     = connect.NewError(connect.CodeUnauthenticated, "invalid token")
	errRevokedToken = connect.NewError(connect.CodeUnauthenticated, "token revoked")
)

// expiredToken refuses a token past its expiry, saying when it expired.
func expiredToken(t store.Token) error {
	return connect.NewError(connect.CodeUnauthenticated, "token expired at "+t.ExpiresAt.UTC().Format(time.RFC3339))
}

// authenticator resolves bearer tokens to principals.
type authenticator struct {
	store store.Reader
	// life records tokens' last use.
	life *lifecycle.Lifecycle
	now  func() time.Time

	mu sync.Mutex
	// touched throttles last-used writes to one per token per minute.
	touched map[int64]time.Time
}

func newAuthenticator(st store.Reader, life *lifecycle.Lifecycle, now func() time.Time) *authenticator {
	return &authenticator{store: st, life: life, now: now, touched: make(map[int64]time.Time)}
}

// bearer extracts the token from an Authorization header value.
func bearer(header string) (string, bool) {
	const scheme = "bearer "
	if len(header) <= len(scheme) || !strings.EqualFold(header[:len(scheme)], scheme) {
		return "", false
	}
	tok := strings.TrimSpace(header[len(scheme):])
	return tok, tok != ""
}

// authenticate checks a bearer token and returns its principal.
func (a *authenticator) authenticate(ctx context.Context, header string) (Principal, error) {
	tok, ok := bearer(header)
	if !ok {
		return Principal{}, errNoToken
	}
	// Looked up by its SHA-256, never compared as a secret: nothing about
	// the stored hashes can be learnt from timing.
	t, err := a.store.TokenByHash(ctx, hashToken(tok))
	if errors.Is(err, store.ErrNotFound) {
		return Principal{}, errBadToken
	}
	if err != nil {
		return Principal{}, fmt.Errorf("look up token: %w", err)
	}
	if t.RevokedAt != nil {
		return Principal{}, errRevokedToken
	}
	if t.Expired(a.now()) {
		return Principal{}, expiredToken(t)
	}
	a.touch(ctx, t.ID)
	return Principal{TokenID: t.ID, Name: t.Name, Role: t.Role, Sandbox: t.Sandbox, Sandboxes: t.Sandboxes, tokenHash: t.Hash}, nil
}

func (a *authenticator) touch(ctx context.Context, id int64) {
	now := a.now()
	a.mu.Lock()
	last, seen := a.touched[id]
	if seen && now.Sub(last) < time.Minute {
		a.mu.Unlock()
		return
	}
	a.touched[id] = now
	a.mu.Unlock()
	// Last-used is bookkeeping: a failure must not fail the request.
	_ = a.life.TouchToken(ctx, id, now)
}

// authorize is the server interceptor that enforces authzTable on every
// RPC, before the handler runs and before a request message is decoded.
func (a *authenticator) authorize(next connect.ServerFunc) connect.ServerFunc {
	return func(ctx context.Context, spec connect.Spec, stream connect.ServerStream) error {
		r, ok := authzTable[spec.Procedure]
		if !ok {
			return connect.NewError(connect.CodePermissionDenied, "procedure not in the authorization table")
		}
		if r.public {
			return next(ctx, spec, stream)
		}
		info, ok := connect.CallInfoForServerContext(ctx)
		if !ok {
			return errNoToken
		}
		// The bearer token, or the console's session cookie with its CSRF
		// header (session.go).
		authenticate := func() (Principal, error) { return a.authenticateCall(ctx, info.RequestHeader()) }
		var p Principal
		var err error
		if spec.StreamType == connect.StreamTypeUnary {
			p, err = authenticate()
		} else {
			// A stream's goroutine lives as long as the stream: keep the
			// store's deep calls off its stack (see transport.OffStack).
			p, err = transport.OffStack(authenticate)
		}
		if err != nil {
			return err
		}
		if !r.allows(p.Role) {
			return r.denied(p.Role)
		}
		ctx = context.WithValue(ctx, principalKey{}, p)
		checked := &checkedStream{ServerStream: stream}
		if r.scoped && p.Role == store.RoleSandbox {
			checked.ownSandbox = p.Sandbox
		}
		return next(ctx, spec, checked)
	}
}

// checkedStream checks every request message as it is decoded: the names
// it carries are well formed (validateNames), and a sandbox-scoped caller
// names its own sandbox.
type checkedStream struct {
	connect.ServerStream
	// ownSandbox, when set, is the only sandbox the request may name.
	ownSandbox string
}

func (s *checkedStream) Receive(msg any) error {
	if err := s.ServerStream.Receive(msg); err != nil {
		return err
	}
	return checkRequest(msg, s.ownSandbox)
}

// checkRequest checks a decoded request message: a sandbox-scoped caller
// (ownSandbox set) names its own sandbox, and the names are well formed.
func checkRequest(msg any, ownSandbox string) error {
	if ownSandbox != "" {
		m, ok := msg.(interface{ GetSandbox() string })
		if !ok || m.GetSandbox() != ownSandbox {
			return connect.NewError(connect.CodePermissionDenied, "a sandbox token may only read its own sandbox")
		}
	}
	return validateNames(msg)
}
