package apitext

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/portcullis-dev/portcullis/policy"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"google.golang.org/protobuf/types/known/structpb"
)

// HashLabel is "sha256 3f2a…" or "" for no hash.
func HashLabel(h string) string {
	if h == "" {
		return ""
	}
	return "sha256 " + ShortHash(h)
}

// Provenance renders a version's source and provenance: "rollback (to_version=2)".
func Provenance(v *portcullisv1.PolicyVersion) string {
	src := Dash(v.GetSource())
	p := v.GetProvenance()
	if len(p) == 0 {
		return src
	}
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + p[k]
	}
	return src + " (" + strings.Join(parts, ", ") + ")"
}

// ApprovalPolicyLabel is "version 2 (sha256 3f2a…) by admin at 2026-…", or
// "version 0 (built-in, sha256 …)".
func ApprovalPolicyLabel(ap *portcullisv1.ApprovalPolicy) string {
	if ap.GetVersion() == 0 {
		return fmt.Sprintf("version 0 (built-in, %s)", Dash(HashLabel(ap.GetHash())))
	}
	return fmt.Sprintf("version %d (%s) by %s at %s", ap.GetVersion(), Dash(HashLabel(ap.GetHash())), Dash(ap.GetAuthor()), When(ap.GetCreatedAt()))
}

// PolicyYAML turns the policy document of an API response into canonical
// YAML, through the same parser and encoder as policy fmt (errors say
// to try -o json, the document as sent).
func PolicyYAML(doc *structpb.Struct) ([]byte, error) {
	if doc == nil {
		return nil, errors.New("the gateway sent a version without its document")
	}
	data, err := json.Marshal(doc.AsMap())
	if err != nil {
		return nil, fmt.Errorf("encode the document as JSON: %w", err)
	}
	p, _, err := policy.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("the gateway's document does not parse with this client (try -o json): %w", err)
	}
	out, err := policy.EncodeYAML(p)
	if err != nil {
		return nil, fmt.Errorf("encode the document as YAML: %w", err)
	}
	return out, nil
}

// PolicyVersion writes a version as `policy get` shows it: its fields,
// then its document as canonical YAML after "---"; yamlOnly writes the
// document alone (-o yaml, ready to edit and set again).
func PolicyVersion(w io.Writer, pv *portcullisv1.PolicyVersion, yamlOnly bool) error {
	doc, err := PolicyYAML(pv.GetPolicy())
	if err != nil {
		return err
	}
	if yamlOnly {
		_, err = w.Write(doc)
		return err
	}
	if err := Fields(w,
		"sandbox", pv.GetSandbox(),
		"version", fmt.Sprint(pv.GetVersion()),
		"hash", Dash(pv.GetHash()),
		"source", Provenance(pv),
		"author", Dash(pv.GetAuthor()),
		"created", When(pv.GetCreatedAt()),
	); err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "---\n%s", doc)
	return err
}

// PolicyDiff writes a DiffPolicy answer as `policy diff` shows it: the two
// versions, then a line per change.
func PolicyDiff(w io.Writer, sandbox string, res *portcullisv1.DiffPolicyResponse) {
	fmt.Fprintf(w, "%s: version %d (%s) → %d (%s)\n", sandbox,
		res.GetFromVersion(), HashLabel(res.GetFromHash()), res.GetToVersion(), HashLabel(res.GetToHash()))
	if len(res.GetChanges()) == 0 {
		fmt.Fprintln(w, "no changes")
	}
	for _, c := range res.GetChanges() {
		fmt.Fprintln(w, ChangeLine(c))
	}
}

// Stored is what `policy set` and `policy rollback` say of their answer:
// the version stored (and the proposals whose grants it took away), or
// that the document changed nothing; from > 0 is the version a rollback
// took the content of.
func Stored(sandbox string, pv *portcullisv1.PolicyVersion, from int64) string {
	if ids := pv.GetProvenance()["removed_grants"]; ids != "" && !pv.GetUnchanged() {
		return fmt.Sprintf("%s: version %d (%s), taking away what proposals %s granted", sandbox, pv.GetVersion(), HashLabel(pv.GetHash()), OneLine(ids))
	}
	switch {
	case pv.GetUnchanged() && from > 0:
		return fmt.Sprintf("%s: unchanged, still version %d (same content as version %d)", sandbox, pv.GetVersion(), from)
	case pv.GetUnchanged():
		return fmt.Sprintf("%s: unchanged, still version %d", sandbox, pv.GetVersion())
	case from > 0:
		return fmt.Sprintf("%s: version %d (%s), the content of version %d", sandbox, pv.GetVersion(), HashLabel(pv.GetHash()), from)
	}
	return fmt.Sprintf("%s: version %d (%s)", sandbox, pv.GetVersion(), HashLabel(pv.GetHash()))
}

// RemovedGrants writes the grants a refused `policy set` would take away,
// a line each, for the operator to confirm.
func RemovedGrants(w io.Writer, grants []*portcullisv1.RemovedGrant) {
	fmt.Fprintln(w, "This document takes away what these approved proposals granted:")
	for _, g := range grants {
		fmt.Fprintf(w, "  proposal %d: %s  (%s)\n", g.GetProposal(), OneLine(g.GetGranted()), Dash(Clip(g.GetRationale(), 60)))
	}
}
