// Package approval decides how a proposal may be approved: how many
// distinct human approvals it needs, whether it may apply with none, and
// which extra reasons refuse it. The decision is made by operator-written
// Rego rules (package portcullis.approval; see Compile for the contract)
// and then bounded by invariants the rules cannot override.
//
// The package is pure: it stores nothing and knows no gateway. Its caller
// keeps the module in the database (versioned and audited), calls Compile
// once per module version, and calls Decide with the proposal, its
// findings, its sandbox and the approvers so far.
//
// Blocking findings. Every proposal that adds access has request-level
// findings, so "a prover finding blocks auto-approval" means the blocking
// kinds: every kind except new_path, which is a new path for an HTTP
// method the same binary could already use on that destination (the "new
// GET on an already reachable host"). Blocking reports which kinds block.
// A proposal that only adds deny rules has no findings at all.
//
// Invariants, whatever the rules say:
//   - a blocking finding forbids auto-approval;
//   - a rule that fails (evaluation error, time-out, undefined or ill-typed
//     output) or asks for fewer than one approval for a proposal with
//     findings falls back to "a human must approve": one approval, no
//     auto-approval, Decision.Fallback set and the cause in the notes, for
//     the caller to log;
//   - fewer than one approval is accepted only for a proposal without
//     findings that the rules also auto-approve;
//   - no rule can ask for more than MaxApprovals approvals;
//   - a held call (Input.Kind "call": the rules also decide who may
//     approve or deny one, and how many must approve it) is never
//     auto-approved, and is refused to a decider whose role is not
//     operator or admin.
package approval
