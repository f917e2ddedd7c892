package gateway

import (
	"context"

	"github.com/portcullis-dev/portcullis/gateway/distribution"
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
