package gatewayocsf_test

import (
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/internal/ocsf"
	"github.com/portcullis-dev/portcullis/internal/ocsf/gatewayocsf"
	"github.com/portcullis-dev/portcullis/internal/ocsf/ocsftest"
	"github.com/portcullis-dev/portcullis/store"
)

// A credential provider's changes are Entity Management events about the
// provider, with the sandbox an attach or detach is about.
func TestProviderAuditValidate(t *testing.T) {
	for action, name := range map[string]string{
		store.ActionProviderCreate: "Create", store.ActionProviderRotate: "Update", store.ActionProviderDelete: "Delete",
		store.ActionProviderAttach: "Attach", store.ActionProviderDetach: "Detach",
	} {
		a := store.AuditEntry{Time: at, Actor: "ada", Action: action, Target: "gh", Hash: strings.Repeat("ef", 32),
			Detail: map[string]string{"provider": "gh", "type": "bearer", "hosts": "api.github.com", "revision": "2"}}
		if strings.HasPrefix(action, "sandbox.") {
			a.Sandbox = "orders"
		}
		ev := gatewayocsf.FromAudit(a, ocsf.Gateway)
		b := encode(t, ev)
		if err := ocsftest.Validate(b); err != nil {
			t.Fatalf("%s: %v\n%s", action, err, b)
		}
		if ev.ActivityName != name || ev.Entity == nil || ev.Entity.Type != "Credential provider" || ev.Entity.UID != "gh" ||
			ev.Severity != "Medium" {
			t.Errorf("%s: activity %q entity %+v severity %q; want %q on the provider gh", action, ev.ActivityName, ev.Entity, ev.Severity, name)
		}
	}
}
