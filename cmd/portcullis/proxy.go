package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/portcullis-dev/portcullis/dataplane"
	"github.com/portcullis-dev/portcullis/dataplane/gatewayclient"
	"github.com/portcullis-dev/portcullis/dataplane/hold"
	"github.com/portcullis-dev/portcullis/internal/ca"
	"github.com/portcullis-dev/portcullis/internal/ocsf"
	"github.com/portcullis-dev/portcullis/internal/pprofserve"
	"github.com/portcullis-dev/portcullis/internal/rotate"
	"github.com/portcullis-dev/portcullis/internal/signing"
)

const (
	defaultProxyListen  = "127.0.0.1:3128"
	defaultProxyDataDir = "./portcullis-proxy"
)

// proxyFlags are portcullis proxy's flags.
type proxyFlags struct {
	listen, dataDir, policyFile, upstreamCA string
	transparentListen                       string
	devLoopback                             bool
	reload                                  time.Duration
	sandbox, gatewayKey, proxyID            string
	maxBackoff                              time.Duration
	insecure, exitOnAuthFailure             bool
	pprofListen                             string
	logMaxSize                              int64
	logKeep                                 int
	ocsf                                    ocsfFlags
	tracing                                 tracingFlags // --otlp-endpoint (tracing.go)
	hold                                    hold.Config  // --max-held-calls, --max-held-bytes
}

// newProxyCmd is `portcullis proxy` and `portcullis proxy ca`.
func newProxyCmd(env *environment) *cobra.Command {
	var f proxyFlags
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
			return runProxy(cmd.Context(), env, &f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.listen, "listen", defaultProxyListen, "proxy address for the sandbox's HTTP_PROXY/HTTPS_PROXY")
	fl.StringVar(&f.transparentListen, "transparent-listen", "", "also take TCP the kernel redirected to the proxy on this `ADDR` (portcullis run), judged as CONNECTs to where it was sent, and answer the sandbox's DNS over UDP on the same address (default off)")
	fl.StringVar(&f.dataDir, "data-dir", defaultProxyDataDir, "directory of the proxy's CA and decision log")
	fl.StringVar(&f.policyFile, "policy", "", "policy `FILE` (YAML or JSON), watched for changes")
	fl.StringVar(&f.upstreamCA, "upstream-ca", "", "verify upstream TLS against this PEM `FILE` instead of the system roots (tests)")
	fl.BoolVar(&f.devLoopback, "dev-allow-loopback", false, "let policies reach loopback upstreams (tests and demos only)")
	fl.DurationVar(&f.reload, "reload-interval", time.Second, "how often the policy file is checked for changes")
	fl.StringVar(&f.sandbox, "sandbox", "", "follow this sandbox's policy from the gateway (--gateway, --token-file)")
	fl.StringVar(&f.gatewayKey, "gateway-key", "", "pin the gateway's signing `KEY` (ed25519:HEX, printed by portcullis gateway); default: pinned on first contact")
	fl.BoolVar(&f.insecure, "insecure", false, "allow a plaintext http:// gateway beyond loopback (a private network such as compose's; the token crosses it in the clear)")
	fl.BoolVar(&f.exitOnAuthFailure, "exit-on-auth-failure", true, "exit (status 1) when the gateway keeps refusing the token for 10s; false keeps retrying (denying everything, or enforcing the version kept)")
	fl.DurationVar(&f.maxBackoff, "max-reconnect-delay", 30*time.Second, "longest wait before reconnecting to the gateway (waits double from 100ms, with jitter)")
	fl.StringVar(&f.proxyID, "proxy-id", "", "this proxy's name within its sandbox (default: generated once and kept in the data dir)")
	f.ocsf.add(cmd)
	fl.Int64Var(&f.logMaxSize, "decision-log-max-size", rotate.DefaultMaxSize, "rotate DATA-DIR/decisions.jsonl when it would pass this many bytes")
	fl.IntVar(&f.logKeep, "decision-log-keep", rotate.DefaultKeep, "rotated decision logs to keep (decisions.jsonl.1 newest)")
	fl.StringVar(&f.pprofListen, "pprof-listen", "", "serve Go's profiling endpoints (/debug/pprof/) on this loopback `ADDR`, e.g. 127.0.0.1:6060 (debugging; default off)")
	f.tracing.add(cmd)
	fl.IntVar(&f.hold.MaxCalls, "max-held-calls", 16, "calls held for review at once (a reviewed rule's); more are refused at once, review_busy")
	fl.Int64Var(&f.hold.MaxBytes, "max-held-bytes", 16<<20, "bytes the calls held for review may keep in memory (their bodies); past it a call is refused, review_busy")
	cmd.AddCommand(newProxyCACmd(env))
	return cmd
}

// runProxy is portcullis proxy: the flags and environment mapped to the
// proxy's Config, the Agent assembled from it (dataplane.New) and run
// until ctx ends.
func runProxy(ctx context.Context, env *environment, f *proxyFlags) error {
	if err := f.check(env); err != nil {
		return err
	}
	log, err := newLogger(env)
	if err != nil {
		return err
	}
	tracer, err := f.tracing.start(env, "portcullis-proxy", buildVersion())
	if err != nil {
		return err
	}
	defer stopTracing(tracer, log)
	cfg := dataplane.Config{
		Sandbox:          f.sandbox,
		DevAllowLoopback: f.devLoopback,
		Logger:           log,
		Tracer:           tracer.Provider(),
		// One P while requests come one at a time, unless the operator
		// chose the P count.
		AdaptProcs: env.getenv("GOMAXPROCS") == "",
		Hold:       f.hold,
		Process: dataplane.Process{
			DataDir:            f.dataDir,
			DecisionLogMaxSize: f.logMaxSize,
			DecisionLogKeep:    f.logKeep,
			TrimMemory:         true,
		},
	}
	if cfg.UpstreamRoots, err = ca.ReadPool(f.upstreamCA); err != nil {
		return usagef("--upstream-ca: %v", err)
	}
	if f.devLoopback {
		log.Warn("--dev-allow-loopback: policies may reach loopback upstreams; never use this in production")
	}
	if f.sandbox != "" {
		if cfg.Gateway, err = f.subscribeConfig(env, log); err != nil {
			return err
		}
	} else {
		cfg.PolicyFile, cfg.ReloadInterval = f.policyFile, f.reload
	}
	f.ocsf.name(env, "portcullis-proxy")
	emitters, err := f.ocsf.open(ocsf.Proxy, log)
	if err != nil {
		return err
	}
	if emitters != nil {
		cfg.OCSF = ocsf.Records{Emitters: emitters}
	}
	applyTestHooks(&cfg)
	if err := applyDrillHooks(&cfg); err != nil {
		emitters.Close()
		return err
	}
	agent, err := dataplane.New(cfg) // owns cfg.OCSF from here
	if err != nil {
		return err
	}
	defer agent.Close()
	listeners, err := dataplane.Listen(f.listen, f.transparentListen)
	if err != nil {
		return usagef("%v", err)
	}
	pp, err := pprofserve.Start(f.pprofListen, log) // nil without --pprof-listen
	if err != nil {
		listeners.Close()
		return usagef("--pprof-listen: %v", err)
	}
	defer pp.Stop()
	f.banner(env, listeners, agent.PolicyVersion(), cfg.Gateway, pp)
	return agent.Serve(ctx, listeners)
}

// check refuses, before anything starts, flags that do not go together.
func (f *proxyFlags) check(env *environment) error {
	switch {
	case f.policyFile == "" && f.sandbox == "":
		return usagef("portcullis proxy needs --policy FILE, or --sandbox NAME --token-file F to follow a gateway")
	case f.policyFile != "" && f.sandbox != "":
		return usagef("give --policy FILE or --sandbox NAME, not both")
	case f.sandbox != "" && (env.tokenFlag != "" || env.tokenFileFlag == ""):
		// Other local processes can read a command line.
		return usagef("a gateway-mode proxy takes its sandbox token only from --token-file")
	case f.logMaxSize <= 0 || f.logKeep < 0:
		return usagef("--decision-log-max-size must be above 0 and --decision-log-keep 0 or more")
	case f.pprofListen != "" && pprofserve.CheckAddr(f.pprofListen) != nil:
		return usagef("--pprof-listen %v", pprofserve.CheckAddr(f.pprofListen))
	}
	return nil
}

// banner says where the proxy listens and what it enforces.
func (f *proxyFlags) banner(env *environment, l dataplane.Listeners, version string, gw *gatewayclient.SubscribeConfig, pp *pprofserve.Server) {
	fmt.Fprintf(env.stdout, "Portcullis proxy listening on %s\n", l.Proxy.Addr())
	if l.Transparent != nil {
		fmt.Fprintf(env.stdout, "  transparent: %s (TCP, and the sandbox's DNS over UDP)\n", l.Transparent.Addr())
	}
	if gw != nil {
		fmt.Fprintf(env.stdout, "  policy:    sandbox %s from %s (%s)\n", f.sandbox, strings.Join(gw.Gateways, ", "), policyState(version, true))
		fmt.Fprintf(env.stdout, "  CA:        the sandbox's (portcullis sandbox ca %s)\n", f.sandbox)
	} else {
		fmt.Fprintf(env.stdout, "  policy:    %s (%s)\n", f.policyFile, policyState(version, false))
		fmt.Fprintf(env.stdout, "  CA:        %s (portcullis proxy ca --data-dir %s)\n", filepath.Join(f.dataDir, "ca.pem"), f.dataDir)
	}
	fmt.Fprintf(env.stdout, "  decisions: %s\n", filepath.Join(f.dataDir, dataplane.DecisionLogName))
	if pp != nil {
		fmt.Fprintf(env.stdout, "  pprof:     %s\n", pp.URL())
	}
	if d := f.ocsf.describe(); d != "" {
		fmt.Fprintf(env.stdout, "  ocsf:      %s\n", d)
	}
}

// subscribeConfig is the gateway subscription of a gateway-mode proxy
// (its data dir and proxy id come from the Config's DataDir).
func (f *proxyFlags) subscribeConfig(env *environment, log *slog.Logger) (*gatewayclient.SubscribeConfig, error) {
	if _, err := env.token(); err != nil { // fail now on a bad file
		return nil, err
	}
	urls, err := env.gatewayURLs()
	if err != nil {
		return nil, err
	}
	gateways, err := gatewayclient.CheckGatewayURLs(urls, f.insecure, log)
	if err != nil {
		return nil, asUsage(err)
	}
	var pinned ed25519.PublicKey
	if f.gatewayKey != "" {
		if pinned, err = signing.ParsePublicKey(f.gatewayKey); err != nil {
			return nil, usagef("--gateway-key: %v", err)
		}
	}
	return &gatewayclient.SubscribeConfig{
		Gateways:          gateways,
		Sandbox:           f.sandbox,
		Token:             env.token, // read again per RPC: a rotated token is picked up
		ProxyID:           f.proxyID,
		GatewayKey:        pinned,
		Build:             buildVersion(),
		MaxBackoff:        f.maxBackoff,
		Logger:            log,
		ExitOnAuthFailure: f.exitOnAuthFailure,
	}, nil
}

// policyState says what the proxy enforces: version v or, with none, that
// it denies everything (in gateway mode only until the gateway's arrives,
// moments later).
func policyState(v string, gateway bool) string {
	switch {
	case v != "":
		return v
	case gateway:
		return "waiting for the gateway's policy (denying until it arrives)"
	}
	return "no valid policy: denying everything"
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
