package gateway

import (
	"context"

	"github.com/portcullis-dev/portcullis/gateway/distribution"
	"github.com/portcullis-dev/portcullis/lifecycle"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/store"
)

// RotateSigningKey adds a signing key to st's chain, endorsed by the
// current one, and returns its id (see distribution.RotateSigningKey):
// `portcullis signing-key rotate`, without a running gateway. The key is
// written by a lifecycle over st, as a gateway writes.
func RotateSigningKey(ctx context.Context, st *store.Store, actor string) (string, error) {
	return distribution.RotateSigningKey(ctx, st, offline(st), actor)
}

// SigningKeyChain returns st's signing key chain, oldest first, as public
// keys in the form --gateway-key takes (see distribution.SigningKeyChain).
func SigningKeyChain(ctx context.Context, st *store.Store) ([]string, error) {
	return distribution.SigningKeyChain(ctx, st, offline(st))
}

// offline is the lifecycle the commands that work on a store without a
// gateway write through. It runs no background work (no Run).
func offline(st *store.Store) *lifecycle.Lifecycle {
	return lifecycle.New(lifecycle.Config{}, st)
}

// ListSigningKeys is the signing key chain, for an operator pinning a
// proxy to it (portcullis signing-key list --gateway URL).
func (s proxyService) ListSigningKeys(ctx context.Context, _ *portcullisv1.ListSigningKeysRequest) (*portcullisv1.ListSigningKeysResponse, error) {
	return distribution.ListSigningKeys(ctx, s.store, s.life)
}
