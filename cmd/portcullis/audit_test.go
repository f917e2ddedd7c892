package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	"github.com/portcullis-dev/portcullis/store"
)

func TestAuditCLI(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	admin := gatewaytest.AdminToken
	sbToken := jsonOut(t, gw, admin, "sandbox", "create", "orders", "-f", ordersV1File)["token"].(string)
	jsonOut(t, gw, admin, "sandbox", "create", "other")
	opToken := jsonOut(t, gw, admin, "token", "create", "--role", "operator", "--name", "olive")["token"].(string)
	// bootstrap token; the first signing key; orders: sandbox, token,
	// policy; other: sandbox, token; the operator's token.
	const n = 8
	seq, head, err := gw.Store.AuditHead(t.Context())
	if err != nil || seq != n {
		t.Fatalf("AuditHead = %d, %v; want %d", seq, err, n)
	}

	// verify: human and JSON, for an operator too.
	stdout, stderr, code := cliAgainst(t, gw, opToken, "audit", "verify")
	ok(t, code, stderr)
	if want := fmt.Sprintf("audit log verified: %d entries, head %s\n", n, head); stdout != want {
		t.Errorf("audit verify:\n got %q\nwant %q", stdout, want)
	}
	js := jsonOut(t, gw, admin, "audit", "verify")
	if js["ok"] != true || fmt.Sprint(js["entries"]) != fmt.Sprint(n) || js["head_hash"] != head {
		t.Errorf("audit verify -o json = %v", js)
	}
	// A sandbox token may not read the audit log.
	if _, _, code := cliAgainst(t, gw, sbToken, "audit", "verify"); code != exitNo {
		t.Errorf("audit verify with a sandbox token: exit %d, want %d", code, exitNo)
	}

	// list: newest first, a header and one line per entry.
	stdout, stderr, code = cliAgainst(t, gw, admin, "audit", "list")
	ok(t, code, stderr)
	got := lines(stdout)
	if len(got) != n+1 || !strings.HasPrefix(got[0], "SEQ") || !strings.HasPrefix(got[1], fmt.Sprint(n)+" ") {
		t.Fatalf("audit list:\n%s", stdout)
	}
	if !strings.Contains(stdout, "policy.set") || !strings.Contains(stdout, "source=create") || !strings.Contains(stdout, "version=1") {
		t.Errorf("audit list does not show the policy entry and its detail:\n%s", stdout)
	}
	stdout, stderr, code = cliAgainst(t, gw, admin, "audit", "list", "--sandbox", "orders", "--limit", "1")
	ok(t, code, stderr)
	if got := lines(stdout); len(got) != 2 || !strings.Contains(got[1], "policy.set") || !strings.Contains(got[1], "orders") {
		t.Errorf("audit list --sandbox orders --limit 1: want orders' newest entry:\n%s", stdout)
	}
	js = jsonOut(t, gw, admin, "audit", "list", "--limit", "2")
	entries, _ := js["entries"].([]any)
	if len(entries) != 2 {
		t.Fatalf("audit list -o json: %v", js)
	}
	newest := entries[0].(map[string]any)
	hasKeys(t, newest, "seq", "time", "actor", "action", "hash", "prev_hash")
	if newest["hash"] != head || newest["prev_hash"] != entries[1].(map[string]any)["hash"] {
		t.Errorf("audit list -o json: the newest entry is not the head, or not chained to the one before: %v", entries)
	}
	for _, bad := range [][]string{{"list", "--limit", "0"}, {"list", "--limit", "1001"}, {"verify", "extra"}} {
		if _, _, code := cliAgainst(t, gw, admin, append([]string{"audit"}, bad...)...); code != exitInvalid {
			t.Errorf("audit %v: exit %d, want %d", bad, code, exitInvalid)
		}
	}

	// An edited row: verify names it and exits 1, in both output forms.
	gw.EditAuditEntry(3, "target", "forged")
	stdout, stderr, code = cliAgainst(t, gw, admin, "audit", "verify")
	if code != exitNo {
		t.Fatalf("audit verify after an edit: exit %d, want %d\nstdout %s\nstderr %s", code, exitNo, stdout, stderr)
	}
	if !strings.HasPrefix(stdout, "audit log broken at seq 3: "+store.ChainContentChanged+"\n2 entries before it verified") {
		t.Errorf("audit verify after an edit, stdout:\n%s", stdout)
	}
	if !strings.Contains(stderr, "broken at seq 3") {
		t.Errorf("audit verify after an edit, stderr:\n%s", stderr)
	}
	stdout, _, code = cliAgainst(t, gw, admin, "audit", "verify", "-o", "json")
	var res map[string]any
	if err := json.Unmarshal([]byte(stdout), &res); err != nil || code != exitNo {
		t.Fatalf("audit verify -o json after an edit: exit %d, %v\n%s", code, err, stdout)
	}
	if res["ok"] != nil || res["first_bad_seq"] != 3.0 || res["problem"] != store.ChainContentChanged || res["entries"] != 2.0 {
		t.Errorf("audit verify -o json after an edit = %v", res)
	}
}
