package gateway

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect/v2"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/store"
)

// BreakGlassActor is who the audit log says made a token offline.
const BreakGlassActor = "cli:break-glass"

// BreakGlassCommand is how an operator mints an admin token offline, for
// messages that point to it.
const BreakGlassCommand = "portcullis token create --role admin --name NAME --data-dir DIR (or --database-url URL)"

// BreakGlassToken creates the admin token req asks for directly in st,
// with no gateway and no token: the way back in when every admin token is
// lost or revoked. It is audited (token.create) as BreakGlassActor. Only
// admin tokens are made so; the others come from the gateway, asked with
// an admin token. Errors are Connect errors with the API's codes.
func BreakGlassToken(ctx context.Context, st *store.Store, req *portcullisv1.CreateTokenRequest) (*portcullisv1.CreateTokenResponse, error) {
	if req.GetRole() != store.RoleAdmin {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Sprintf(
			"role: a token made offline (break-glass) is an admin token, not %s: create other tokens through the gateway with it", req.GetRole()))
	}
	res, _, err := createToken(ctx, offline(st), req, time.Now(), BreakGlassActor)
	var ferr *fieldError
	var exerr *existsError
	switch {
	case errors.As(err, &ferr):
		return nil, connect.NewError(connect.CodeInvalidArgument, ferr.Error())
	case errors.As(err, &exerr):
		return nil, connect.NewError(connect.CodeAlreadyExists, exerr.Error())
	}
	return res, err
}
