package gateway

import (
	"context"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// The kill switch: freezing commits a deny-all version and refuses
// proposals until an admin unfreezes (lifecycle.Freeze, Unfreeze).

func (s sandboxService) FreezeSandbox(ctx context.Context, req *portcullisv1.FreezeSandboxRequest) (*portcullisv1.Sandbox, error) {
	if err := checkReason(req.GetReason()); err != nil {
		return nil, err
	}
	sb, err := s.life.Freeze(ctx, req.GetName(), req.GetReason(), mustPrincipal(ctx).Actor())
	if err != nil {
		return nil, err
	}
	return sandboxToProto(sb)
}

func (s sandboxService) UnfreezeSandbox(ctx context.Context, req *portcullisv1.UnfreezeSandboxRequest) (*portcullisv1.Sandbox, error) {
	if err := checkReason(req.GetReason()); err != nil {
		return nil, err
	}
	sb, err := s.life.Unfreeze(ctx, req.GetName(), req.GetReason(), mustPrincipal(ctx).Actor())
	if err != nil {
		return nil, err
	}
	return sandboxToProto(sb)
}
