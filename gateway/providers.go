package gateway

import (
	"context"

	"connectrpc.com/connect/v2"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// AttachProvider is not built yet (issue 39).
func (s sandboxService) AttachProvider(context.Context, *portcullisv1.AttachProviderRequest) (*portcullisv1.Sandbox, error) {
	return nil, connect.NewError(connect.CodeUnimplemented, "not built yet")
}

// DetachProvider is not built yet (issue 39).
func (s sandboxService) DetachProvider(context.Context, *portcullisv1.DetachProviderRequest) (*portcullisv1.Sandbox, error) {
	return nil, connect.NewError(connect.CodeUnimplemented, "not built yet")
}
