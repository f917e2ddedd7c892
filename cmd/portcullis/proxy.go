package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/portcullis-dev/portcullis/dataplane"
	"github.com/portcullis-dev/portcullis/dataplane/decision"
	"github.com/portcullis-dev/portcullis/dataplane/gatewayclient"
	"github.com/portcullis-dev/portcullis/internal/ca"
	"github.com/portcullis-dev/portcullis/internal/exetrim"
	"github.com/portcullis-dev/portcullis/internal/ocsf"
	"github.com/portcullis-dev/portcullis/internal/rotate"
	"github.com/portcullis-dev/portcullis/internal/signing"
)

const (
	defaultProxyListen  = "127.0.0.1:3128"
	defaultProxyDataDir = "./portcullis-proxy"
	decisionLogFile     = "decisions.jsonl"
)

// newProxyCmd is `portcullis proxy` and `portcullis proxy ca`.
func newProxyCmd(env *environment) *cobra.Command {
	var (
		ocsfOpts    ocsfFlags
		listen      string
		dataDir     string
		policyFile  string
		upstreamCA  string
		devLoopback bool
		reload      time.Duration
		sandbox     string
		gatewayKey  string
		proxyID     string
		maxBackoff  time.Duration
		insecure    bool
		pprofListen string
		logMaxSize  int64
		logKeep     int
		tracing     tracingFlags // --otlp-endpoint (tracing.go)
	)
	cmd := &cobra.Command{
		Use:   "proxy --policy FILE",
		Short: "Run the enforcing proxy for a sandbox",
		Long: `Run the Portcullis proxy: the sandbox's way out. Agents use it through
HTTP_PROXY/HTTPS_PROXY. Every request is allowed or denied by the policy:
L4 endpoints by destination and calling binary, REST and MCP endpoints per
request (TLS is terminated with the proxy's CA — see 'portcullis proxy ca' —
and re-encrypted to the upstream).

--policy FILE is watched: a changed, valid file swaps in atomically; an
invalid one is refused and the last good version stays. With no valid
policy every request is denied. Decisions are written as JSON lines to
DATA-DIR/decisions.jsonl, rotated by size (--decision-log-max-size, keeping
--decision-log-keep older files as decisions.jsonl.1, .2, …). A decision
log that cannot be written or opened (a full or read-only disk) never
stops enforcement: the proxy says so in its log, keeps recent decisions
in memory, and writes again once it can. So for the data dir in gateway
mode: a version that cannot be kept there is still enforced and ACKed
(the proxy logs an error), and a restart enforces the last one kept.

In gateway mode --gateway may name several replicas of the gateway
(repeat it, or separate URLs with commas; PORTCULLIS_GATEWAY likewise),
and a name may resolve to several addresses: the proxy streams from one
replica at a time and moves to another when it fails or shuts down (at
once when the replica says it is going away), never applying a version
older than the one it holds. Decision records and policy.local's relay
follow it. Plaintext http:// beyond loopback needs --insecure, for each.

The proxy answers http://policy.local itself (never forwarded): the policy
in force (/v1/policy), recent denials with the narrowest rule that would
allow each (/v1/denials), and, in gateway mode, proposals relayed to the
gateway with the proxy's token (/v1/proposals); the same as MCP tools at
http://policy.local/mcp. The agent never holds a token.

--pprof-listen 127.0.0.1:PORT serves Go's profiling endpoints
(/debug/pprof/) on that loopback address, for profiling the proxy as it
runs: go tool pprof http://127.0.0.1:PORT/debug/pprof/profile?seconds=30.
Off by default.`,
		Example: `  portcullis proxy --policy orders.yaml
  HTTPS_PROXY=http://127.0.0.1:3128 SSL_CERT_FILE=ca.pem python3 agent.py
  portcullis proxy --sandbox orders --token-file orders.token \
    --gateway https://gw-a.internal:7070,https://gw-b.internal:7070`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			env.started = true
			switch {
			case policyFile == "" && sandbox == "":
				return usagef("portcullis proxy needs --policy FILE, or --sandbox NAME --token-file F to follow a gateway")
			case policyFile != "" && sandbox != "":
				return usagef("give --policy FILE or --sandbox NAME, not both")
			case sandbox != "" && (env.tokenFlag != "" || env.tokenFileFlag == ""):
				// Other local processes can read a command line.
				return usagef("a gateway-mode proxy takes its sandbox token only from --token-file")
			}
			if pprofListen != "" {
				if err := checkPprofAddr(pprofListen); err != nil {
					return err
				}
			}
			log, err := newLogger(env)
			if err != nil {
				return err
			}
			if err := os.MkdirAll(dataDir, 0o700); err != nil {
				return fmt.Errorf("data dir: %w", err)
			}
			tracer, err := tracing.start(env, "portcullis-proxy", buildVersion())
			if err != nil {
				return err
			}
			defer stopTracing(tracer, log)
			var proxyCA *ca.CA
			if sandbox == "" {
				// Standalone: the proxy's own CA. In gateway mode the
				// sandbox's CA comes with the first version.
				if proxyCA, err = ca.LoadOrCreate(dataDir); err != nil {
					return err
				}
			}
			var roots *x509.CertPool
			if upstreamCA != "" {
				pem, err := os.ReadFile(upstreamCA)
				if err != nil {
					return inputErr(err)
				}
				roots = x509.NewCertPool()
				if !roots.AppendCertsFromPEM(pem) {
					return usagef("--upstream-ca %s holds no PEM certificate", upstreamCA)
				}
			}
			if devLoopback {
				log.Warn("--dev-allow-loopback: policies may reach loopback upstreams; never use this in production")
			}
			if logMaxSize <= 0 || logKeep < 0 {
				return usagef("--decision-log-max-size must be above 0 and --decision-log-keep 0 or more")
			}
			out, err := rotate.Open(filepath.Join(dataDir, decisionLogFile), logMaxSize, logKeep)
			if err != nil {
				// A full or read-only data dir must not keep the proxy
				// from enforcing: it runs, and the log is opened at the
				// first write that can (decision.Log says when it can't).
				log.Error("decision log cannot be opened; enforcing anyway, decisions stay in memory until it can be written", "err", err)
				out = rotate.Later(filepath.Join(dataDir, decisionLogFile), logMaxSize, logKeep)
			}
			defer out.Close()
			cfg := dataplane.Config{
				Sandbox:          sandbox,
				DevAllowLoopback: devLoopback,
				UpstreamRoots:    roots,
				DecisionLog:      out,
				Logger:           log,
				CA:               proxyCA,
				Tracer:           tracer.Provider(),
				// One P while requests come one at a time, unless the
				// operator chose the P count.
				AdaptProcs: env.getenv("GOMAXPROCS") == "",
			}
			if sandbox != "" {
				if cfg.Gateway, err = subscribeConfig(env, log, sandbox, dataDir, gatewayKey, proxyID, maxBackoff, insecure); err != nil {
					return err
				}
			} else {
				cfg.PolicyFile, cfg.ReloadInterval = policyFile, reload
			}
			ocsfOpts.name(env, "portcullis-proxy")
			emitters, err := ocsfOpts.open(ocsf.Proxy, log)
			if err != nil {
				return err
			}
			if emitters != nil {
				// Every decision, mapped and written off the request path.
				cfg.OnRecord = func(r decision.Record) {
					emitters.Emit(func() ocsf.Event { return ocsf.FromDecision(r, ocsf.Proxy) })
				}
				// The proxy has no /metrics: its drops travel with its
				// decision records (portcullis_proxy_ocsf_dropped_total).
				cfg.Shipper.OCSFDropped = emitters.Dropped
			}
			applyTestHooks(&cfg)
			if err := applyDrillHooks(&cfg); err != nil {
				return err
			}
			agent, err := dataplane.New(cfg)
			if err != nil {
				for _, e := range emitters {
					e.Close()
				}
				return err
			}
			defer agent.Close()
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return usagef("listen on %s: %v", listen, err)
			}
			var pp *pprofServer
			if pprofListen != "" {
				if pp, err = startPprof(pprofListen, log); err != nil {
					ln.Close()
					return err
				}
				defer pp.stop()
				log.Warn("--pprof-listen: serving profiles of this process", "url", pp.url())
			}
			fmt.Fprintf(env.stdout, "Portcullis proxy listening on %s\n", ln.Addr())
			if sandbox != "" {
				fmt.Fprintf(env.stdout, "  policy:    sandbox %s from %s (%s)\n", sandbox, gatewaysForMessages(cfg.Gateway), versionOrWaiting(agent.PolicyVersion()))
				fmt.Fprintf(env.stdout, "  CA:        the sandbox's (portcullis sandbox ca %s)\n", sandbox)
			} else {
				fmt.Fprintf(env.stdout, "  policy:    %s (%s)\n", policyFile, versionOrNone(agent.PolicyVersion()))
				fmt.Fprintf(env.stdout, "  CA:        %s (portcullis proxy ca --data-dir %s)\n", filepath.Join(dataDir, "ca.pem"), dataDir)
			}
			fmt.Fprintf(env.stdout, "  decisions: %s\n", filepath.Join(dataDir, decisionLogFile))
			if pp != nil {
				fmt.Fprintf(env.stdout, "  pprof:     %s\n", pp.url())
			}
			ctx, stop := context.WithCancel(cmd.Context())
			var released sync.WaitGroup
			released.Go(func() { trimProxyMemory(ctx, agent, log) })
			defer func() {
				stop()
				released.Wait()
			}()
			if emitters == nil {
				return agent.Run(cmd.Context(), ln)
			}
			fmt.Fprintf(env.stdout, "  ocsf:      %s\n", ocsfOpts.describe())
			done := make(chan struct{})
			go func() { emitters.Run(ctx); close(done) }()
			err = agent.Run(cmd.Context(), ln)
			stop() // after the agent: its last decisions are queued
			<-done
			if n := emitters.Dropped(); n > 0 {
				log.Warn("OCSF events were dropped", "dropped", n)
			}
			return err
		},
	}
	cmd.Flags().StringVar(&listen, "listen", defaultProxyListen, "proxy address for the sandbox's HTTP_PROXY/HTTPS_PROXY")
	cmd.Flags().StringVar(&dataDir, "data-dir", defaultProxyDataDir, "directory of the proxy's CA and decision log")
	cmd.Flags().StringVar(&policyFile, "policy", "", "policy `FILE` (YAML or JSON), watched for changes")
	cmd.Flags().StringVar(&upstreamCA, "upstream-ca", "", "verify upstream TLS against this PEM `FILE` instead of the system roots (tests)")
	cmd.Flags().BoolVar(&devLoopback, "dev-allow-loopback", false, "let policies reach loopback upstreams (tests and demos only)")
	cmd.Flags().DurationVar(&reload, "reload-interval", time.Second, "how often the policy file is checked for changes")
	cmd.Flags().StringVar(&sandbox, "sandbox", "", "follow this sandbox's policy from the gateway (--gateway, --token-file)")
	cmd.Flags().StringVar(&gatewayKey, "gateway-key", "", "pin the gateway's signing `KEY` (ed25519:HEX, printed by portcullis gateway); default: pinned on first contact")
	cmd.Flags().BoolVar(&insecure, "insecure", false, "allow a plaintext http:// gateway beyond loopback (a private network such as compose's; the token crosses it in the clear)")
	cmd.Flags().DurationVar(&maxBackoff, "max-reconnect-delay", 30*time.Second, "longest wait before reconnecting to the gateway (waits double from 100ms, with jitter)")
	cmd.Flags().StringVar(&proxyID, "proxy-id", "", "this proxy's name within its sandbox (default: generated once and kept in the data dir)")
	ocsfOpts.add(cmd)
	cmd.Flags().Int64Var(&logMaxSize, "decision-log-max-size", rotate.DefaultMaxSize, "rotate DATA-DIR/decisions.jsonl when it would pass this many bytes")
	cmd.Flags().IntVar(&logKeep, "decision-log-keep", rotate.DefaultKeep, "rotated decision logs to keep (decisions.jsonl.1 newest)")
	cmd.Flags().StringVar(&pprofListen, "pprof-listen", "", "serve Go's profiling endpoints (/debug/pprof/) on this loopback `ADDR`, e.g. 127.0.0.1:6060 (debugging; default off)")
	tracing.add(cmd)
	cmd.AddCommand(newProxyCACmd(env))
	return cmd
}

// subscribeConfig is the gateway subscription of a gateway-mode proxy.
func subscribeConfig(env *environment, log *slog.Logger, sandbox, dataDir, gatewayKey, proxyID string, maxBackoff time.Duration, insecure bool) (*gatewayclient.SubscribeConfig, error) {
	if _, err := env.token(); err != nil { // fail now on a bad file
		return nil, err
	}
	urls, err := env.gatewayURLs()
	if err != nil {
		return nil, err
	}
	var gateways []string
	for _, u := range urls {
		if u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
			return nil, usagef("gateway URL %s: want http(s)://HOST:PORT, without credentials or a path", u.Redacted())
		}
		if u.Scheme == "http" && !isLoopbackHost(u.Hostname()) {
			if !insecure {
				return nil, usagef("refusing to send the sandbox token in plaintext to %s: use https://, or --insecure on a private network", u.Redacted())
			}
			log.Warn("--insecure: the sandbox token crosses the network in plaintext", "gateway", u.Redacted())
		}
		gateways = append(gateways, u.String())
	}
	var pinned ed25519.PublicKey
	if gatewayKey != "" {
		if pinned, err = signing.ParsePublicKey(gatewayKey); err != nil {
			return nil, usagef("--gateway-key: %v", err)
		}
	}
	if proxyID == "" {
		if proxyID, err = keptProxyID(dataDir); err != nil {
			return nil, err
		}
	}
	return &gatewayclient.SubscribeConfig{
		Gateways:   gateways,
		Sandbox:    sandbox,
		Token:      env.token, // read again per RPC: a rotated token is picked up
		ProxyID:    proxyID,
		DataDir:    dataDir,
		GatewayKey: pinned,
		Build:      buildVersion(),
		MaxBackoff: maxBackoff,
		Logger:     log,
	}, nil
}

// gatewaysForMessages lists the replicas a proxy follows.
func gatewaysForMessages(c *gatewayclient.SubscribeConfig) string {
	return strings.Join(c.Gateways, ", ")
}

// keptProxyID returns the proxy id kept in dataDir, creating one (host
// name and a random suffix) on first start.
func keptProxyID(dataDir string) (string, error) {
	path := filepath.Join(dataDir, "proxy-id")
	if b, err := os.ReadFile(path); err == nil {
		if id := strings.TrimSpace(string(b)); id != "" {
			return id, nil
		}
	}
	host, _ := os.Hostname()
	host = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' {
			return r
		}
		return -1
	}, host)
	if host == "" {
		host = "proxy"
	}
	var b [3]byte
	rand.Read(b[:])
	id := fmt.Sprintf("%s-%x", host, b)
	if err := os.WriteFile(path, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("keep proxy id: %w", err)
	}
	return id, nil
}

func isLoopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// versionOrWaiting is versionOrNone for a proxy following a gateway: with
// no kept version it is about to receive one, and denies until then.
func versionOrWaiting(v string) string {
	if v == "" {
		return "waiting for the gateway's policy (denying until it arrives)"
	}
	return v
}

func versionOrNone(v string) string {
	if v == "" {
		return "no valid policy: denying everything"
	}
	return v
}

// newProxyCACmd is `portcullis proxy ca`.
func newProxyCACmd(env *environment) *cobra.Command {
	var (
		dataDir string
		create  bool
	)
	cmd := &cobra.Command{
		Use:   "ca [--data-dir DIR] [--create]",
		Short: "Print the proxy's CA certificate (PEM), which the sandbox must trust",
		Long: `Print the CA certificate a standalone proxy uses to terminate TLS for
inspected endpoints: the one in --data-dir, which the proxy creates on its
first start. A directory without a CA is refused, and nothing is created,
unless --create asks for a new CA there (to hand its certificate to the
sandbox before the proxy first starts). A proxy that follows a gateway
uses its sandbox's CA instead: portcullis sandbox ca NAME.`,
		Example: `  portcullis proxy ca --data-dir ./portcullis-proxy > ca.pem
  portcullis proxy ca --data-dir /data --create > ca.pem
  SSL_CERT_FILE=ca.pem HTTPS_PROXY=http://127.0.0.1:3128 curl https://api.example.com/`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			env.started = true
			if !create {
				if _, err := os.Stat(filepath.Join(dataDir, "ca.pem")); errors.Is(err, os.ErrNotExist) {
					return inputErr(fmt.Errorf("no proxy CA in %s (nothing was created): give the --data-dir of a proxy that has run, or --create to make a CA there now", dataDir))
				}
			}
			proxyCA, err := ca.LoadOrCreate(dataDir)
			if err != nil {
				return err
			}
			_, err = env.stdout.Write(proxyCA.CertPEM())
			return err
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", defaultProxyDataDir, "directory of the proxy's CA")
	cmd.Flags().BoolVar(&create, "create", false, "create a CA in --data-dir if it has none")
	return cmd
}

// The proxy's memory between bursts of traffic. Linux maps an
// executable's code in 64 KiB windows around each page a fault touches,
// and Go runs every linked package's init before main, so by the time the
// proxy serves most of its binary is mapped (17 of the image's 22 MiB)
// though an idle proxy runs about 3 MiB of it. A second after its first
// policy version, and again whenever it has decided nothing for a minute
// after deciding something, the proxy drops its mappings of its
// executable's read-only pages (internal/exetrim; what it runs comes back
// at its next touch, from the page cache) and, after traffic, returns the
// heap it no longer uses to the system.
const (
	// startupSettle is how long after the first policy version the first
	// release waits: the work of that version (compiling it, the ACK) is
	// done by then.
	startupSettle = time.Second
	// idleTrimAfter is how long without a decision makes a proxy that has
	// served since its last release release again.
	idleTrimAfter = time.Minute
)

// trimmer releases the proxy's memory as described above; the functions
// and durations are fields so that tests can drive it.
type trimmer struct {
	enforcing <-chan struct{}    // closed at the first policy version
	decided   func() uint64      // the proxy's decision count
	release   func(traffic bool) // drop the mappings; after traffic, the free heap too
	settle    time.Duration
	idle      time.Duration
}

// run releases once settle after enforcing closes, then after every
// spell of traffic followed by idle without a decision; it returns when
// ctx ends.
func (t trimmer) run(ctx context.Context) {
	select {
	case <-t.enforcing:
	case <-ctx.Done():
		return
	}
	timer := time.NewTimer(t.settle)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
		return
	}
	released := t.decided()
	t.release(false)
	tick := time.NewTicker(t.idle)
	defer tick.Stop()
	last := released
	for {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
		n := t.decided()
		if n == last && n != released {
			t.release(true)
			released = n
		}
		last = n
	}
}

// trimProxyMemory runs the proxy's trimmer until ctx ends.
func trimProxyMemory(ctx context.Context, agent *dataplane.Agent, log *slog.Logger) {
	trimmer{
		enforcing: agent.Enforcing(),
		decided:   agent.Decided,
		settle:    startupSettle,
		idle:      idleTrimAfter,
		release: func(traffic bool) {
			if traffic {
				debug.FreeOSMemory()
			}
			n, err := exetrim.Release()
			if err != nil {
				log.Warn("could not release the executable's pages", "err", err)
				return
			}
			log.Debug("released the executable's pages", "bytes", n, "after_traffic", traffic)
		},
	}.run(ctx)
}
