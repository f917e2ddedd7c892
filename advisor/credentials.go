package advisor

import (
	"maps"
	"slices"

	"github.com/portcullis-dev/portcullis/policy"
	"github.com/portcullis-dev/portcullis/prover"
)

// Credentials: a proposal never adds or widens a credential binding. Every
// credential field of an endpoint (credentialFields) is refused in an
// add_rule, each at its own field path; add_allow_rules and add_deny_rules
// carry rules only, and add_binary names endpoints that exist. What a
// proposal may still do near a credential, within the narrowness rules,
// is add access to a destination where one is injected: an add_rule
// endpoint at (or whose host pattern overlaps) a credential-bound host, a
// binary or a rule on a credential-bound endpoint. Its findings carry the
// credentialed mark (prover.Finding.Credentialed, new_credentialed_reach,
// l7_bypass_credentialed): Evaluate proves with the caller's credentialed
// destinations (the attached providers' hosts and `sandbox credentials`)
// and the base's credential-bound endpoints (boundDestinations).

// credentialFields are the endpoint fields that bind, sign with or let
// through a credential.
var credentialFields = []string{
	"websocket_credential_rewrite", "request_body_credential_rewrite", "allow_uninspected_credentials",
	"credential_signing", "signing_service", "signing_region", "credential_binding",
}

// boundDestinations returns creds and, after them, the host (pattern) and
// each port of every endpoint of p that carries a credential_binding, unless
// creds already lists it: a binding's destination is credentialed whether
// or not the caller named it, so the mark never depends on the caller's
// list being complete. (An endpoint with allowed_ips and no host has no
// host to name; its binding is the caller's to list.)
func boundDestinations(creds []prover.HostPort, p *policy.Policy) []prover.HostPort {
	if p == nil {
		return creds
	}
	out := slices.Clone(creds)
	for _, key := range slices.Sorted(maps.Keys(p.NetworkPolicies)) {
		e := p.NetworkPolicies[key]
		if e == nil {
			continue
		}
		for _, ep := range e.Endpoints {
			if ep == nil || ep.CredentialBinding == nil || ep.Host == "" {
				continue
			}
			for _, port := range policy.EndpointPorts(ep) {
				hp := prover.HostPort{Host: policy.NormalizeHost(ep.Host), Port: port}
				if !slices.ContainsFunc(out, func(c prover.HostPort) bool {
					return c.Port == hp.Port && policy.NormalizeHost(c.Host) == hp.Host
				}) {
					out = append(out, hp)
				}
			}
		}
	}
	return out
}
