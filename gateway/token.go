package gateway

import (
	"context"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portcullis-dev/portcullis/lifecycle"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/store"
)

type tokenService struct{ *Server }

func (s tokenService) CreateToken(ctx context.Context, req *portcullisv1.CreateTokenRequest) (*portcullisv1.CreateTokenResponse, error) {
	p := mustPrincipal(ctx)
	switch req.GetRole() {
	case store.RoleAdmin, store.RoleOperator:
	case store.RoleSentry:
		// The name is the one event source the token may write: refuse
		// here, as the field it is, what the store would refuse anyway.
		if err := checkSentrySource("name", req.GetName()); err != nil {
			return nil, err
		}
		if err := store.CheckSandboxGlobs(req.GetSandboxes()); err != nil {
			return nil, invalidField("sandboxes", "%v", err)
		}
	case store.RoleSandbox:
		return nil, invalidField("role", "sandbox tokens are issued by `sandbox create` and `sandbox rotate-token`")
	default:
		return nil, invalidField("role", "must be admin, operator or sentry, not %q", req.GetRole())
	}
	if len(req.GetSandboxes()) > 0 && req.GetRole() != store.RoleSentry {
		return nil, invalidField("sandboxes", "only a sentry token is limited to sandboxes, not a %s token", req.GetRole())
	}
	res, t, err := createToken(ctx, s.life, req, s.cfg.Now(), p.Actor())
	if err != nil {
		return nil, err
	}
	s.log.InfoContext(ctx, "token created", "token", t.Name, "role", t.Role, "sandboxes", t.Sandboxes, "expires_at", t.ExpiresAt, "actor", p.Actor())
	return res, nil
}

// createToken makes the token req asks for (checked by the caller but
// for its ttl), created by actor at now, through life: the API's and the
// break-glass's one way (BreakGlassToken).
func createToken(ctx context.Context, life *lifecycle.Lifecycle, req *portcullisv1.CreateTokenRequest, now time.Time, actor string) (*portcullisv1.CreateTokenResponse, store.Token, error) {
	var expires *time.Time
	if ttl := req.GetTtl(); ttl != nil {
		if ttl.CheckValid() != nil || ttl.AsDuration() <= 0 {
			return nil, store.Token{}, invalidField("ttl", "must be a positive duration, not %s", ttl.AsDuration())
		}
		at := now.Add(ttl.AsDuration()).UTC()
		expires = &at
	}
	token, hash, err := newToken()
	if err != nil {
		return nil, store.Token{}, err
	}
	t, err := life.CreateToken(ctx, store.Token{Name: req.GetName(), Role: req.GetRole(), Sandboxes: req.GetSandboxes(), Hash: hash, CreatedBy: actor, ExpiresAt: expires}, actor)
	if err != nil {
		return nil, store.Token{}, exists(err, "a token named %q exists (names are never reused, revoked tokens included)", req.GetName())
	}
	res := &portcullisv1.CreateTokenResponse{Name: t.Name, Token: token, Role: t.Role}
	if t.ExpiresAt != nil {
		res.ExpiresAt = timestamppb.New(*t.ExpiresAt)
	}
	return res, t, nil
}

func (s tokenService) ListTokens(ctx context.Context, _ *portcullisv1.ListTokensRequest) (*portcullisv1.ListTokensResponse, error) {
	list, err := s.store.ListTokens(ctx)
	if err != nil {
		return nil, err
	}
	res := &portcullisv1.ListTokensResponse{Tokens: make([]*portcullisv1.Token, 0, len(list))}
	for _, t := range list {
		pt := &portcullisv1.Token{
			Name:      t.Name,
			Role:      t.Role,
			Sandbox:   t.Sandbox,
			Sandboxes: t.Sandboxes,
			CreatedBy: t.CreatedBy,
			CreatedAt: timestamppb.New(t.CreatedAt),
		}
		if t.LastUsedAt != nil {
			pt.LastUsedAt = timestamppb.New(*t.LastUsedAt)
		}
		if t.RevokedAt != nil {
			pt.RevokedAt = timestamppb.New(*t.RevokedAt)
		}
		if t.ExpiresAt != nil {
			pt.ExpiresAt = timestamppb.New(*t.ExpiresAt)
		}
		res.Tokens = append(res.Tokens, pt)
	}
	return res, nil
}

func (s tokenService) RevokeToken(ctx context.Context, req *portcullisv1.RevokeTokenRequest) (*portcullisv1.RevokeTokenResponse, error) {
	p := mustPrincipal(ctx)
	if err := s.life.RevokeToken(ctx, req.GetName(), p.Actor()); err != nil {
		return nil, missing(err, "no live token named %q", req.GetName())
	}
	s.log.InfoContext(ctx, "token revoked", "token", req.GetName(), "actor", p.Actor())
	// A sandbox token's proxies on this replica reconnect now and meet the
	// revocation (other replicas re-check their streams' tokens each minute).
	if tokens, err := s.store.ListTokens(ctx); err == nil {
		for _, t := range tokens {
			if t.Name == req.GetName() && t.Sandbox != "" {
				s.dist.Goaway(t.Sandbox)
			}
		}
	}
	return &portcullisv1.RevokeTokenResponse{Name: req.GetName()}, nil
}
