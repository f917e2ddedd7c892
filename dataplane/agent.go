package dataplane

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/portcullis-dev/portcullis/dataplane/gatewayclient"
	"github.com/portcullis-dev/portcullis/dataplane/sandboxdns"
)

// Agent is one running proxy with everything that feeds it: the policy
// source (a watched file, or the gateway subscription with its decision
// shipper and policy.local's advisor relay), the decision log and the CA,
// and what its process adds (Config.Process: the data dir, OCSF events,
// the memory trimmer). It is the only way to run a proxy, and it owns
// every goroutine it starts: Run returns only once all of them have ended.
//
// The embedded Proxy is the proxy's state, for callers in the same
// process (tests, benchmarks): the policy in force, the decision ring,
// SetPolicy for a policy given in process.
type Agent struct {
	*Proxy
	cfg     Config
	sub     *gatewayclient.Subscriber // gateway mode only
	shipper *gatewayclient.Shipper    // gateway mode only
	logFile io.Closer                 // the decision log New opened in DataDir
	ocsf    RecordSink                // until Run runs it

	closeOnce sync.Once
	closeErr  error
}

// New assembles a proxy from cfg and brings it to the policy it starts
// with: the policy file (cfg.PolicyFile), or the version the gateway
// subscription kept (cfg.Gateway). Neither failing stops it: with no
// valid policy every request is denied until one arrives. With neither
// set the proxy enforces nothing until SetPolicy. New prepares the data
// dir (cfg.DataDir) but serves nothing and dials nothing (the gateway is
// dialled on first use, by Run); the Agent owns cfg.OCSF from here, and
// Close releases what New prepared if Run never runs. An error is a data
// dir that cannot be prepared or a configuration the subscription
// refuses.
func New(cfg Config) (_ *Agent, err error) {
	a := &Agent{ocsf: cfg.OCSF}
	defer func() {
		if err != nil {
			a.Close()
		}
	}()
	if cfg.PolicyFile != "" && cfg.Gateway != nil {
		return nil, errors.New("dataplane: a policy file or a gateway, not both")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if a.logFile, err = cfg.prepare(); err != nil {
		return nil, err
	}
	if cfg.OCSF != nil {
		// Every decision, mapped and written off the request path.
		cfg.OnRecord = chainRecords(cfg.OnRecord, cfg.OCSF.Offer)
		if cfg.Shipper.OCSFDropped == nil {
			cfg.Shipper.OCSFDropped = cfg.OCSF.Dropped
		}
	}
	if cfg.Gateway != nil {
		// Decision records go to the gateway too (portcullis logs).
		if cfg.Shipper.Logger == nil {
			cfg.Shipper.Logger = cfg.Logger
		}
		a.shipper = gatewayclient.NewShipper(cfg.Shipper)
		cfg.OnRecord = chainRecords(cfg.OnRecord, a.shipper.Offer)
		cfg.OnToolDefinition = chainRecords(cfg.OnToolDefinition, a.shipper.OfferDefinition)
		if cfg.Sandbox == "" {
			cfg.Sandbox = cfg.Gateway.Sandbox
		}
	}
	a.Proxy = newProxy(cfg)
	a.cfg = cfg
	switch {
	case cfg.Gateway != nil:
		gw := *cfg.Gateway
		if gw.Logger == nil {
			gw.Logger = cfg.Logger
		}
		if gw.Tracer == nil {
			gw.Tracer = cfg.Tracer
		}
		if gw.Now == nil {
			gw.Now = cfg.Now
		}
		gw.Credentials = a.creds
		sub, err := gatewayclient.NewSubscriber(gw, a.Proxy)
		if err != nil {
			return nil, err
		}
		a.sub = sub
		// Grants end by the later of the two clocks (Proxy.now).
		a.gatewayAhead = sub.GatewayAhead
		// policy.local relays the agent's proposals with the sandbox
		// token the subscription carries, once the denial they quote has
		// been shipped.
		a.local.SetAdvisor(sub.AdvisorClient(), a.shipper.Flush)
		a.held.SetFiler(sub.HoldFiler())
		if err := sub.Restore(); err != nil && !errors.Is(err, gatewayclient.ErrNoState) {
			cfg.Logger.Error("the kept policy version was refused; denying every request until the gateway answers", "err", err)
		}
	case cfg.PolicyFile != "":
		if err := a.LoadFile(cfg.PolicyFile); err != nil {
			// Start anyway, denying everything, so a fixed file is picked up.
			cfg.Logger.Error("no valid policy yet; denying every request", "err", err)
		}
	}
	return a, nil
}

// chainRecords hands every record (or definition change) to both
// consumers (either may be nil).
func chainRecords[R any](first, then func(R)) func(R) {
	if first == nil {
		return then
	}
	return func(r R) { first(r); then(r) }
}

// Run serves proxy clients on ln: Serve with only the proxy listener.
func (a *Agent) Run(ctx context.Context, ln net.Listener) error {
	return a.Serve(ctx, Listeners{Proxy: ln})
}

// Listeners are what an Agent serves; Serve closes them when it stops
// serving.
type Listeners struct {
	// Proxy takes proxy clients (HTTP_PROXY/HTTPS_PROXY): CONNECT and
	// absolute-form HTTP requests. Required.
	Proxy net.Listener
	// Transparent, if set, takes TCP connections the kernel redirected
	// to the proxy (NAT), each judged as a CONNECT to where it was sent
	// (transparent.go).
	Transparent net.Listener
	// DNS, if set, takes the sandbox's DNS queries (UDP, redirected there
	// with its TCP): the proxy answers them (dns.go), and judges the
	// Transparent listener's connections by the names it gave.
	DNS net.PacketConn
}

// Serve serves the listeners, and keeps the policy in step with its
// source, until ctx ends; then it stops serving, waits for every goroutine
// it started (the subscription, the shipper, the file watcher, the memory
// trimmer, the servers' own, and last the OCSF sink) and releases the
// gateway connections and the decision log file. It returns a server's
// error if serving failed, the subscription's if the gateway kept refusing
// the token (gatewayclient.ErrTokenRefused, with ExitOnAuthFailure), nil
// after ctx ended.
func (a *Agent) Serve(ctx context.Context, l Listeners) error {
	defer a.Close()
	var dns *sandboxdns.Server
	if l.DNS != nil {
		var err error
		if dns, err = a.newDNS(); err != nil {
			return err
		}
		a.Proxy.cfg.Names = dns // before serving: no connection reads it yet
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var feeders sync.WaitGroup
	var subErr error // the subscription's, read after feeders.Wait
	if a.cfg.TrimMemory {
		feeders.Go(func() { trimSchedule(a.Proxy, a.cfg.Logger).Run(ctx) })
	}
	// The OCSF sink outlives the proxy: its last decisions are queued
	// once it has stopped.
	sink := a.ocsf
	a.ocsf = nil
	emitCtx, stopEmitting := context.WithCancel(context.Background())
	var emitting sync.WaitGroup
	if sink != nil {
		emitting.Go(func() { sink.Run(emitCtx) })
	}
	switch {
	case a.sub != nil:
		feeders.Go(func() {
			// Only a token the gateway keeps refusing ends the subscription
			// early (ExitOnAuthFailure): then the proxy stops too.
			if err := a.sub.Run(ctx); ctx.Err() == nil {
				subErr = err
				cancel()
			}
		})
		feeders.Go(func() { a.shipper.Run(ctx, a.sub) })
	case a.cfg.PolicyFile != "":
		interval := a.cfg.ReloadInterval
		if interval <= 0 {
			interval = time.Second
		}
		feeders.Go(func() { a.watchFile(ctx, a.cfg.PolicyFile, interval) })
	}
	if dns != nil {
		feeders.Go(func() {
			if err := dns.Serve(ctx, l.DNS); err != nil {
				a.cfg.Logger.Error("the sandbox's DNS stopped", "err", err)
			}
		})
	}
	err := a.serve(ctx, l)
	cancel()
	feeders.Wait()
	if l.DNS != nil {
		l.DNS.Close() // its reads stopped with the feeders
	}
	if err == nil {
		err = subErr
	}
	stopEmitting()
	emitting.Wait()
	if sink != nil && sink.Dropped() > 0 {
		a.cfg.Logger.Warn("OCSF events were dropped", "dropped", sink.Dropped())
	}
	return err
}

// Close releases the gateway connections, the decision log file and the
// OCSF sinks of an Agent that never ran (Run does it when it returns). It
// is safe to call more than once.
func (a *Agent) Close() error {
	a.closeOnce.Do(func() {
		if a.sub != nil {
			a.closeErr = a.sub.Close()
		}
		if a.logFile != nil {
			a.closeErr = errors.Join(a.closeErr, a.logFile.Close())
		}
		if a.ocsf != nil {
			a.ocsf.Close()
		}
	})
	return a.closeErr
}

// Subscription returns the gateway subscription (nil unless gateway
// mode): the version applied, for tests and benchmarks.
func (a *Agent) Subscription() *gatewayclient.Subscriber { return a.sub }

// Shipper returns the decision shipper (nil unless gateway mode).
func (a *Agent) Shipper() *gatewayclient.Shipper { return a.shipper }
