package gateway

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portcullis-dev/portcullis/lifecycle"
	"github.com/portcullis-dev/portcullis/policy"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/store"
)

// maxDocumentBytes bounds a policy document in a request.
const maxDocumentBytes = 4 << 20

// document is a parsed, validated policy ready to store.
type document struct {
	policy    *policy.Policy
	warnings  []policy.Problem
	canonical []byte
	hash      string
}

func parseDocument(text string) (*document, error) {
	if len(text) > maxDocumentBytes {
		return nil, invalidField("document", "larger than %d bytes", maxDocumentBytes)
	}
	if text == "" {
		return nil, invalidField("document", "is empty")
	}
	p, warnings, err := policy.Parse([]byte(text))
	if err != nil {
		return nil, err
	}
	return &document{policy: p, warnings: warnings, canonical: p.CanonicalJSON(), hash: p.Hash()}, nil
}

type policyService struct{ *Server }

func (s policyService) SetPolicy(ctx context.Context, req *portcullisv1.SetPolicyRequest) (*portcullisv1.PolicyVersion, error) {
	if len(req.GetRemoveGrants()) > 0 && req.ExpectedVersion == nil {
		return nil, invalidField("remove_grants", "goes with expected_version: confirm what you saw that version's change take away")
	}
	doc, err := parseDocument(req.GetDocument())
	if err != nil {
		return nil, err
	}
	guard := &lifecycle.GrantGuard{Force: req.GetForce()}
	for _, id := range req.GetRemoveGrants() {
		guard.Confirmed = append(guard.Confirmed, clampID(id))
	}
	res, err := s.commit(ctx, lifecycle.Change{
		Sandbox: req.GetSandbox(), Policy: doc.policy, Expected: optionalVersion(req.ExpectedVersion), Source: store.SourceSet, Grants: guard,
	})
	if err != nil {
		return nil, err
	}
	res.Warnings = problemsToProto(s.newWarnings(ctx, req.GetSandbox(), res, doc.warnings))
	return res, nil
}

// newWarnings drops from warnings the document-wide notes
// (policy.CodePrivateResolution) that the sandbox's version before this
// one had already: said once, they need not be repeated at every set of
// the same sandbox. Warnings about one field are always kept. When the
// version before cannot be read, nothing is dropped.
func (s policyService) newWarnings(ctx context.Context, sandbox string, res *portcullisv1.PolicyVersion, warnings []policy.Problem) []policy.Problem {
	if !slices.ContainsFunc(warnings, func(p policy.Problem) bool { return p.Code == policy.CodePrivateResolution }) {
		return warnings
	}
	before := int64(res.GetVersion())
	if !res.GetUnchanged() {
		before-- // the version this one follows
	}
	if before < 1 {
		return warnings
	}
	v, err := s.version(ctx, sandbox, before)
	if err != nil {
		return warnings
	}
	_, had, err := policy.Parse(v.Document)
	if err != nil || !slices.ContainsFunc(had, func(p policy.Problem) bool { return p.Code == policy.CodePrivateResolution }) {
		return warnings
	}
	return slices.DeleteFunc(slices.Clone(warnings), func(p policy.Problem) bool { return p.Code == policy.CodePrivateResolution })
}

func (s policyService) RollbackPolicy(ctx context.Context, req *portcullisv1.RollbackPolicyRequest) (*portcullisv1.PolicyVersion, error) {
	if req.GetToVersion() < 1 {
		return nil, invalidField("to_version", "must be >= 1")
	}
	target, err := s.version(ctx, req.GetSandbox(), int64(req.GetToVersion()))
	if err != nil {
		return nil, err
	}
	doc, err := parseDocument(string(target.Document))
	if err != nil {
		// Stored data that no longer parses is our fault, not the
		// caller's: no %w, so it is not reported as InvalidArgument.
		return nil, fmt.Errorf("stored version %d of %q no longer parses: %v", target.Version, req.GetSandbox(), err)
	}
	return s.commit(ctx, lifecycle.Change{
		Sandbox: req.GetSandbox(), Policy: doc.policy, Expected: optionalVersion(req.ExpectedVersion), Source: store.SourceRollback,
		Provenance: map[string]string{"rollback_to": fmt.Sprint(target.Version)},
	})
}

func optionalVersion(v *uint32) *int64 {
	if v == nil {
		return nil
	}
	n := int64(*v)
	return &n
}

// commit stores c, by the caller, as the sandbox's next version through
// the lifecycle's one commit path.
func (s policyService) commit(ctx context.Context, c lifecycle.Change) (*portcullisv1.PolicyVersion, error) {
	c.Actor = mustPrincipal(ctx).Actor()
	v, unchanged, err := s.life.Commit(ctx, c)
	if err != nil {
		return nil, err
	}
	res, err := versionToProto(v)
	if err != nil {
		return nil, err
	}
	res.Unchanged = unchanged
	return res, nil
}

func (s policyService) GetPolicy(ctx context.Context, req *portcullisv1.GetPolicyRequest) (*portcullisv1.PolicyVersion, error) {
	v, err := s.version(ctx, req.GetSandbox(), int64(req.GetVersion()))
	if err != nil {
		return nil, err
	}
	out, err := versionToProto(v)
	if err != nil {
		return nil, err
	}
	if out.Yaml, err = documentYAML(v.Document); err != nil {
		return nil, fmt.Errorf("version %d of %q: %w", v.Version, v.Sandbox, err)
	}
	return out, nil
}

func (s policyService) ListPolicyVersions(ctx context.Context, req *portcullisv1.ListPolicyVersionsRequest) (*portcullisv1.ListPolicyVersionsResponse, error) {
	list, err := s.store.ListPolicyVersions(ctx, req.GetSandbox())
	if err != nil {
		return nil, missing(err, "sandbox %q not found", req.GetSandbox())
	}
	res := &portcullisv1.ListPolicyVersionsResponse{Versions: make([]*portcullisv1.PolicyVersion, 0, len(list))}
	for _, v := range list {
		res.Versions = append(res.Versions, versionHeaderToProto(v))
	}
	return res, nil
}

func (s policyService) DiffPolicy(ctx context.Context, req *portcullisv1.DiffPolicyRequest) (*portcullisv1.DiffPolicyResponse, error) {
	from, fromPolicy, err := s.loadVersion(ctx, req.GetSandbox(), int64(req.GetFromVersion()), "from_version")
	if err != nil {
		return nil, err
	}
	to, toPolicy, err := s.loadVersion(ctx, req.GetSandbox(), int64(req.GetToVersion()), "to_version")
	if err != nil {
		return nil, err
	}
	res := &portcullisv1.DiffPolicyResponse{
		Sandbox:     req.GetSandbox(),
		FromVersion: uint32(from.Version),
		ToVersion:   uint32(to.Version),
		FromHash:    from.Hash,
		ToHash:      to.Hash,
	}
	for _, c := range policy.Diff(fromPolicy, toPolicy) {
		res.Changes = append(res.Changes, &portcullisv1.PolicyChange{Kind: c.Kind, Path: c.Path, Summary: c.Summary, Before: c.Before, After: c.After})
	}
	return res, nil
}

func (s policyService) loadVersion(ctx context.Context, sandbox string, version int64, field string) (store.PolicyVersion, *policy.Policy, error) {
	if version < 1 {
		return store.PolicyVersion{}, nil, invalidField(field, "must be >= 1")
	}
	v, err := s.version(ctx, sandbox, version)
	if err != nil {
		return store.PolicyVersion{}, nil, err
	}
	p, _, err := policy.Parse(v.Document)
	if err != nil {
		return store.PolicyVersion{}, nil, fmt.Errorf("stored version %d of %q no longer parses: %v", version, sandbox, err)
	}
	return v, p, nil
}

func (s policyService) ValidatePolicy(_ context.Context, req *portcullisv1.ValidatePolicyRequest) (*portcullisv1.ValidatePolicyResponse, error) {
	doc, err := parseDocument(req.GetDocument())
	if err != nil {
		var verr *policy.ValidationError
		if errors.As(err, &verr) {
			return &portcullisv1.ValidatePolicyResponse{Valid: false, Problems: problemsToProto(verr.Problems)}, nil
		}
		return nil, err
	}
	st, err := documentStruct(doc.canonical)
	if err != nil {
		return nil, err
	}
	return &portcullisv1.ValidatePolicyResponse{Valid: true, Warnings: problemsToProto(doc.warnings), Hash: doc.hash, Policy: st}, nil
}

// version reads one stored version (0: the current one), naming exactly
// what is missing when it is not there.
func (s policyService) version(ctx context.Context, sandbox string, version int64) (store.PolicyVersion, error) {
	return s.life.Version(ctx, sandbox, version)
}

func versionHeaderToProto(v store.PolicyVersion) *portcullisv1.PolicyVersion {
	return &portcullisv1.PolicyVersion{
		Sandbox:    v.Sandbox,
		Version:    uint32(v.Version),
		Hash:       v.Hash,
		Author:     v.Author,
		CreatedAt:  timestamppb.New(v.CreatedAt),
		Source:     v.Source,
		Provenance: v.Provenance,
	}
}

func versionToProto(v store.PolicyVersion) (*portcullisv1.PolicyVersion, error) {
	res := versionHeaderToProto(v)
	st, err := documentStruct(v.Document)
	if err != nil {
		return nil, fmt.Errorf("version %d of %q: %w", v.Version, v.Sandbox, err)
	}
	res.Policy = st
	return res, nil
}

// documentYAML is a stored canonical document as YAML, the way `policy get
// -o yaml` prints it (fields in schema order), for the console: people
// write policies in YAML.
func documentYAML(doc []byte) (string, error) {
	p, _, err := policy.Parse(doc)
	if err != nil {
		return "", fmt.Errorf("stored document no longer parses: %v", err)
	}
	out, err := policy.EncodeYAML(p)
	if err != nil {
		return "", err
	}
	return string(out), nil
}

// documentStruct turns a canonical JSON document into the Struct the API
// carries, so JSON clients see the policy as an object, not a string.
func documentStruct(doc []byte) (*structpb.Struct, error) {
	st := &structpb.Struct{}
	if err := protojson.Unmarshal(doc, st); err != nil {
		return nil, fmt.Errorf("decode stored document: %w", err)
	}
	return st, nil
}
