package gateway

import (
	"context"
	"slices"

	"google.golang.org/protobuf/types/known/timestamppb"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/provider"
	"github.com/portcullis-dev/portcullis/store"
)

// ProviderService and SandboxService's Attach/DetachProvider: thin
// handlers over lifecycle, which checks, seals and stores. No answer
// ever holds a secret's value, sealed or not: a provider answers with
// its secret's field names.

type providerService struct{ *Server }

func providerToProto(p store.Provider) *portcullisv1.Provider {
	out := &portcullisv1.Provider{
		Name: p.Name, Type: p.Type, Hosts: slices.Clone(p.Hosts), Settings: p.Settings,
		SecretFields: slices.Clone(p.SecretFields), Revision: uint64(p.Revision),
		CreatedAt: timestamppb.New(p.CreatedAt), CreatedBy: p.CreatedBy, RotatedBy: p.RotatedBy,
		Sandboxes: slices.Clone(p.Sandboxes),
	}
	if p.RotatedAt != nil {
		out.RotatedAt = timestamppb.New(*p.RotatedAt)
	}
	return out
}

// CreateProvider checks and stores a provider (InvalidArgument naming
// each problem's field, AlreadyExists).
func (s providerService) CreateProvider(ctx context.Context, req *portcullisv1.CreateProviderRequest) (*portcullisv1.Provider, error) {
	p := mustPrincipal(ctx)
	spec := provider.Spec{Name: req.GetName(), Type: req.GetType(), Hosts: req.GetHosts(), Settings: req.GetSettings()}
	out, err := s.life.CreateProvider(ctx, spec, req.GetSecret(), p.Actor())
	if err != nil {
		return nil, exists(err, "provider %q already exists", req.GetName())
	}
	return providerToProto(out), nil
}

// GetProvider returns one provider (NotFound).
func (s providerService) GetProvider(ctx context.Context, req *portcullisv1.GetProviderRequest) (*portcullisv1.Provider, error) {
	out, err := s.store.GetProvider(ctx, req.GetName())
	if err != nil {
		return nil, missing(err, "provider %q not found", req.GetName())
	}
	return providerToProto(out), nil
}

// ListProviders returns every provider, by name.
func (s providerService) ListProviders(ctx context.Context, _ *portcullisv1.ListProvidersRequest) (*portcullisv1.ListProvidersResponse, error) {
	ps, err := s.store.ListProviders(ctx)
	if err != nil {
		return nil, err
	}
	out := &portcullisv1.ListProvidersResponse{Providers: make([]*portcullisv1.Provider, 0, len(ps))}
	for _, p := range ps {
		out.Providers = append(out.Providers, providerToProto(p))
	}
	return out, nil
}

// RotateProvider replaces a provider's secret (FailedPrecondition when
// expect_revision is stale).
func (s providerService) RotateProvider(ctx context.Context, req *portcullisv1.RotateProviderRequest) (*portcullisv1.Provider, error) {
	p := mustPrincipal(ctx)
	out, err := s.life.RotateProvider(ctx, req.GetName(), req.GetSecret(), int64(req.GetExpectRevision()), p.Actor())
	if err != nil {
		return nil, err
	}
	return providerToProto(out), nil
}

// DeleteProvider deletes a provider attached to no sandbox.
func (s providerService) DeleteProvider(ctx context.Context, req *portcullisv1.DeleteProviderRequest) (*portcullisv1.DeleteProviderResponse, error) {
	p := mustPrincipal(ctx)
	if err := s.life.DeleteProvider(ctx, req.GetName(), p.Actor()); err != nil {
		return nil, err
	}
	return &portcullisv1.DeleteProviderResponse{}, nil
}

// AttachProvider lets the sandbox's proxies hold the provider's secret.
func (s sandboxService) AttachProvider(ctx context.Context, req *portcullisv1.AttachProviderRequest) (*portcullisv1.Sandbox, error) {
	p := mustPrincipal(ctx)
	sb, err := s.life.AttachProvider(ctx, req.GetSandbox(), req.GetProvider(), p.Actor())
	if err != nil {
		return nil, err
	}
	return sandboxToProto(sb)
}

// DetachProvider takes the provider away from the sandbox's proxies.
func (s sandboxService) DetachProvider(ctx context.Context, req *portcullisv1.DetachProviderRequest) (*portcullisv1.Sandbox, error) {
	p := mustPrincipal(ctx)
	sb, err := s.life.DetachProvider(ctx, req.GetSandbox(), req.GetProvider(), p.Actor())
	if err != nil {
		return nil, err
	}
	return sandboxToProto(sb)
}
