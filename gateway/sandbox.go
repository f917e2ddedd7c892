package gateway

import (
	"context"
	"fmt"
	"regexp"

	"google.golang.org/protobuf/types/known/timestamppb"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/prover"
	"github.com/portcullis-dev/portcullis/store"
)

// Names are DNS-label shaped so they are safe in URLs, logs, SQL and
// Kubernetes objects. Token names may be longer: a sandbox's token is named
// "sandbox-NAME-xxxxxxxx".
var (
	sandboxNameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	tokenNameRE   = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,98}[a-z0-9])?$`)
)

func checkName(path, name string) error {
	if !sandboxNameRE.MatchString(name) {
		return invalidField(path, "must be 1-63 lower-case letters, digits or '-', starting and ending with a letter or digit")
	}
	return nil
}

func checkTokenName(path, name string) error {
	if !tokenNameRE.MatchString(name) {
		return invalidField(path, "must be 1-100 lower-case letters, digits or '-', starting and ending with a letter or digit")
	}
	return nil
}

// checkSentrySource checks a sentry token's name, which is the one event
// source it may write (a URI-reference, not a DNS label).
func checkSentrySource(path, name string) error {
	if err := store.CheckSentrySource(name); err != nil {
		return invalidField(path, "a sentry token's name is its event source: %v", err)
	}
	return nil
}

// validateNames checks the names a request carries before any handler or
// the store sees them, so a malformed name is InvalidArgument with its
// field on every engine, never a database error.
func validateNames(msg any) error {
	switch m := msg.(type) {
	case *portcullisv1.CreateTokenRequest:
		if m.GetRole() == store.RoleSentry {
			return checkSentrySource("name", m.GetName())
		}
		return checkTokenName("name", m.GetName())
	case *portcullisv1.RevokeTokenRequest:
		// The request does not say the role: a sentry token's name is a
		// source, which the DNS-label rule would refuse.
		err := checkTokenName("name", m.GetName())
		if err != nil && store.CheckSentrySource(m.GetName()) == nil {
			return nil
		}
		return err
	case *portcullisv1.ListProxiesRequest, *portcullisv1.ApprovalServiceListProposalsRequest, *portcullisv1.ListAuditRequest,
		*portcullisv1.ListSentryEventsRequest, *portcullisv1.ListSentryActionsRequest, *portcullisv1.ListCallsRequest:
		// An empty sandbox lists every sandbox's.
		sandbox := m.(interface{ GetSandbox() string }).GetSandbox()
		if sandbox == "" {
			return nil
		}
		return checkName("sandbox", sandbox)
	case *portcullisv1.CreateProviderRequest, *portcullisv1.GetProviderRequest, *portcullisv1.RotateProviderRequest,
		*portcullisv1.DeleteProviderRequest:
		// A provider's name is provider.Check's to judge (it may hold
		// '_'); one that cannot exist is not found.
		return nil
	case interface{ GetSandbox() string }:
		return checkName("sandbox", m.GetSandbox())
	case interface{ GetName() string }: // SandboxService requests name a sandbox
		return checkName("name", m.GetName())
	}
	return nil
}

type sandboxService struct{ *Server }

func (s sandboxService) CreateSandbox(ctx context.Context, req *portcullisv1.CreateSandboxRequest) (*portcullisv1.CreateSandboxResponse, error) {
	p := mustPrincipal(ctx)
	in := store.CreateSandbox{Name: req.GetName(), Actor: p.Actor()}
	var warnings []*portcullisv1.Problem
	if req.GetPolicy() != "" {
		doc, err := parseDocument(req.GetPolicy())
		if err != nil {
			return nil, err
		}
		warnings = problemsToProto(doc.warnings)
		in.Policy = &store.PolicyVersion{
			Version:  1,
			Hash:     doc.hash,
			Document: doc.canonical,
			Author:   p.Actor(),
			Source:   store.SourceCreate,
		}
	}
	token, hash, err := newToken()
	if err != nil {
		return nil, err
	}
	in.Token = sandboxToken(req.GetName(), hash, p)
	sb, err := s.life.CreateSandbox(ctx, in)
	if err != nil {
		return nil, exists(err, "sandbox %q already exists", req.GetName())
	}
	s.log.InfoContext(ctx, "sandbox created", "sandbox", sb.Name, "actor", p.Actor(), "version", sb.CurrentVersion)
	out, err := sandboxToProto(sb)
	if err != nil {
		return nil, err
	}
	res := &portcullisv1.CreateSandboxResponse{Name: sb.Name, Token: token, Sandbox: out, Warnings: warnings}
	if in.Policy != nil {
		v, err := s.store.GetPolicyVersion(ctx, sb.Name, 0)
		if err != nil {
			return nil, err
		}
		if res.PolicyVersion, err = versionToProto(v); err != nil {
			return nil, err
		}
	}
	return res, nil
}

func (s sandboxService) GetSandbox(ctx context.Context, req *portcullisv1.GetSandboxRequest) (*portcullisv1.Sandbox, error) {
	sb, err := s.store.GetSandbox(ctx, req.GetName())
	if err != nil {
		return nil, missing(err, "sandbox %q not found", req.GetName())
	}
	out, err := sandboxToProto(sb)
	if err != nil {
		return nil, err
	}
	if len(sb.Boundary) > 0 {
		if out.BoundaryYaml, err = documentYAML(sb.Boundary); err != nil {
			return nil, fmt.Errorf("boundary of %q: %w", sb.Name, err)
		}
	}
	return out, s.quarantineOf(ctx, sb, out)
}

func (s sandboxService) ListSandboxes(ctx context.Context, _ *portcullisv1.ListSandboxesRequest) (*portcullisv1.ListSandboxesResponse, error) {
	list, err := s.store.ListSandboxes(ctx)
	if err != nil {
		return nil, err
	}
	res := &portcullisv1.ListSandboxesResponse{Sandboxes: make([]*portcullisv1.Sandbox, 0, len(list))}
	for _, sb := range list {
		out, err := sandboxToProto(sb)
		if err != nil {
			return nil, err
		}
		if err := s.quarantineOf(ctx, sb, out); err != nil {
			return nil, err
		}
		res.Sandboxes = append(res.Sandboxes, out)
	}
	return res, nil
}

func (s sandboxService) DeleteSandbox(ctx context.Context, req *portcullisv1.DeleteSandboxRequest) (*portcullisv1.DeleteSandboxResponse, error) {
	p := mustPrincipal(ctx)
	if err := s.life.DeleteSandbox(ctx, req.GetName(), p.Actor()); err != nil {
		return nil, missing(err, "sandbox %q not found", req.GetName())
	}
	s.log.InfoContext(ctx, "sandbox deleted", "sandbox", req.GetName(), "actor", p.Actor())
	s.dist.Goaway(req.GetName())
	s.metrics.forgetSandbox(req.GetName())
	return &portcullisv1.DeleteSandboxResponse{Name: req.GetName()}, nil
}

func (s sandboxService) RotateSandboxToken(ctx context.Context, req *portcullisv1.RotateSandboxTokenRequest) (*portcullisv1.RotateSandboxTokenResponse, error) {
	p := mustPrincipal(ctx)
	token, hash, err := newToken()
	if err != nil {
		return nil, err
	}
	if _, err := s.life.RotateSandboxToken(ctx, req.GetName(), p.Actor(), sandboxToken(req.GetName(), hash, p)); err != nil {
		return nil, missing(err, "sandbox %q not found", req.GetName())
	}
	s.log.InfoContext(ctx, "sandbox token rotated", "sandbox", req.GetName(), "actor", p.Actor())
	// The proxies streaming with the old token reconnect and must show
	// the new one (other replicas re-check tokens within a minute).
	s.dist.Goaway(req.GetName())
	return &portcullisv1.RotateSandboxTokenResponse{Name: req.GetName(), Token: token}, nil
}

// sandboxToken describes a sandbox's token. Token names are unique forever
// (revoked ones included), so each carries a short suffix of its hash:
// rotation and re-creating a deleted sandbox never collide.
func sandboxToken(sandbox, hash string, creator Principal) store.Token {
	return store.Token{
		Name:      "sandbox-" + sandbox + "-" + hash[:8],
		Role:      store.RoleSandbox,
		Sandbox:   sandbox,
		Hash:      hash,
		CreatedBy: creator.Actor(),
	}
}

func (s sandboxService) SetSandboxBoundary(ctx context.Context, req *portcullisv1.SetSandboxBoundaryRequest) (*portcullisv1.Sandbox, error) {
	p := mustPrincipal(ctx)
	var canonical []byte
	var hash string
	if req.GetDocument() != "" {
		doc, err := parseDocument(req.GetDocument())
		if err != nil {
			return nil, err
		}
		canonical, hash = doc.canonical, doc.hash
	}
	// The pending proposals are re-proved against it (lifecycle).
	sb, err := s.life.SetSandboxBoundary(ctx, req.GetName(), canonical, hash, p.Actor())
	if err != nil {
		return nil, missing(err, "sandbox %q not found", req.GetName())
	}
	s.log.InfoContext(ctx, "sandbox boundary set", "sandbox", sb.Name, "hash", hash, "actor", p.Actor())
	return sandboxToProto(sb)
}

func (s sandboxService) SetCredentialedHosts(ctx context.Context, req *portcullisv1.SetCredentialedHostsRequest) (*portcullisv1.Sandbox, error) {
	p := mustPrincipal(ctx)
	if len(req.GetAdd())+len(req.GetRemove()) == 0 {
		return nil, invalidField("add", "name at least one HOST:PORT to add or remove")
	}
	norm := func(field string, list []string) ([]string, error) {
		out := make([]string, 0, len(list))
		for i, hp := range list {
			dest, err := prover.ParseHostPort(hp)
			if err != nil {
				return nil, invalidField(fmt.Sprintf("%s[%d]", field, i), "%v", err)
			}
			out = append(out, dest.String())
		}
		return out, nil
	}
	add, err := norm("add", req.GetAdd())
	if err != nil {
		return nil, err
	}
	remove, err := norm("remove", req.GetRemove())
	if err != nil {
		return nil, err
	}
	// The pending proposals are re-proved with them (lifecycle).
	sb, err := s.life.UpdateCredentialedHosts(ctx, req.GetName(), add, remove, p.Actor())
	if err != nil {
		return nil, missing(err, "sandbox %q not found", req.GetName())
	}
	s.log.InfoContext(ctx, "sandbox credentialed hosts set", "sandbox", sb.Name, "hosts", sb.CredentialedHosts, "actor", p.Actor())
	return sandboxToProto(sb)
}

// GetSandboxCA returns the sandbox CA's certificate, creating the CA on
// first use.
func (s sandboxService) GetSandboxCA(ctx context.Context, req *portcullisv1.GetSandboxCARequest) (*portcullisv1.GetSandboxCAResponse, error) {
	ca, err := s.dist.SandboxCA(ctx, req.GetName())
	if err != nil {
		return nil, err
	}
	return &portcullisv1.GetSandboxCAResponse{CertPem: string(ca.GetCertPem())}, nil
}

func sandboxToProto(sb store.Sandbox) (*portcullisv1.Sandbox, error) {
	out := &portcullisv1.Sandbox{
		Name:                  sb.Name,
		CurrentVersion:        uint32(sb.CurrentVersion),
		CurrentHash:           sb.CurrentHash,
		CreatedAt:             timestamppb.New(sb.CreatedAt),
		CreatedBy:             sb.CreatedBy,
		BoundaryHash:          sb.BoundaryHash,
		CredentialedHosts:     sb.CredentialedHosts,
		Frozen:                sb.Frozen,
		FrozenReason:          sb.FrozenReason,
		FrozenBy:              sb.FrozenBy,
		Providers:             sb.Providers,
		CredentialsGeneration: uint64(sb.CredentialsGeneration),
	}
	if sb.FrozenAt != nil {
		out.FrozenAt = timestamppb.New(*sb.FrozenAt)
	}
	if len(sb.Boundary) > 0 {
		st, err := documentStruct(sb.Boundary)
		if err != nil {
			return nil, fmt.Errorf("boundary of %q: %w", sb.Name, err)
		}
		out.Boundary = st
	}
	return out, nil
}
