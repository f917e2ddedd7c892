package gateway

import (
	"context"

	"github.com/portcullis-dev/portcullis/gateway/distribution"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/store"
)

// RotateSigningKey adds a signing key to st's chain, endorsed by the
// current one, and returns its id (see distribution.RotateSigningKey).
func RotateSigningKey(ctx context.Context, st *store.Store, actor string) (string, error) {
	return distribution.RotateSigningKey(ctx, st, actor)
}

// SigningKeyChain returns st's signing key chain, oldest first, as public
// keys in the form --gateway-key takes (see distribution.SigningKeyChain).
func SigningKeyChain(ctx context.Context, st *store.Store) ([]string, error) {
	return distribution.SigningKeyChain(ctx, st)
}

// ListSigningKeys is the signing key chain, for an operator pinning a
// proxy to it (portcullis signing-key list --gateway URL).
func (s proxyService) ListSigningKeys(ctx context.Context, _ *portcullisv1.ListSigningKeysRequest) (*portcullisv1.ListSigningKeysResponse, error) {
	keys, err := distribution.SigningKeyChain(ctx, s.store)
	if err != nil {
		return nil, err
	}
	return &portcullisv1.ListSigningKeysResponse{Keys: keys}, nil
}
