package policy

import (
	"fmt"
	"strings"
)

// What the data plane's compiled matcher (dataplane/match) shares with
// Decide, exported here so the two cannot drift apart: the matcher must
// agree with Decide on every field of every decision, the reason included.

// DefaultDenyReason is the reason of a default deny of r: no endpoint
// matches its destination (entries empty), or entries (each
// "network_policies.KEY", in endpoint order, without repeats) match it but
// do not list the binary.
func DefaultDenyReason(r *Request, entries []string) string {
	who := r.Binary
	if who == "" {
		who = "an unidentified binary"
	}
	dest := fmt.Sprintf("%s:%d", r.Host, r.Port)
	if r.HTTPMethod != "" {
		dest += " (" + strings.ToUpper(r.HTTPMethod) + " " + r.Path + ")"
	}
	if len(entries) > 0 {
		return fmt.Sprintf("%s may not reach %s: %s do not list that binary", who, dest, strings.Join(entries, ", "))
	}
	return fmt.Sprintf("no network policy allows %s to reach %s (default deny)", who, dest)
}
