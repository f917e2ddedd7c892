package gateway_test

import (
	"net/http"
	"testing"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connecthttp"

	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
	"github.com/portcullis-dev/portcullis/store"
)

func newAuditClient(baseURL, token string) portcullisv1connect.AuditServiceClient {
	return portcullisv1connect.NewAuditServiceClient(connect.NewClient(connecthttp.NewTransport(http.DefaultClient, baseURL), gatewaytest.Bearer(token)))
}

// TestAudit lists and verifies the audit log through the API on both
// engines, and finds an edited row.
func TestAudit(t *testing.T) {
	for _, engine := range gatewaytest.Engines {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			gw := gatewaytest.Start(t, engine)
			admin := newConnectAPI(t, gw.URL, gatewaytest.AdminToken)
			mustCreateSandbox(t, admin, "box")
			mustCreateSandbox(t, admin, "other")
			op, err := admin.token.CreateToken(ctx, &portcullisv1.CreateTokenRequest{Name: "olive", Role: "operator"})
			if err != nil {
				t.Fatal(err)
			}
			audit := newAuditClient(gw.URL, op.GetToken())

			// bootstrap token, the first signing key, 2 × (sandbox,
			// token), operator token
			const n = 7
			all, err := audit.ListAudit(ctx, &portcullisv1.ListAuditRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if len(all.GetEntries()) != n {
				t.Fatalf("ListAudit = %d entries, want %d", len(all.GetEntries()), n)
			}
			prev := ""
			for i, e := range all.GetEntries() {
				if e.GetSeq() != int64(n-i) || len(e.GetHash()) != 64 || e.GetTime() == nil {
					t.Errorf("entry %d = %v; want seq %d (newest first) with its hash and time", i, e, n-i)
				}
				if i > 0 && e.GetHash() != prev {
					t.Errorf("entry %d hash %s is not the prev_hash of the entry after it (%s)", e.GetSeq(), e.GetHash(), prev)
				}
				prev = e.GetPrevHash()
			}
			if prev != "" {
				t.Errorf("first entry's prev_hash = %q, want empty", prev)
			}
			box, err := audit.ListAudit(ctx, &portcullisv1.ListAuditRequest{Sandbox: "box", Limit: 1})
			if err != nil {
				t.Fatal(err)
			}
			if es := box.GetEntries(); len(es) != 1 || es[0].GetSandbox() != "box" || es[0].GetAction() != store.ActionTokenCreate {
				t.Errorf("ListAudit(box, limit 1) = %v; want the box's token entry", es)
			}
			if _, err := audit.ListAudit(ctx, &portcullisv1.ListAuditRequest{Limit: 1001}); connect.CodeOf(err) != connect.CodeInvalidArgument {
				t.Errorf("ListAudit(limit 1001) = %v, want InvalidArgument", err)
			}
			// Pages: before_seq lists the entries older than it.
			page, err := audit.ListAudit(ctx, &portcullisv1.ListAuditRequest{Limit: 2, BeforeSeq: 5})
			if err != nil {
				t.Fatal(err)
			}
			if es := page.GetEntries(); len(es) != 2 || es[0].GetSeq() != 4 || es[1].GetSeq() != 3 {
				t.Errorf("ListAudit(limit 2, before 5) = %v, want entries 4 and 3", es)
			}
			older, err := audit.ListAudit(ctx, &portcullisv1.ListAuditRequest{Sandbox: "box", BeforeSeq: box.GetEntries()[0].GetSeq()})
			if err != nil {
				t.Fatal(err)
			}
			if es := older.GetEntries(); len(es) != 1 || es[0].GetSandbox() != "box" || es[0].GetAction() != store.ActionSandboxCreate {
				t.Errorf("ListAudit(box, before its token entry) = %v; want the box's creation alone", es)
			}
			if _, err := audit.ListAudit(ctx, &portcullisv1.ListAuditRequest{BeforeSeq: -1}); connect.CodeOf(err) != connect.CodeInvalidArgument {
				t.Errorf("ListAudit(before -1) = %v, want InvalidArgument", err)
			}

			v, err := audit.VerifyAudit(ctx, &portcullisv1.VerifyAuditRequest{})
			if err != nil {
				t.Fatal(err)
			}
			seq, head, err := gw.Store.AuditHead(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !v.GetOk() || v.GetEntries() != n || seq != n || v.GetHeadHash() != head || v.GetFirstBadSeq() != 0 || v.GetProblem() != "" {
				t.Fatalf("VerifyAudit = %v; want ok, %d entries, head %s", v, n, head)
			}

			gw.EditAuditEntry(3, "actor", "mallory")
			v, err = audit.VerifyAudit(ctx, &portcullisv1.VerifyAuditRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if v.GetOk() || v.GetFirstBadSeq() != 3 || v.GetProblem() != store.ChainContentChanged || v.GetEntries() != 2 {
				t.Fatalf("VerifyAudit after an edit = %v; want not ok at seq 3: %s", v, store.ChainContentChanged)
			}
		})
	}
}
