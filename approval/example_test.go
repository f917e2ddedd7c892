package approval_test

import (
	"context"
	"fmt"

	"github.com/portcullis-dev/portcullis/approval"
)

func Example() {
	rules, err := approval.Compile(`package portcullis.approval

default approvals_required := 1
approvals_required := 2 if {
	some f in input.findings
	f.credentialed
}

default auto_approve := false
auto_approve if {
	every f in input.findings { not f.blocking }
}
`)
	if err != nil {
		panic(err)
	}
	in := approval.Input{Findings: []approval.FindingInput{{Kind: "new_credentialed_reach", Blocking: true, Credentialed: true}}}
	d := rules.Decide(context.Background(), in)
	fmt.Println(d.Required, d.AutoApprove, d.Notes)
	fmt.Println(d.Approved([]string{"alice"}), d.Approved([]string{"alice", "bob"}))
	// Output:
	// 2 false []
	// false true
}
