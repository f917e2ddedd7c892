//go:build portcullis_testhook

package dataplane

import (
	"errors"
	"os"
	"strings"

	"github.com/portcullis-dev/portcullis/policy"
)

// testRefusal, in test builds only (-tags portcullis_testhook), refuses a
// policy naming a network policy called by PORTCULLIS_TEST_REFUSE, as a
// proxy too old for a new feature would: end-to-end tests use it to see a
// NACK travel from a real proxy process to proxies list.
func testRefusal(p *policy.Policy) error {
	name := os.Getenv("PORTCULLIS_TEST_REFUSE")
	if name == "" {
		return nil
	}
	if _, ok := p.NetworkPolicies[name]; ok {
		return errors.New("this proxy cannot compile network policy " + strings.TrimSpace(name) + " (test refusal)")
	}
	return nil
}
