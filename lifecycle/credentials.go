package lifecycle

import (
	"context"
	"time"

	"github.com/portcullis-dev/portcullis/store"
)

// Credentials: who may call the gateway (API tokens, the keys Sentry
// sources sign their events with) and the key chain the gateway signs
// policy versions with. Each write is one audited transaction written once
// in package store (store.Store's methods: the last live admin token, the
// signing key chain's compare-and-swap); lifecycle is their one caller.

// CreateToken stores tok (see store.Store.CreateToken: store.ErrAlreadyExists
// for a name ever used, store.ErrNotFound for a sandbox token's unknown
// sandbox).
func (l *Lifecycle) CreateToken(ctx context.Context, tok store.Token, actor string) (store.Token, error) {
	return l.st.CreateToken(ctx, tok, actor)
}

// RevokeToken revokes the live token name (store.ErrNotFound if there is
// none; store.ErrLastAdmin, and nothing revoked, for the last live admin
// token).
func (l *Lifecycle) RevokeToken(ctx context.Context, name, actor string) error {
	return l.st.RevokeToken(ctx, name, actor)
}

// TouchToken records a use of token id at at, never moving its last use
// backwards (store.ErrNotFound for an unknown id). Not audited: it is
// bookkeeping, written at most once a minute per token by the caller.
func (l *Lifecycle) TouchToken(ctx context.Context, id int64, at time.Time) error {
	return l.st.TouchToken(ctx, id, at)
}

// SetSentryKey registers k as the key its source signs events with,
// replacing the one it had.
func (l *Lifecycle) SetSentryKey(ctx context.Context, k store.SentryKey, actor string) (store.SentryKey, error) {
	return l.st.SetSentryKey(ctx, k, actor)
}

// DeleteSentryKey removes the source's key (store.ErrNotFound if it has
// none): its events need no signature again.
func (l *Lifecycle) DeleteSentryKey(ctx context.Context, source, actor string) error {
	return l.st.DeleteSentryKey(ctx, source, actor)
}

// AddSigningKey appends k to the signing key chain if its newest key is
// still previousID ("" for the first key); otherwise store.ErrConflict
// (another replica added one first) and nothing is stored.
func (l *Lifecycle) AddSigningKey(ctx context.Context, k store.SigningKey, previousID, actor string) (store.SigningKey, error) {
	return l.st.AddSigningKey(ctx, k, previousID, actor)
}
