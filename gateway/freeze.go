package gateway

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/portcullis-dev/portcullis/policy"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/store"
)

// The kill switch and the clocks: freezing commits a deny-all version
// (the sandbox's fixed sections kept, every network entry gone) and
// refuses proposals until an admin unfreezes, which restores the version
// before the freeze as a new version. Pending proposals expire after
// their TTL, and grants with an end are removed by a clean-up version
// when it passes (the proxies already stop honouring them on their own
// clock).

func (s sandboxService) FreezeSandbox(ctx context.Context, req *portcullisv1.FreezeSandboxRequest) (*portcullisv1.Sandbox, error) {
	p := mustPrincipal(ctx)
	if err := checkReason(req.GetReason()); err != nil {
		return nil, err
	}
	cur, err := policyService(s).version(ctx, req.GetName(), 0)
	if err != nil {
		return nil, err
	}
	pol, _, err := policy.Parse(cur.Document)
	if err != nil {
		return nil, fmt.Errorf("stored version %d of %q no longer parses: %v", cur.Version, req.GetName(), err)
	}
	denyAll := pol.Clone()
	denyAll.NetworkPolicies = nil
	denyAll.NetworkMiddlewares = nil
	denyAll = denyAll.Canonical()
	sb, v, err := s.store.FreezeSandbox(ctx, req.GetName(), req.GetReason(), p.Actor(), denyAll.CanonicalJSON(), denyAll.Hash())
	switch {
	case errors.Is(err, store.ErrConflict):
		return nil, &conflictError{fmt.Sprintf("sandbox %q is already frozen", req.GetName())}
	case err != nil:
		return nil, missing(err, "sandbox %q not found", req.GetName())
	}
	s.log.WarnContext(ctx, "sandbox frozen: deny-all pushed", "sandbox", sb.Name, "version", v.Version, "reason", req.GetReason(), "actor", p.Actor())
	s.hub.publish(context.WithoutCancel(ctx), v)
	s.advisor.versionMoved(sb.Name)
	return sandboxToProto(sb)
}

func (s sandboxService) UnfreezeSandbox(ctx context.Context, req *portcullisv1.UnfreezeSandboxRequest) (*portcullisv1.Sandbox, error) {
	p := mustPrincipal(ctx)
	if err := checkReason(req.GetReason()); err != nil {
		return nil, err
	}
	sb, v, err := s.store.UnfreezeSandbox(ctx, req.GetName(), req.GetReason(), p.Actor())
	switch {
	case errors.Is(err, store.ErrConflict):
		return nil, &conflictError{fmt.Sprintf("sandbox %q is not frozen", req.GetName())}
	case err != nil:
		return nil, missing(err, "sandbox %q not found", req.GetName())
	}
	s.log.WarnContext(ctx, "sandbox unfrozen", "sandbox", sb.Name, "version", v.Version, "restored_from", v.Provenance["restored_from"], "actor", p.Actor())
	s.hub.publish(context.WithoutCancel(ctx), v)
	s.advisor.versionMoved(sb.Name)
	return sandboxToProto(sb)
}

// systemPrincipal is the gateway acting on its own (expiry).
var systemPrincipal = Principal{Name: "gateway", Role: store.RoleAdmin}

// sweep expires pending proposals past their TTL and removes grants past
// their end, on every replica (the store decides each change once).
func (s *Server) sweep(ctx context.Context) error {
	now := s.cfg.Now()
	expired, err := s.store.ExpireProposals(ctx, now, "gateway")
	if err != nil {
		return err
	}
	for _, p := range expired {
		s.log.InfoContext(ctx, "proposal expired", "sandbox", p.Sandbox, "proposal", p.ID)
		s.notifyDecided(p)
		s.advisor.changed(p.Sandbox)
	}
	sandboxes, err := s.store.ListSandboxes(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, sb := range sandboxes {
		if sb.CurrentVersion > 0 && !sb.Frozen {
			errs = append(errs, s.expireGrants(ctx, sb, now))
		}
	}
	return errors.Join(errs...)
}

// expireGrants commits a version of sb without the allow rules whose
// expires_at has passed (source expiry).
func (s *Server) expireGrants(ctx context.Context, sb store.Sandbox, now time.Time) error {
	v, err := s.store.GetPolicyVersion(ctx, sb.Name, sb.CurrentVersion)
	if err != nil {
		return err
	}
	pol, _, err := policy.Parse(v.Document)
	if err != nil {
		return fmt.Errorf("stored version %d of %q no longer parses: %v", v.Version, sb.Name, err)
	}
	cleaned, removed := withoutExpired(pol, now)
	if removed == 0 {
		return nil
	}
	doc := &document{policy: cleaned, canonical: cleaned.CanonicalJSON(), hash: cleaned.Hash()}
	if _, err := policy.Validate(cleaned); err != nil {
		return fmt.Errorf("sandbox %q without its expired grants does not validate: %w", sb.Name, err)
	}
	ctx = context.WithValue(ctx, principalKey{}, systemPrincipal)
	expected := sb.CurrentVersion
	res, err := policyService{s}.commit(ctx, sb.Name, doc, &expected, store.SourceExpiry, map[string]string{"expired_rules": fmt.Sprint(removed)})
	if errors.Is(err, store.ErrConflict) {
		return nil // the version moved; the next sweep looks again
	}
	var cerr *conflictError
	if errors.As(err, &cerr) {
		return nil
	}
	if err != nil {
		return err
	}
	s.log.InfoContext(ctx, "expired grants removed", "sandbox", sb.Name, "version", res.GetVersion(), "rules", removed)
	return nil
}

// withoutExpired returns p without the allow rules expired at now, and how
// many it removed. An endpoint left without rules by it, and an entry left
// without endpoints, go too: an empty rule list would mean something else
// (L4 access) than what was granted.
func withoutExpired(p *policy.Policy, now time.Time) (*policy.Policy, int) {
	out := p.Clone()
	removed := 0
	for key, entry := range out.NetworkPolicies {
		var endpoints []*policy.Endpoint
		for _, ep := range entry.Endpoints {
			had := len(ep.Rules)
			var rules []policy.Rule
			for _, r := range ep.Rules {
				if r.Allow != nil && r.Allow.ExpiresAt != nil && !now.Before(*r.Allow.ExpiresAt) {
					removed++
					continue
				}
				rules = append(rules, r)
			}
			ep.Rules = rules
			if had > 0 && len(rules) == 0 {
				continue
			}
			endpoints = append(endpoints, ep)
		}
		entry.Endpoints = endpoints
		if len(endpoints) == 0 {
			delete(out.NetworkPolicies, key)
		}
	}
	return out.Canonical(), removed
}
