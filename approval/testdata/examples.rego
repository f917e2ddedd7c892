package portcullis.approval

# Two approvers for any new reach to a destination that carries
# credentials injected for the sandbox; one otherwise.
default approvals_required := 1

approvals_required := 2 if {
	some f in input.findings
	f.kind == "new_credentialed_reach"
}

# Auto-approve a new GET path on a host where the binary could already GET
# other paths: every finding is non-blocking (only new_path is) and every
# counterexample is a GET.
default auto_approve := false

auto_approve if {
	count(input.findings) > 0
	every f in input.findings {
		not f.blocking
		f.counterexample.http_method == "GET"
	}
}

# Never grant the cloud metadata service, whoever approves.
deny contains "cloud metadata is never granted" if {
	some f in input.findings
	f.kind == "cloud_metadata"
}
