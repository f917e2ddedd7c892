package gateway

import (
	"strings"
	"testing"

	"connectrpc.com/connect/v2"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/store"
)

// Every RPC of every service the API defines has a row in authzTable that
// says in words what it does, so no permission error falls back to an RPC
// path.
func TestEveryRPCHasWords(t *testing.T) {
	_ = portcullisv1.File_portcullis_v1_sandbox_proto // the package's files are registered
	rpcs := 0
	protoregistry.GlobalFiles.RangeFilesByPackage("portcullis.v1", func(fd protoreflect.FileDescriptor) bool {
		for i := range fd.Services().Len() {
			svc := fd.Services().Get(i)
			for j := range svc.Methods().Len() {
				procedure := "/" + string(svc.FullName()) + "/" + string(svc.Methods().Get(j).Name())
				rpcs++
				r, ok := authzTable[procedure]
				switch {
				case !ok:
					t.Errorf("%s has no row in authzTable", procedure)
				case r.public:
				case strings.TrimSpace(r.action) == "":
					t.Errorf("%s: its row says nothing of what it does (rule.to)", procedure)
				case strings.ContainsAny(r.action, "/.") || r.action != strings.ToLower(r.action[:1])+r.action[1:]:
					t.Errorf("%s: action %q should read as words after \"cannot\"", procedure, r.action)
				}
			}
		}
		return true
	})
	if rpcs < 50 {
		t.Fatalf("found %d RPCs in package portcullis.v1; the descriptors did not load", rpcs)
	}
}

func TestPermissionErrorWords(t *testing.T) {
	for _, tc := range []struct {
		procedure, role, want string
	}{
		{"/portcullis.v1.ApprovalService/ApproveProposal", store.RoleSandbox,
			"a sandbox token cannot approve proposals: that takes an admin or operator token"},
		{"/portcullis.v1.SandboxService/UnfreezeSandbox", store.RoleOperator,
			"an operator token cannot unfreeze sandboxes: that takes an admin token"},
		{"/portcullis.v1.PolicyService/GetPolicy", store.RoleSentry,
			"a sentry token cannot read policies: that takes an admin, operator or sandbox token"},
	} {
		err := authzTable[tc.procedure].denied(tc.role)
		if connect.CodeOf(err) != connect.CodePermissionDenied {
			t.Errorf("%s as %s: code %v", tc.procedure, tc.role, connect.CodeOf(err))
		}
		var ce *connect.Error
		if !asConnect(err, &ce) || ce.Message() != tc.want {
			t.Errorf("%s as %s: %v\nwant %q", tc.procedure, tc.role, err, tc.want)
		}
	}
}

func asConnect(err error, target **connect.Error) bool {
	ce, ok := err.(*connect.Error)
	*target = ce
	return ok
}
