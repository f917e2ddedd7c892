// Package doctor is `portcullis doctor`: a deployment checked from an
// operator's seat, through the gateway's API alone — the gateway reachable
// and its build against the CLI's, the token and its role, the store (the
// gateway's readiness), the clocks (the gateway's Date against this
// host's), the signing key chain (present, each key endorsed by the one
// before it), and, for a sandbox, its proxies as the fleet recorded them
// (connected, their builds against the gateway's, the version they
// enforce and their last ACK). Each check is one line, ok or FAIL, and a
// failure names the command that fixes it. It reads no flag or
// environment variable.
package doctor

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"time"

	"connectrpc.com/connect/v2"

	"github.com/portcullis-dev/portcullis/internal/apiclient"
	"github.com/portcullis-dev/portcullis/internal/signing"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// DefaultMaxSkew is Config.MaxSkew's default: grants and tokens expire by
// the clock, so hosts that disagree by more disagree on what is allowed.
const DefaultMaxSkew = 30 * time.Second

// Config is what the checks need.
type Config struct {
	// API is the client of the gateway checked, with the token checked.
	API *apiclient.Client
	// Gateway names it in the lines (its URL, redacted).
	Gateway string
	// Build is this CLI's build (internal/version's String).
	Build string
	// Sandbox, if set, has its proxies checked too.
	Sandbox string
	// MaxSkew is the largest clock difference that passes. Default
	// DefaultMaxSkew.
	MaxSkew time.Duration
	// Now is this host's clock. Default time.Now.
	Now func() time.Time
}

// Check is one line of the report.
type Check struct {
	// Name is what was checked: "gateway", "token", "proxy p1 policy".
	Name string
	OK   bool
	// Detail says what was found; Fix, on a failure, what to run.
	Detail, Fix string
}

// ErrFailed is wrapped by Run's error when a check failed.
var ErrFailed = errors.New("checks failed")

// Run runs the checks in order, writing each line to w as it is known,
// and returns them; the error wraps ErrFailed when one failed, and the
// network's error too when the gateway did not answer. A gateway
// that does not answer, or refuses the token, ends the run there: the
// checks after it would only fail for the same reason.
func Run(ctx context.Context, cfg Config, w io.Writer) ([]Check, error) {
	if cfg.MaxSkew <= 0 {
		cfg.MaxSkew = DefaultMaxSkew
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	r := &run{cfg: cfg, w: w}
	r.all(ctx)
	failed := 0
	for _, c := range r.checks {
		if !c.OK {
			failed++
		}
	}
	switch {
	case r.unreachable != nil: // the caller may say "unavailable" by it
		return r.checks, fmt.Errorf("%d of %d %w: %w", failed, len(r.checks), ErrFailed, r.unreachable)
	case failed > 0:
		return r.checks, fmt.Errorf("%d of %d %w", failed, len(r.checks), ErrFailed)
	}
	return r.checks, nil
}

// run is one doctor run: the checks so far.
type run struct {
	cfg    Config
	w      io.Writer
	checks []Check
	// unreachable is why the gateway did not answer (nil when it did).
	unreachable error
}

// add records c and writes its line: "ok    gateway  …" or
// "FAIL  token  … — fix: …".
func (r *run) add(c Check) bool {
	r.checks = append(r.checks, c)
	if c.OK {
		fmt.Fprintf(r.w, "ok    %-22s %s\n", c.Name, c.Detail)
	} else {
		fmt.Fprintf(r.w, "FAIL  %-22s %s — fix: %s\n", c.Name, c.Detail, c.Fix)
	}
	return c.OK
}

func (r *run) ok(name, detail string) bool { return r.add(Check{Name: name, OK: true, Detail: detail}) }

func (r *run) fail(name, detail, fix string) bool {
	return r.add(Check{Name: name, Detail: detail, Fix: fix})
}

// all runs every check in order.
func (r *run) all(ctx context.Context) {
	ready, err := r.cfg.API.Ready(ctx)
	if err != nil {
		r.unreachable = err
		r.fail("gateway", fmt.Sprintf("%s does not answer: %v", r.cfg.Gateway, err),
			"give --gateway (or PORTCULLIS_GATEWAY) the URL a running 'portcullis gateway' listens on")
		return
	}
	r.ok("gateway", r.cfg.Gateway+" answers")
	if ready.Ready {
		r.ok("store", "the gateway's store answers (readyz)")
	} else {
		r.fail("store", fmt.Sprintf("the gateway is not ready: %s: %s", ready.Status, ready.Body),
			"check the gateway's --database-url or --data-dir and its log; once the database answers, readyz does: portcullis healthcheck --url "+r.cfg.Gateway+"/readyz")
	}
	r.clock(ready)
	role, ok := r.token(ctx)
	if !ok {
		return
	}
	r.keys(ctx)
	if role == "sandbox" {
		r.fail("gateway version", "a sandbox token cannot list proxies, which tells the gateway's build",
			"run doctor with an operator or admin token: portcullis token create --role operator --name WHO")
		return
	}
	res, err := r.cfg.API.Proxy.ListProxies(ctx, &portcullisv1.ListProxiesRequest{Sandbox: r.cfg.Sandbox})
	if err != nil {
		fix := "portcullis proxies list"
		if connect.CodeOf(err) == connect.CodeNotFound {
			fix = "portcullis sandbox list (the sandboxes there are)"
		}
		r.fail("gateway version", fmt.Sprintf("list proxies: %v", err), fix)
		return
	}
	gw := res.GetGatewayBuild()
	if gw == "" {
		r.fail("gateway version", "the gateway does not say its build (older than this CLI)", "upgrade the gateway to this CLI's version: "+r.cfg.Build)
	} else if why := Skew(gw, r.cfg.Build); why != "" {
		r.fail("gateway version", fmt.Sprintf("gateway %s, this CLI %s: %s", gw, r.cfg.Build, why), "use a CLI of the gateway's version ("+gw+"), or upgrade the gateway")
	} else {
		r.ok("gateway version", fmt.Sprintf("gateway %s, this CLI %s", gw, r.cfg.Build))
	}
	if r.cfg.Sandbox != "" {
		r.proxies(res.GetProxies(), gw)
	}
}

// clock compares the gateway's Date with this host's clock at the
// middle of the request (Date has a resolution of one second).
func (r *run) clock(ready apiclient.Readiness) {
	if ready.Date.IsZero() {
		r.fail("clock", "the gateway's answer has no Date header to compare with", "ask whoever fronts the gateway (a load balancer) to keep its Date header")
		return
	}
	local := ready.Sent.Add(ready.Received.Sub(ready.Sent) / 2)
	skew := ready.Date.Sub(local.Truncate(time.Second))
	if skew.Abs() > r.cfg.MaxSkew {
		r.fail("clock", fmt.Sprintf("the gateway's clock is %s from this host's (over %s): expiries and grants are judged by the clock", fmtSkew(skew), r.cfg.MaxSkew),
			"sync both hosts' clocks with NTP (timedatectl set-ntp true, or chrony)")
		return
	}
	r.ok("clock", fmt.Sprintf("the gateway's clock is within %s of this host's (%s)", r.cfg.MaxSkew, fmtSkew(skew)))
}

// fmtSkew is "2s ahead", "40s behind" (the gateway's against this host's).
func fmtSkew(d time.Duration) string {
	if d < 0 {
		return d.Abs().Round(time.Second).String() + " behind"
	}
	return d.Round(time.Second).String() + " ahead"
}

// token finds the token's role by what it may call: signing keys (any
// role but a watchdog's), tokens (admins), sandboxes (operators too).
func (r *run) token(ctx context.Context) (role string, ok bool) {
	const fix = "give --token-file (or --token, PORTCULLIS_TOKEN) a live admin or operator token; an admin makes one: portcullis token create --role operator --name WHO"
	_, err := r.cfg.API.Proxy.ListSigningKeys(ctx, &portcullisv1.ListSigningKeysRequest{})
	switch {
	case err == nil:
	case connect.CodeOf(err) == connect.CodeUnauthenticated:
		return "", r.fail("token", "the gateway refuses the token: "+message(err), fix)
	case connect.CodeOf(err) == connect.CodePermissionDenied:
		return "sentry", r.fail("token", "a sentry token: it can only send events", fix)
	default:
		return "", r.fail("token", fmt.Sprintf("check the token: %v", err), fix)
	}
	role = "sandbox"
	if _, err := r.cfg.API.Token.ListTokens(ctx, &portcullisv1.ListTokensRequest{}); err == nil {
		role = "admin"
	} else if _, err := r.cfg.API.Sandbox.ListSandboxes(ctx, &portcullisv1.ListSandboxesRequest{}); err == nil {
		role = "operator"
	}
	return role, r.ok("token", "accepted, role "+role)
}

// message is a Connect error's message, or the error.
func message(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Message()
	}
	return err.Error()
}

// keys checks the signing key chain: present, and each key endorsed by
// the one before it, as a proxy pinned to the first would follow it.
func (r *run) keys(ctx context.Context) {
	const fix = "the gateway makes its first key at start: see its log; a chain that does not verify needs a new key: portcullis signing-key rotate --data-dir DIR (or --database-url URL)"
	res, err := r.cfg.API.Proxy.ListSigningKeys(ctx, &portcullisv1.ListSigningKeysRequest{})
	if err != nil {
		r.fail("signing keys", fmt.Sprintf("list signing keys: %v", err), fix)
		return
	}
	chain := res.GetChain()
	switch {
	case len(res.GetKeys()) == 0:
		r.fail("signing keys", "the gateway has no signing key", fix)
	case len(chain) == 0:
		r.fail("signing keys", fmt.Sprintf("%d keys, without the endorsements to verify them (a gateway older than this CLI)", len(res.GetKeys())), "upgrade the gateway to this CLI's version: "+r.cfg.Build)
	default:
		newest, err := signing.Follow(ed25519.PublicKey(chain[0].GetPublicKey()), chain)
		if err != nil {
			r.fail("signing keys", fmt.Sprintf("the chain does not verify: %v", err), fix)
			return
		}
		r.ok("signing keys", fmt.Sprintf("%d %s, the chain verifies; signing with %s", len(chain), plural(len(chain), "key", "keys"), signing.FormatPublicKey(newest)))
	}
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
