package ocsftest

import (
	"encoding/json"
	"maps"
	"strings"
	"testing"
)

// event builds a minimal valid event of class 2004 (Detection Finding)
// or another class, with extra attributes and metadata.profiles.
func event(t *testing.T, class, activity int, profiles []string, extra map[string]any) []byte {
	t.Helper()
	md := map[string]any{"version": "1.8.0", "product": map[string]any{"name": "Portcullis", "vendor_name": "Portcullis"}}
	if profiles != nil {
		md["profiles"] = profiles
	}
	cat := class / 1000
	ev := map[string]any{
		"class_uid": class, "category_uid": cat, "activity_id": activity, "type_uid": class*100 + activity,
		"time": 1795168800000, "severity_id": 1, "metadata": md,
	}
	switch class {
	case 2004:
		ev["finding_info"] = map[string]any{"uid": "f1", "title": "t"}
	case 4002:
		ev["dst_endpoint"] = map[string]any{"hostname": "api.example.com"}
		ev["src_endpoint"] = map[string]any{"name": "orders"}
		ev["http_request"] = map[string]any{"http_method": "GET"}
	case 6003:
		ev["actor"] = map[string]any{"app_name": "/usr/bin/node"}
		ev["api"] = map[string]any{"operation": "tools/call"}
		ev["src_endpoint"] = map[string]any{"name": "orders"}
	}
	for k, v := range extra {
		ev[k] = v
	}
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A Detection Finding carrying policy must declare security_control, as
// the official OCSF 1.8.0 validator requires; the old validator, which
// added every profile's attributes to every class, let it through.
func TestProfilesHonoured(t *testing.T) {
	policy := map[string]any{"policy": map[string]any{"name": "orders", "uid": "sha256:ab"}}
	if err := Validate(event(t, 2004, 1, nil, policy)); err == nil || !strings.Contains(err.Error(), "policy is an attribute of detection_finding only with profile security_control") {
		t.Errorf("2004 with policy, no profiles: %v", err)
	}
	if err := Validate(event(t, 2004, 1, []string{"host"}, policy)); err == nil || !strings.Contains(err.Error(), "security_control") {
		t.Errorf("2004 with policy, profiles [host]: %v", err)
	}
	if err := Validate(event(t, 2004, 1, []string{"security_control"}, policy)); err != nil {
		t.Errorf("2004 with policy and security_control: %v", err)
	}
	for _, tc := range []struct {
		name     string
		class    int
		profiles []string
		extra    map[string]any
		want     string // "" = valid
	}{
		// detection_finding redefines these with "profile": null.
		{"is_alert on a finding", 2004, nil, map[string]any{"is_alert": true, "confidence_id": 3, "risk_score": 10}, ""},
		{"firewall_rule on a finding", 2004, nil, map[string]any{"firewall_rule": map[string]any{"name": "r"}}, "security_control"},
		{"attacks on a finding", 2004, nil, map[string]any{"attacks": []any{}}, "security_control"},
		{"is_alert on HTTP", 4002, nil, map[string]any{"is_alert": true}, "security_control"},
		{"action on HTTP", 4002, []string{"security_control"}, map[string]any{"action_id": 2, "disposition_id": 2}, ""},
		// HTTP Activity gets actor from the host profile; API Activity
		// defines its own.
		{"actor on HTTP", 4002, nil, map[string]any{"actor": map[string]any{"app_name": "curl"}}, "host"},
		{"actor on HTTP with host", 4002, []string{"host"}, map[string]any{"actor": map[string]any{"app_name": "curl"}}, ""},
		{"actor on API", 6003, nil, nil, ""},
		// endpoint.container comes from the container profile, at depth.
		{"container", 4002, nil, map[string]any{"dst_endpoint": map[string]any{"hostname": "h", "container": map[string]any{"name": "c"}}}, "container"},
		{"unknown profile", 4002, []string{"nope"}, nil, "no profile is defined for nope"},
		// cloud is required only of events that declare it.
		{"cloud declared", 4002, []string{"cloud"}, nil, "cloud is required"},
	} {
		err := Validate(event(t, tc.class, 1, tc.profiles, tc.extra))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want an error naming %q", tc.name, err, tc.want)
		}
	}
}

// Observables name an attribute the event may carry, with its observable
// type and value.
func TestObservables(t *testing.T) {
	obs := func(o ...map[string]any) map[string]any {
		l := []any{}
		for _, x := range o {
			l = append(l, x)
		}
		return map[string]any{"observables": l, "dst_endpoint": map[string]any{"hostname": "api.example.com", "ip": "93.184.216.34"},
			"actor": map[string]any{"app_name": "curl", "user": map[string]any{"name": "alice"}}}
	}
	for _, tc := range []struct {
		name string
		o    []map[string]any
		want string
	}{
		{"host and ip", []map[string]any{{"name": "dst_endpoint.hostname", "type_id": 1, "value": "api.example.com"}, {"name": "dst_endpoint.ip", "type_id": 2, "value": "93.184.216.34"}}, ""},
		{"user", []map[string]any{{"name": "actor.user.name", "type_id": 4, "value": "alice"}}, ""},
		{"wrong type", []map[string]any{{"name": "dst_endpoint.hostname", "type_id": 2, "value": "api.example.com"}}, "observable type 1"},
		{"wrong value", []map[string]any{{"name": "dst_endpoint.ip", "type_id": 2, "value": "10.0.0.1"}}, "is not the event's"},
		{"no such attribute", []map[string]any{{"name": "dst_endpoint.nope", "type_id": 1}}, "does not refer"},
		{"unknown type", []map[string]any{{"name": "dst_endpoint.hostname", "type_id": 1000}}, "not an observable type"},
	} {
		err := Validate(event(t, 4002, 1, []string{"host"}, obs(tc.o...)))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want an error naming %q", tc.name, err, tc.want)
		}
	}
	// An observable through a profile attribute the event does not declare.
	err := Validate(event(t, 4002, 1, nil, map[string]any{"observables": []any{map[string]any{"name": "actor.user.name", "type_id": 4}}}))
	if err == nil || !strings.Contains(err.Error(), "does not refer") {
		t.Errorf("observable through undeclared host profile: %v", err)
	}
}

// Check warns about enum siblings as OCSF's validator does: a sibling
// that is not its value's caption (type_name included: "CLASS: Other"
// under activity 99), and "Other" under 99, where the source's own word
// belongs; nested objects too. Warnings are not errors.
func TestSiblingWarnings(t *testing.T) {
	for _, tc := range []struct {
		name  string
		class int
		act   int
		extra map[string]any
		want  string // "" for no warning
	}{
		{"captions", 3004, 3, map[string]any{"activity_name": "Update", "type_name": "Entity Management: Update", "status_id": 1, "status": "Success"}, ""},
		{"own word under 99", 3004, 99, map[string]any{"activity_name": "Approve", "type_name": "Entity Management: Other"}, ""},
		{"type_name under 99", 3004, 99, map[string]any{"activity_name": "Approve", "type_name": "Entity Management: Approve"},
			`type_name "Entity Management: Approve" does not match the caption of type_uid 300499, "Entity Management: Other"`},
		{"Other under 99", 6003, 99, map[string]any{"activity_name": "Other", "type_name": "API Activity: Other"},
			`activity_name "Other" is the caption of activity_id 99`},
		{"status", 3004, 3, map[string]any{"status_id": 1, "status": "OK"}, `status "OK" does not match the caption of status_id 1, "Success"`},
		{"class's own enum", 7001, 1, map[string]any{"status_id": 3, "status": "Does Not Exist", "activity_name": "Isolate"}, ""},
		{"nested", 3004, 1, map[string]any{"entity": map[string]any{"name": "p", "type_id": 5, "type": "Rule"}},
			`entity.type "Rule" does not match the caption of type_id 5`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := map[string]any{}
			switch tc.class {
			case 3004:
				ev["entity"] = map[string]any{"name": "orders"}
			case 7001:
				ev["command_uid"] = "1"
			}
			maps.Copy(ev, tc.extra)
			warns, err := Check(event(t, tc.class, tc.act, nil, ev))
			if err != nil {
				t.Fatalf("error: %v", err)
			}
			switch got := strings.Join(warns, "; "); {
			case tc.want == "" && got != "":
				t.Errorf("warnings %s; want none", got)
			case !strings.Contains(got, tc.want):
				t.Errorf("warnings %q; want %q", got, tc.want)
			}
		})
	}
}
