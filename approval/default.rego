# The built-in approval rules: every proposal needs one human approval.
# Replace them with `portcullis approval-policy set -f FILE.rego`; see the
# README, "Approval rules", and package approval for the contract.
package portcullis.approval

# approvals_required is how many distinct humans must approve.
default approvals_required := 1

# auto_approve lets a proposal apply without a human. A blocking prover
# finding forbids it whatever this says.
default auto_approve := false

# deny (a set of strings) holds reasons to refuse approval; none here.
