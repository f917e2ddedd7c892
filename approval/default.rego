# The built-in approval rules: every proposal needs one human approval,
# and so does every held call (input.kind == "call"), by an operator or an
# admin, never by a sandbox's token.
# Replace them with `portcullis approval-policy set -f FILE.rego`; see the
# README, "Approval rules", and package approval for the contract.
package portcullis.approval

# approvals_required is how many distinct humans must approve.
default approvals_required := 1

# auto_approve lets a proposal apply without a human. A blocking prover
# finding forbids it whatever this says.
default auto_approve := false

# deny (a set of strings) holds reasons to refuse approval; none here.

# A held call is decided by a person with an operator or admin token,
# never by a sandbox (its own above all). The gateway refuses a sandbox
# token before the rules run; this says so again for the rules' readers.
deny contains "a held call is decided by an operator or an admin" if {
	input.kind == "call"
	not input.decider.role in {"operator", "admin"}
}

deny contains "a sandbox never decides its own held call" if {
	input.kind == "call"
	input.decider.sandbox == input.call.sandbox
}
