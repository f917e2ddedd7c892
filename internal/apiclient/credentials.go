package apiclient

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// CredentialsPending is a proxy that did not say it holds a sandbox's
// current credentials within the wait: its sandbox, id, the generation it
// holds and the error of its last answer, if any.
type CredentialsPending struct {
	Sandbox, ProxyID string
	Held, Want       uint64
	Error            string
}

func (p CredentialsPending) String() string {
	s := fmt.Sprintf("%s/%s holds generation %d of %d", p.Sandbox, p.ProxyID, p.Held, p.Want)
	if p.Error != "" {
		s += " (" + p.Error + ")"
	}
	return s
}

// CredentialsPendingError: proxies that did not say they hold their
// sandbox's current credentials within the wait.
type CredentialsPendingError struct {
	Wait    time.Duration
	Pending []CredentialsPending
}

func (e *CredentialsPendingError) Error() string {
	s := make([]string, len(e.Pending))
	for i, p := range e.Pending {
		s[i] = p.String()
	}
	return fmt.Sprintf("not delivered within %s to: %s", e.Wait, strings.Join(s, "; "))
}

// AwaitCredentials waits, at most timeout, until every connected proxy
// of each sandbox says it holds the sandbox's current credentials
// (ProxyStatus.credentials_generation at least the sandbox's
// credentials_generation, read first), and returns how many proxies do
// and those that did not in time (sorted). Proxies connected to other
// replicas are seen through the statuses the fleet stores.
func (c *Client) AwaitCredentials(ctx context.Context, sandboxes []string, timeout time.Duration) (delivered int, err error) {
	want := map[string]uint64{}
	for _, sb := range sandboxes {
		s, err := c.Sandbox.GetSandbox(ctx, &portcullisv1.GetSandboxRequest{Name: sb})
		if err != nil {
			return 0, err
		}
		want[sb] = s.GetCredentialsGeneration()
	}
	deadline := time.Now().Add(timeout)
	for {
		var pending []CredentialsPending
		delivered = 0
		for _, sb := range sandboxes {
			res, err := c.Proxy.ListProxies(ctx, &portcullisv1.ListProxiesRequest{Sandbox: sb})
			if err != nil {
				return 0, err
			}
			for _, p := range res.GetProxies() {
				switch {
				case !p.GetConnected():
				case p.GetCredentialsGeneration() >= want[sb] && p.GetCredentialsError() == "":
					delivered++
				default:
					pending = append(pending, CredentialsPending{Sandbox: sb, ProxyID: p.GetProxyId(),
						Held: p.GetCredentialsGeneration(), Want: want[sb], Error: p.GetCredentialsError()})
				}
			}
		}
		if len(pending) == 0 || !time.Now().Before(deadline) {
			slices.SortFunc(pending, func(a, b CredentialsPending) int {
				return strings.Compare(a.Sandbox+"/"+a.ProxyID, b.Sandbox+"/"+b.ProxyID)
			})
			if len(pending) > 0 {
				return delivered, &CredentialsPendingError{Wait: timeout, Pending: pending}
			}
			return delivered, nil
		}
		select {
		case <-ctx.Done():
			return delivered, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
