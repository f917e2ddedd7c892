package apitext

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"google.golang.org/protobuf/types/known/timestamppb"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// Providers is provider list's table. A provider's secret is never in
// an answer; the table names its fields.
func Providers(w io.Writer, providers []*portcullisv1.Provider) error {
	return table(w, func(add func(...string)) {
		for _, p := range providers {
			add(p.GetName(), p.GetType(), strings.Join(p.GetHosts(), ","), fmt.Sprint(p.GetRevision()),
				When(rotatedOrCreated(p)), ListOrNone(p.GetSandboxes()))
		}
	}, "NAME", "TYPE", "HOSTS", "REVISION", "ROTATED", "SANDBOXES")
}

// rotatedOrCreated is when the provider's secret was last set.
func rotatedOrCreated(p *portcullisv1.Provider) *timestamppb.Timestamp {
	if p.GetRotatedAt() != nil {
		return p.GetRotatedAt()
	}
	return p.GetCreatedAt()
}

// Provider is provider show's fields.
func Provider(w io.Writer, p *portcullisv1.Provider) error {
	kv := []string{
		"name", p.GetName(),
		"type", p.GetType(),
		"hosts", strings.Join(p.GetHosts(), ", "),
	}
	keys := make([]string, 0, len(p.GetSettings()))
	for k := range p.GetSettings() {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		kv = append(kv, k, Field(p.GetSettings()[k]))
	}
	kv = append(kv,
		"secret", "fields "+ListOrNone(p.GetSecretFields())+" (values are never shown)",
		"revision", fmt.Sprint(p.GetRevision()),
		"created", When(p.GetCreatedAt()), "by", Dash(p.GetCreatedBy()),
		"rotated", When(p.GetRotatedAt()), "rotated by", Dash(p.GetRotatedBy()),
		"sandboxes", ListOrNone(p.GetSandboxes()),
	)
	return Fields(w, kv...)
}

// ListOrNone joins s with commas, "none" when empty.
func ListOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
