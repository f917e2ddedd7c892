// Package sqlread is the reads both store engines run the same way
// (versionsql, tooldefsql, sentrysql, callsql) as the store.Tx and store.Driver
// methods they are: a driver's primitives embed Reads on the engine they
// read with, the pool or the transaction. And the columns of a sandbox
// row, which both read.
package sqlread

import (
	"context"

	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/internal/callsql"
	"github.com/portcullis-dev/portcullis/store/internal/providersql"
	"github.com/portcullis-dev/portcullis/store/internal/sentrysql"
	"github.com/portcullis-dev/portcullis/store/internal/sqlexec"
	"github.com/portcullis-dev/portcullis/store/internal/tooldefsql"
	"github.com/portcullis-dev/portcullis/store/internal/versionsql"
)

// SandboxColumns are a sandbox row's columns, in the order both drivers
// scan them.
const SandboxColumns = `name, current_version, current_hash, created_at, created_by,
	boundary, boundary_hash, credentialed_hosts,
	frozen, frozen_reason, frozen_by, frozen_at, frozen_from, credentials_generation`

// Reads are the shared reads on one engine.
type Reads struct{ e sqlexec.Engine }

// On returns the reads on e.
func On(e sqlexec.Engine) Reads { return Reads{e} }

// GetPolicyVersion returns one version with its document; version 0 is
// the sandbox's current one (ErrNotFound).
func (r Reads) GetPolicyVersion(ctx context.Context, sandbox string, version int64) (store.PolicyVersion, error) {
	return versionsql.Get(ctx, r.e, sandbox, version)
}

// ListPolicyVersions returns the sandbox's versions, oldest first, without
// documents; ErrNotFound if the sandbox does not exist.
func (r Reads) ListPolicyVersions(ctx context.Context, sandbox string) ([]store.PolicyVersion, error) {
	return versionsql.List(ctx, r.e, sandbox)
}

// PolicyHashes returns the hashes of versions from to to, oldest first.
func (r Reads) PolicyHashes(ctx context.Context, sandbox string, from, to int64) ([]string, error) {
	return versionsql.Hashes(ctx, r.e, sandbox, from, to)
}

// ListToolDefinitions returns the definitions f matches, in
// tooldefsql.List's order.
func (r Reads) ListToolDefinitions(ctx context.Context, f store.ToolDefinitionFilter) ([]store.ToolDefinition, error) {
	return tooldefsql.List(ctx, r.e, f)
}

// ListSentryEvents returns the events f matches, oldest first.
func (r Reads) ListSentryEvents(ctx context.Context, f store.SentryEventFilter) ([]store.SentryEvent, error) {
	return sentrysql.List(ctx, r.e, f)
}

// SentryGaps returns the ordering state of one source ("" for all).
func (r Reads) SentryGaps(ctx context.Context, source string) ([]store.SentrySource, error) {
	return sentrysql.Sources(ctx, r.e, source)
}

// GetHeldCall returns one held call (ErrNotFound).
func (r Reads) GetHeldCall(ctx context.Context, id int64) (store.HeldCall, error) {
	return callsql.Get(ctx, r.e, id)
}

// HeldCallByKey returns the call its proxy names (ErrNotFound).
func (r Reads) HeldCallByKey(ctx context.Context, sandbox, proxyID, instance, key string) (store.HeldCall, error) {
	return callsql.ByKey(ctx, r.e, sandbox, proxyID, instance, key)
}

// ListHeldCalls returns the calls f matches, newest first.
func (r Reads) ListHeldCalls(ctx context.Context, f store.HeldCallFilter) ([]store.HeldCall, error) {
	return callsql.List(ctx, r.e, f)
}

// CountHeldCalls returns how many calls of sandbox ("": all) are held.
func (r Reads) CountHeldCalls(ctx context.Context, sandbox string) (int, error) {
	return callsql.CountHeld(ctx, r.e, sandbox)
}

// CallApprovals returns a held call's approvals, oldest first.
func (r Reads) CallApprovals(ctx context.Context, id int64) ([]store.CallApproval, error) {
	return callsql.Approvals(ctx, r.e, id)
}

// DecidedHeldCalls returns those of the calls ids names that are no
// longer held.
func (r Reads) DecidedHeldCalls(ctx context.Context, ids []int64) ([]store.HeldCall, error) {
	return callsql.Decided(ctx, r.e, ids)
}

// GetProvider returns one provider with its sandboxes (ErrNotFound).
func (r Reads) GetProvider(ctx context.Context, name string) (store.Provider, error) {
	return providersql.Get(ctx, r.e, name)
}

// ListProviders returns every provider, ordered by name.
func (r Reads) ListProviders(ctx context.Context) ([]store.Provider, error) {
	return providersql.List(ctx, r.e)
}

// SandboxCredentials returns the sandbox's credentials generation and
// providers, read together.
func (r Reads) SandboxCredentials(ctx context.Context, sandbox string) (int64, []store.Provider, error) {
	return providersql.SandboxCredentials(ctx, r.e, sandbox)
}
