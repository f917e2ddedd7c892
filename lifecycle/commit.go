package lifecycle

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/portcullis-dev/portcullis/internal/telemetry"
	"github.com/portcullis-dev/portcullis/policy"
	"github.com/portcullis-dev/portcullis/prover"
	"github.com/portcullis-dev/portcullis/store"
)

// Committing versions. A sandbox's first version is stored with the
// sandbox (store.CreateSandbox); every later one — set, rollback, the
// expiry of grants, an applied proposal, a freeze, an unfreeze — is
// committed by commit below, inside the transaction of the workflow that
// makes it, which holds the sandbox row. Nothing is announced here: the
// store's commit feed (ListenPolicyCommits) tells every listener — the
// push hub, the re-basing of pending proposals (Run) — of every commit,
// on every replica, in the same way whichever workflow made it.

// commit stores in as the sandbox's next version in tx: the
// compare-and-swap on the current version, the version row, the sandbox
// moved to it and the policy.set audit entry (store.AppendVersion). It is
// the one path of every version commit after a sandbox's first.
//
// When ctx is traced (the RPC's span, see internal/telemetry), the commit
// is a span of its own, and its traceparent goes into the version's
// provenance: the push hub, on whichever replica hears of the commit,
// makes each delivery of the version a child of it.
func commit(ctx context.Context, tx store.Tx, in store.AppendPolicy) (store.PolicyVersion, error) {
	parent := trace.SpanFromContext(ctx)
	if !parent.SpanContext().IsValid() {
		return store.AppendVersion(ctx, tx, in)
	}
	ctx, span := parent.TracerProvider().Tracer(telemetry.Scope).Start(ctx, "policy.commit", trace.WithAttributes(
		attribute.String("portcullis.sandbox", in.Sandbox),
		attribute.String("portcullis.policy.source", in.Source),
		attribute.String("portcullis.policy.hash", in.Hash),
	))
	defer span.End()
	if tp := telemetry.Traceparent(span.SpanContext()); tp != "" {
		prov := make(map[string]string, len(in.Provenance)+1)
		maps.Copy(prov, in.Provenance)
		prov[telemetry.ProvenanceKey] = tp
		in.Provenance = prov
	}
	v, err := store.AppendVersion(ctx, tx, in)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		return v, err
	}
	span.SetAttributes(attribute.Int64("portcullis.policy.version", v.Version))
	return v, nil
}

// Change is a new version asked for directly: set, rollback or the expiry
// sweep.
type Change struct {
	Sandbox string
	// Policy is the parsed, validated document to commit.
	Policy *policy.Policy
	// Expected, if set, must be the sandbox's current version; without it
	// the change goes on top of whatever is current.
	Expected   *int64
	Source     string
	Provenance map[string]string
	Actor      string
	// Grants, if set, refuses the change when it takes away what applied
	// proposals granted, unless the caller does so on purpose (policy
	// set; a rollback, a freeze and the expiry sweep are not guarded).
	Grants *GrantGuard
}

// commitAttempts bounds how often applying a proposal re-bases and tries
// again after its base moved.
const commitAttempts = 10

// Commit stores c as the sandbox's next version, in one transaction that
// holds the sandbox: expected-version check, frozen check, no-op
// detection (unchanged true: the current version is returned and nothing
// is stored), the static-section rule, the grants' guard, then commit.
func (l *Lifecycle) Commit(ctx context.Context, c Change) (v store.PolicyVersion, unchanged bool, err error) {
	hash := c.Policy.Hash()
	v, err = store.Transact(ctx, l.st.Driver, func(tx store.Tx) (store.PolicyVersion, error) {
		unchanged = false
		var detail map[string]string // grants taken away on purpose
		sb, err := tx.LockSandbox(ctx, c.Sandbox)
		if err != nil {
			return store.PolicyVersion{}, Missing(err, "sandbox %q not found", c.Sandbox)
		}
		if c.Expected != nil && *c.Expected != sb.CurrentVersion {
			return store.PolicyVersion{}, &ConflictError{fmt.Sprintf("expected version %d, but the current version of %q is %d", *c.Expected, c.Sandbox, sb.CurrentVersion)}
		}
		if sb.Frozen {
			return store.PolicyVersion{}, frozenError(sb, "before changing its policy")
		}
		if sb.CurrentVersion > 0 {
			current, err := tx.GetPolicyVersion(ctx, c.Sandbox, sb.CurrentVersion)
			if err != nil {
				return store.PolicyVersion{}, err
			}
			if current.Hash == hash {
				unchanged = true
				return current, nil
			}
			cur, _, err := policy.Parse(current.Document)
			if err != nil {
				return store.PolicyVersion{}, fmt.Errorf("current version no longer parses: %v", err)
			}
			if err := checkStaticSections(cur, c.Policy); err != nil {
				return store.PolicyVersion{}, err
			}
			if c.Grants != nil {
				if detail, err = guardGrants(ctx, tx, c, cur, prover.Options{Now: l.cfg.Now(), DevAllowLoopback: l.cfg.DevAllowLoopback}); err != nil {
					return store.PolicyVersion{}, err
				}
			}
		}
		prov := c.Provenance
		if detail != nil {
			prov = maps.Clone(detail)
			maps.Copy(prov, c.Provenance)
		}
		return commit(ctx, tx, store.AppendPolicy{
			Sandbox: c.Sandbox, ExpectedVersion: sb.CurrentVersion, Hash: hash, Document: c.Policy.CanonicalJSON(),
			Author: c.Actor, Source: c.Source, Provenance: prov, AuditDetail: detail,
		})
	})
	if err != nil || unchanged {
		return v, unchanged, err
	}
	l.log.InfoContext(ctx, "policy version committed", "sandbox", c.Sandbox, "version", v.Version, "hash", v.Hash, "source", v.Source, "actor", c.Actor)
	return v, false, nil
}

// checkStaticSections enforces that filesystem_policy, landlock and process
// stay as the first version fixed them: they are applied before the agent
// starts and cannot change under a running sandbox.
func checkStaticSections(cur, next *policy.Policy) error {
	var problems []policy.Problem
	same := func(path string, a, b any) {
		if !bytes.Equal(mustJSON(a), mustJSON(b)) {
			problems = append(problems, policy.Problem{Path: path, Message: "is fixed by the sandbox's first policy version and cannot change; create a new sandbox to change it"})
		}
	}
	same("filesystem_policy", cur.FilesystemPolicy, next.FilesystemPolicy)
	same("landlock", cur.Landlock, next.Landlock)
	same("process", cur.Process, next.Process)
	if len(problems) > 0 {
		return &policy.ValidationError{Problems: problems}
	}
	return nil
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // policy sections are plain data
	}
	return b
}

// Version reads one stored version (0: the current one), naming exactly
// what is missing when it is not there.
func (l *Lifecycle) Version(ctx context.Context, sandbox string, version int64) (store.PolicyVersion, error) {
	v, err := l.st.GetPolicyVersion(ctx, sandbox, version)
	if !errors.Is(err, store.ErrNotFound) {
		return v, err
	}
	sb, serr := l.st.GetSandbox(ctx, sandbox)
	switch {
	case errors.Is(serr, store.ErrNotFound):
		return v, &NotFoundError{fmt.Sprintf("sandbox %q not found", sandbox)}
	case serr != nil:
		return v, serr
	case sb.CurrentVersion == 0:
		return v, &NotFoundError{fmt.Sprintf("sandbox %q has no policy yet", sandbox)}
	default:
		return v, &NotFoundError{fmt.Sprintf("sandbox %q has no version %d (its current version is %d)", sandbox, version, sb.CurrentVersion)}
	}
}

// current reads the sandbox's current version, parsed.
func (l *Lifecycle) current(ctx context.Context, sandbox string) (store.PolicyVersion, *policy.Policy, error) {
	v, err := l.Version(ctx, sandbox, 0)
	if err != nil {
		return v, nil, err
	}
	p, _, err := policy.Parse(v.Document)
	if err != nil {
		return v, nil, fmt.Errorf("stored version %d of %q no longer parses: %v", v.Version, sandbox, err)
	}
	return v, p, nil
}

// Freeze is the kill switch: it commits a deny-all version (the sandbox's
// fixed sections kept, every network entry gone) and refuses proposals
// until Unfreeze.
func (l *Lifecycle) Freeze(ctx context.Context, sandbox, reason, actor string) (store.Sandbox, error) {
	return l.freeze(ctx, sandbox, reason, actor, nil)
}

// freeze is Freeze, and also, if not nil, whatever the freeze is the
// cause of (a Sentry action's record), in the same transaction after the
// version is committed.
func (l *Lifecycle) freeze(ctx context.Context, sandbox, reason, actor string, also func(store.Tx, store.PolicyVersion) error) (store.Sandbox, error) {
	_, pol, err := l.current(ctx, sandbox)
	if err != nil {
		return store.Sandbox{}, err
	}
	denyAll := pol.Clone()
	denyAll.NetworkPolicies = nil
	denyAll.NetworkMiddlewares = nil
	denyAll = denyAll.Canonical()
	sb, v, err := freezeSandboxAnd(ctx, l.st, sandbox, reason, actor, denyAll.CanonicalJSON(), denyAll.Hash(), also)
	switch {
	case errors.Is(err, store.ErrConflict):
		return sb, &ConflictError{fmt.Sprintf("sandbox %q is already frozen", sandbox)}
	case err != nil:
		return sb, Missing(err, "sandbox %q not found", sandbox)
	}
	l.log.WarnContext(ctx, "sandbox frozen: deny-all pushed", "sandbox", sb.Name, "version", v.Version, "reason", reason, "actor", actor)
	return sb, nil
}

// Unfreeze restores the version before the freeze as a new version.
func (l *Lifecycle) Unfreeze(ctx context.Context, sandbox, reason, actor string) (store.Sandbox, error) {
	sb, v, err := unfreezeSandbox(ctx, l.st, sandbox, reason, actor)
	switch {
	case errors.Is(err, store.ErrConflict):
		return sb, &ConflictError{fmt.Sprintf("sandbox %q is not frozen", sandbox)}
	case err != nil:
		return sb, Missing(err, "sandbox %q not found", sandbox)
	}
	l.log.WarnContext(ctx, "sandbox unfrozen", "sandbox", sb.Name, "version", v.Version, "restored_from", v.Provenance["restored_from"], "actor", actor)
	return sb, nil
}

// systemActor is the gateway acting on its own (expiry).
const systemActor = "gateway"

// Sweep expires pending proposals past their TTL and removes grants past
// their end, on every replica (the store decides each change once).
func (l *Lifecycle) Sweep(ctx context.Context) error {
	now := l.cfg.Now()
	expired, err := expireProposals(ctx, l.st, now, systemActor)
	if err != nil {
		return err
	}
	for _, p := range expired {
		l.log.InfoContext(ctx, "proposal expired", "sandbox", p.Sandbox, "proposal", p.ID)
		l.decided(p)
		l.changed(p.Sandbox)
	}
	sandboxes, err := l.st.ListSandboxes(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, sb := range sandboxes {
		if sb.CurrentVersion > 0 && !sb.Frozen {
			errs = append(errs, l.expireGrants(ctx, sb, now))
		}
	}
	return errors.Join(errs...)
}

// expireGrants commits a version of sb without the allow rules whose
// expires_at has passed (source expiry).
func (l *Lifecycle) expireGrants(ctx context.Context, sb store.Sandbox, now time.Time) error {
	v, err := l.st.GetPolicyVersion(ctx, sb.Name, sb.CurrentVersion)
	if err != nil {
		return err
	}
	pol, _, err := policy.Parse(v.Document)
	if err != nil {
		return fmt.Errorf("stored version %d of %q no longer parses: %v", v.Version, sb.Name, err)
	}
	cleaned, removed := withoutExpired(pol, now)
	if removed == 0 {
		return nil
	}
	if _, err := policy.Validate(cleaned); err != nil {
		return fmt.Errorf("sandbox %q without its expired grants does not validate: %w", sb.Name, err)
	}
	expected := sb.CurrentVersion
	res, _, err := l.Commit(ctx, Change{
		Sandbox: sb.Name, Policy: cleaned, Expected: &expected, Source: store.SourceExpiry, Actor: systemActor,
		Provenance: map[string]string{"expired_rules": fmt.Sprint(removed)},
	})
	var cerr *ConflictError
	if errors.Is(err, store.ErrConflict) || errors.As(err, &cerr) {
		return nil // the version moved; the next sweep looks again
	}
	if err != nil {
		return err
	}
	l.log.InfoContext(ctx, "expired grants removed", "sandbox", sb.Name, "version", res.Version, "rules", removed)
	return nil
}

// withoutExpired returns p without the allow rules expired at now, and how
// many it removed. An endpoint left without rules by it, and an entry left
// without endpoints, go too: an empty rule list would mean something else
// (L4 access) than what was granted.
func withoutExpired(p *policy.Policy, now time.Time) (*policy.Policy, int) {
	out := p.Clone()
	removed := 0
	for key, entry := range out.NetworkPolicies {
		var endpoints []*policy.Endpoint
		for _, ep := range entry.Endpoints {
			had := len(ep.Rules)
			var rules []policy.Rule
			for _, r := range ep.Rules {
				if r.Allow != nil && r.Allow.ExpiresAt != nil && !now.Before(*r.Allow.ExpiresAt) {
					removed++
					continue
				}
				rules = append(rules, r)
			}
			ep.Rules = rules
			if had > 0 && len(rules) == 0 {
				continue
			}
			endpoints = append(endpoints, ep)
		}
		entry.Endpoints = endpoints
		if len(endpoints) == 0 {
			delete(out.NetworkPolicies, key)
		}
	}
	return out.Canonical(), removed
}
