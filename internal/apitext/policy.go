package apitext

import (
	"encoding/json"
	"errors"
	"fmt"
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
