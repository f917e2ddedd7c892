package gatewayocsf

import (
	"fmt"
	"maps"
	"strings"

	"github.com/portcullis-dev/portcullis/internal/ocsf"
	"github.com/portcullis-dev/portcullis/store"
)

// auditKind says how an audit action maps onto Entity Management.
type auditKind struct {
	activity int
	name     string // activity_name
	entity   string // the managed entity's type
	typeID   int    // managed_entity.type_id: 5 Policy; 0 (omitted) for our own kinds, named by type
	severity int
}

var auditKinds = map[string]auditKind{
	store.ActionSandboxCreate: {1, "Create", "Sandbox", 0, ocsf.SeverityInformational},
	store.ActionSandboxDelete: {4, "Delete", "Sandbox", 0, ocsf.SeverityMedium},
	store.ActionSandboxToken:  {3, "Update", "Sandbox token", 0, ocsf.SeverityLow},
	store.ActionPolicySet:     {3, "Update", "Policy", 5, ocsf.SeverityLow},
	store.ActionTokenCreate:   {1, "Create", "Token", 0, ocsf.SeverityLow},
	store.ActionTokenRevoke:   {4, "Delete", "Token", 0, ocsf.SeverityLow},
	store.ActionSigningKeyAdd: {1, "Create", "Signing key", 0, ocsf.SeverityLow},
	store.ActionBoundarySet:   {3, "Update", "Boundary", 5, ocsf.SeverityMedium},
	store.ActionCredentials:   {3, "Update", "Credentialed hosts", 0, ocsf.SeverityMedium},
	store.ActionProposalNew:   {1, "Create", "Proposal", 0, ocsf.SeverityInformational},
	store.ActionProposalState: {3, "Update", "Proposal", 0, ocsf.SeverityInformational},
	store.ActionProposalBase:  {3, "Update", "Proposal", 0, ocsf.SeverityInformational},
	store.ActionProposalOK:    {99, "Approve", "Proposal", 0, ocsf.SeverityLow},
	store.ActionProposalApply: {3, "Update", "Policy", 5, ocsf.SeverityLow},
	store.ActionFreeze:        {12, "Suspend", "Sandbox", 0, ocsf.SeverityHigh},
	store.ActionUnfreeze:      {13, "Resume", "Sandbox", 0, ocsf.SeverityMedium},
	store.ActionApprovalRules: {3, "Update", "Approval rules", 5, ocsf.SeverityMedium},
	store.ActionSentryKeySet:  {3, "Update", "Sentry key", 0, ocsf.SeverityLow},
	store.ActionSentryKeyDel:  {4, "Delete", "Sentry key", 0, ocsf.SeverityLow},
	store.ActionSentryRefused: {99, "Refuse", "Sentry event", 0, ocsf.SeverityHigh},
	store.ActionSentryAction:  {99, "Remediate", "Sandbox", 0, ocsf.SeverityHigh},
	store.ActionCallApprove:   {99, "Approve", "Held call", 0, ocsf.SeverityLow},
	store.ActionCallDeny:      {99, "Deny", "Held call", 0, ocsf.SeverityLow},
	// Credential providers: the entity is the provider (Target); an
	// attach or detach names the sandbox too. The detail never holds a
	// secret, sealed or not.
	store.ActionProviderCreate: {1, "Create", "Credential provider", 0, ocsf.SeverityMedium},
	store.ActionProviderRotate: {3, "Update", "Credential provider", 0, ocsf.SeverityMedium},
	store.ActionProviderDelete: {4, "Delete", "Credential provider", 0, ocsf.SeverityMedium},
	store.ActionProviderAttach: {99, "Attach", "Credential provider", 0, ocsf.SeverityMedium},
	store.ActionProviderDetach: {99, "Detach", "Credential provider", 0, ocsf.SeverityMedium},
}

// FromAudit maps an audit-log entry: an Entity Management event (3004)
// whose actor is the token's name, whose entity and entity_result carry
// the hashes before and after (entity.data.hash), and whose
// metadata.uid is the entry's chain hash. A proposal's rejection is the
// activity "Reject", an approval "Approve" (both Other, 99); a policy
// set's Detail "source" (set, rollback, expiry…) names the activity.
func FromAudit(a store.AuditEntry, p ocsf.Product) ocsf.Event {
	k, ok := auditKinds[a.Action]
	if !ok {
		k = auditKind{99, a.Action, "Other", 0, ocsf.SeverityInformational}
	}
	name := k.name
	if src := a.Detail["source"]; a.Action == store.ActionPolicySet && src != "" && src != "set" {
		// The first version comes with its sandbox; rollback, an applied
		// proposal, a grant's expiry are named as themselves.
		k.activity, name = 99, strings.ToUpper(src[:1])+src[1:]
		if src == "create" {
			k.activity, name = 1, "Create"
		}
	}
	if a.Action == store.ActionProposalState && a.Detail["to"] == store.ProposalRejected {
		k.activity, name = 99, "Reject"
	}
	var e ocsf.Event
	e.SetClass(ocsf.ClassEntityManagement, k.activity, name)
	e.Time = a.Time.UnixMilli()
	e.SetSeverity(k.severity)
	e.Metadata = ocsf.Metadata{Version: ocsf.Version, Product: p, UID: a.Hash}
	actor := a.Actor
	if actor == "" {
		actor = "unknown"
	}
	e.Actor = &ocsf.Actor{User: &ocsf.User{Name: actor}}
	uid := a.Target
	if uid == "" {
		uid = a.Sandbox
	}
	entity := func(hash string) *ocsf.ManagedEntity {
		me := &ocsf.ManagedEntity{Type: k.entity, TypeID: k.typeID, Name: a.Sandbox, UID: uid}
		if me.Name == "" {
			me.Name = uid
		}
		if me.Name == "" {
			me.Name = k.entity
		}
		if hash != "" {
			me.Data = map[string]any{"hash": hash}
		}
		return me
	}
	e.Entity = entity(a.BeforeHash)
	if a.AfterHash != "" || a.BeforeHash != "" {
		e.EntityResult = entity(a.AfterHash)
		if v := a.Detail["version"]; v != "" {
			e.EntityResult.Version = v
		}
	}
	outcome := a.Detail["status"]
	if to := a.Detail["to"]; to != "" {
		outcome = to
	}
	if a.Action == store.ActionSentryAction && a.Detail["status"] == "failed" {
		e.SetStatus(false, outcome)
	} else {
		e.SetStatus(a.Action != store.ActionSentryRefused, outcome)
	}
	e.Comment = a.Detail["reason"]
	e.Message = fmt.Sprintf("%s %s by %s", a.Action, strings.TrimSpace(a.Sandbox+" "+a.Target), actor)
	if a.BeforeHash != "" || a.AfterHash != "" {
		e.Message += fmt.Sprintf(" (%s → %s)", short(a.BeforeHash), short(a.AfterHash))
	}
	u := map[string]any{"action": a.Action, "seq": a.Seq, "prev_hash": a.PrevHash}
	if a.Sandbox != "" {
		u["sandbox"] = a.Sandbox
	}
	if a.Target != "" {
		u["target"] = a.Target
	}
	if a.BeforeHash != "" {
		u["before_hash"] = a.BeforeHash
	}
	if a.AfterHash != "" {
		u["after_hash"] = a.AfterHash
	}
	if len(a.Detail) > 0 {
		u["detail"] = maps.Clone(a.Detail)
	}
	e.Unmapped = u
	e.Finish()
	return e
}

func short(h string) string {
	if h == "" {
		return "none"
	}
	if len(h) > 12 {
		return h[:12]
	}
	return h
}
