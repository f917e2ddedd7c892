package lifecycle

import (
	"context"

	"github.com/portcullis-dev/portcullis/store"
)

// Sandboxes: creating and deleting one, rotating its token, its CA, and
// the context its proposals are proved in (boundary, credentialed hosts).
// Each write is one audited transaction written once in package store
// (store.Store's methods); lifecycle is their one caller, and what it adds
// is the consequence a write has on the workflows it owns: a new boundary
// or new credentialed hosts re-prove the sandbox's pending proposals, here,
// so that no caller has to remember to.

// CreateSandbox creates the sandbox, its first token and, if in.Policy is
// set, its version 1, in one transaction (see store.Store.CreateSandbox:
// store.ErrAlreadyExists for a taken name or token name).
func (l *Lifecycle) CreateSandbox(ctx context.Context, in store.CreateSandbox) (store.Sandbox, error) {
	return l.st.CreateSandbox(ctx, in)
}

// DeleteSandbox deletes the sandbox with its versions, CA, proxy statuses
// and proposals, and revokes its tokens (store.ErrNotFound if there is no
// such sandbox). The audit log keeps its history.
func (l *Lifecycle) DeleteSandbox(ctx context.Context, name, actor string) error {
	return l.st.DeleteSandbox(ctx, name, actor)
}

// RotateSandboxToken revokes every live token of the sandbox and stores
// tok as its token (see store.Store.RotateSandboxToken: store.ErrNotFound
// for an unknown sandbox, store.ErrAlreadyExists for a taken name).
func (l *Lifecycle) RotateSandboxToken(ctx context.Context, sandbox, actor string, tok store.Token) (store.Token, error) {
	return l.st.RotateSandboxToken(ctx, sandbox, actor, tok)
}

// PutSandboxCA stores ca as the sandbox's CA unless it has one, and
// returns the one stored: the first replica to store one wins, and the
// others use it (store.ErrNotFound for an unknown sandbox).
func (l *Lifecycle) PutSandboxCA(ctx context.Context, ca store.SandboxCA) (store.SandboxCA, error) {
	return l.st.PutSandboxCA(ctx, ca)
}

// SetSandboxBoundary stores the sandbox's boundary (doc empty removes it;
// store.ErrNotFound for an unknown sandbox) and re-proves its pending
// proposals against it, in the background.
func (l *Lifecycle) SetSandboxBoundary(ctx context.Context, sandbox string, doc []byte, hash, actor string) (store.Sandbox, error) {
	sb, err := l.st.SetSandboxBoundary(ctx, sandbox, doc, hash, actor)
	if err != nil {
		return sb, err
	}
	l.refresh(sb.Name)
	return sb, nil
}

// UpdateCredentialedHosts adds and then removes "host:port" entries of
// the sandbox's credentialed hosts (store.ErrNotFound for an unknown
// sandbox) and re-proves its pending proposals with the new list, in the
// background.
func (l *Lifecycle) UpdateCredentialedHosts(ctx context.Context, sandbox string, add, remove []string, actor string) (store.Sandbox, error) {
	sb, err := l.st.UpdateCredentialedHosts(ctx, sandbox, add, remove, actor)
	if err != nil {
		return sb, err
	}
	l.refresh(sb.Name)
	return sb, nil
}
