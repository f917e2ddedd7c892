package dataplane

import "github.com/portcullis-dev/portcullis/dataplane/sandboxdns"

// newDNS is the sandbox's DNS on the transparent side (sandboxdns): it
// answers the names some endpoint of the policy in force could match,
// from Config.Resolve, and every other name NXDOMAIN without asking
// anyone. What it answered is the NameBook transparent connections are
// judged by. A refused name is not a decision record: it names no port,
// and the advisor would draft a rule from it.
func (a *Agent) newDNS() (*sandboxdns.Server, error) {
	return sandboxdns.New(sandboxdns.Config{
		Wants: func(name string) bool {
			cur := a.current.Load()
			return cur != nil && cur.matcher.WantsName(name)
		},
		Lookup: a.Proxy.cfg.Resolve,
		Denied: func(name string) { a.log.Debug("DNS: no endpoint matches the name; answered NXDOMAIN", "name", name) },
		Logger: a.log,
	})
}
