package gateway

import (
	"context"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/store"
)

// The kill switch: freezing commits a deny-all version and refuses
// proposals until an admin unfreezes (lifecycle.Freeze, Unfreeze).

func (s sandboxService) FreezeSandbox(ctx context.Context, req *portcullisv1.FreezeSandboxRequest) (*portcullisv1.Sandbox, error) {
	return s.killSwitch(ctx, req.GetName(), req.GetReason(), s.life.Freeze)
}

func (s sandboxService) UnfreezeSandbox(ctx context.Context, req *portcullisv1.UnfreezeSandboxRequest) (*portcullisv1.Sandbox, error) {
	return s.killSwitch(ctx, req.GetName(), req.GetReason(), s.life.Unfreeze)
}

// killSwitch checks the reason and throws the switch (flip) on sandbox.
func (s sandboxService) killSwitch(ctx context.Context, sandbox, reason string, flip func(ctx context.Context, sandbox, reason, actor string) (store.Sandbox, error)) (*portcullisv1.Sandbox, error) {
	if err := checkReason(reason); err != nil {
		return nil, err
	}
	sb, err := flip(ctx, sandbox, reason, mustPrincipal(ctx).Actor())
	if err != nil {
		return nil, err
	}
	return sandboxToProto(sb)
}
