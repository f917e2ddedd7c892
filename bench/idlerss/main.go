// Command idlerss measures what an idle proxy holds in memory, as a sidecar
// runs it: each binary given runs as `portcullis proxy` following a gateway
// (the sandbox "idle", with examples/orders.yaml), and once the gateway
// reports the policy ACKed and the proxy has sat idle for -idle, its
// resident memory is read from /proc: VmRSS, RssAnon, RssFile and Pss.
//
// On the kernel the figures come from, RssFile follows the size of the
// binary (the page cache's large folios are mapped whole), and how the
// page cache was filled matters: a binary the linker has just written
// maps differently from one read from disk. So before each start the
// binary's clean page-cache pages are dropped (-cold, on by default;
// posix_fadvise DONTNEED on that file only), as on a node that has just
// pulled the image. The gateway runs from its own copy of its binary, so
// no proxy shares pages with it.
//
// See README.md for the command and the figures.
package main

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connecthttp"

	"github.com/portcullis-dev/portcullis/bench/internal/benchcli"
	"github.com/portcullis-dev/portcullis/bench/internal/benchenv"
	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
)

// config is the flags.
type config struct {
	gateway    string
	binaries   []binary
	policy     string
	runs       int
	idle       time.Duration
	cold       bool
	standalone bool
	json       bool
}

// binary is one proxy binary to measure, and its label in the report.
type binary struct {
	Label string `json:"label"`
	Path  string `json:"path"`
	Size  int64  `json:"size_bytes"`
}

// result is one binary's runs.
type result struct {
	binary
	Runs   []benchenv.Memory `json:"runs"`
	Median benchenv.Memory   `json:"median"`
}

type report struct {
	Environment struct {
		benchenv.Machine
		Kernel string `json:"kernel"`
		Mode   string `json:"mode"` // "gateway" or "standalone"
		Idle   string `json:"idle"`
		Cold   bool   `json:"cold"`
	} `json:"environment"`
	Results []result `json:"results"`
}

func main() {
	var cfg config
	flag.StringVar(&cfg.gateway, "gateway", "", "the portcullis binary that runs the gateway (default: go build ./cmd/portcullis)")
	flag.StringVar(&cfg.policy, "policy", "examples/orders.yaml", "the sandbox's policy")
	flag.IntVar(&cfg.runs, "runs", 3, "proxies started one after another per binary")
	flag.DurationVar(&cfg.idle, "idle", 5*time.Second, "how long each proxy sits idle after the gateway reports its ACK (standalone: after it listens)")
	flag.BoolVar(&cfg.cold, "cold", true, "drop the binary's page cache before each start")
	flag.BoolVar(&cfg.standalone, "standalone", false, "run the proxies with --policy FILE instead of following a gateway")
	flag.BoolVar(&cfg.json, "json", false, "print the results as JSON instead of a table")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: go run ./bench/idlerss [flags] [LABEL=]BINARY...\n\n"+
			"Without binaries it builds ./cmd/portcullis as the Dockerfile does (CGO_ENABLED=0,\n"+
			"-trimpath, -ldflags=\"-s -w\"), without and with -tags proxyonly, and measures both.\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	benchcli.Main("idlerss", func(ctx context.Context) error {
		if cfg.runs < 1 || cfg.runs > 100 {
			return benchcli.Usagef("-runs: want 1 to 100")
		}
		for _, arg := range flag.Args() {
			label, path, ok := strings.Cut(arg, "=")
			if !ok {
				label, path = filepath.Base(arg), arg
			}
			cfg.binaries = append(cfg.binaries, binary{Label: label, Path: path})
		}
		return run(ctx, cfg, os.Stdout, os.Stderr)
	})
}

func run(ctx context.Context, cfg config, stdout, logw io.Writer) error {
	dir, err := os.MkdirTemp("", "idlerss-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if len(cfg.binaries) == 0 {
		for _, b := range []struct{ label, tags string }{{"full", ""}, {"proxyonly", "proxyonly"}} {
			path := filepath.Join(dir, "portcullis-"+b.label)
			if err := build(ctx, path, b.tags, true); err != nil {
				return err
			}
			cfg.binaries = append(cfg.binaries, binary{Label: b.label, Path: path})
		}
	}
	for i := range cfg.binaries {
		st, err := os.Stat(cfg.binaries[i].Path)
		if err != nil {
			return benchcli.Usagef("%v", err)
		}
		cfg.binaries[i].Size = st.Size()
	}
	policy, err := os.ReadFile(cfg.policy)
	if err != nil {
		return benchcli.Usagef("-policy: %v (run from the repository's root)", err)
	}

	var rep report
	rep.Environment.Machine = benchenv.Describe()
	rep.Environment.Kernel = kernel()
	rep.Environment.Mode = "gateway"
	rep.Environment.Idle = cfg.idle.String()
	rep.Environment.Cold = cfg.cold
	var gw *gateway
	if cfg.standalone {
		rep.Environment.Mode = "standalone"
	} else {
		gwBin := filepath.Join(dir, "portcullis-gateway")
		if cfg.gateway == "" {
			err = build(ctx, gwBin, "", false)
		} else {
			err = copyFile(cfg.gateway, gwBin)
		}
		if err != nil {
			return err
		}
		if gw, err = startGateway(ctx, gwBin, filepath.Join(dir, "gateway"), string(policy)); err != nil {
			return err
		}
		defer gw.stop()
		fmt.Fprintf(logw, "gateway on %s, sandbox idle at version %d\n", gw.addr, gw.version)
	}
	policyFile := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policyFile, policy, 0o600); err != nil {
		return err
	}
	for _, b := range cfg.binaries {
		res := result{binary: b}
		for i := range cfg.runs {
			m, err := measure(ctx, cfg, b, filepath.Join(dir, fmt.Sprintf("%s-%d", b.Label, i)), gw, policyFile, i)
			if err != nil {
				return fmt.Errorf("%s: %w", b.Label, err)
			}
			fmt.Fprintf(logw, "%s run %d: %s\n", b.Label, i+1, &m)
			res.Runs = append(res.Runs, m)
		}
		res.Median = median(res.Runs)
		rep.Results = append(rep.Results, res)
	}
	if cfg.json {
		return benchcli.WriteJSON(stdout, rep)
	}
	after := "the ACK"
	if cfg.standalone {
		after = "listening"
	}
	fmt.Fprintf(stdout, "%s, kernel %s; %s mode, idle %s after %s, cold page cache: %v\n",
		rep.Environment.Machine, rep.Environment.Kernel, rep.Environment.Mode, rep.Environment.Idle, after, cfg.cold)
	w := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "binary\tsize MB\tRSS MiB\tanon\tfile\tPSS\truns (RSS)\t")
	mib := func(kib int) string { return fmt.Sprintf("%.1f", float64(kib)/1024) }
	for _, r := range rep.Results {
		var runs []string
		for _, m := range r.Runs {
			runs = append(runs, mib(m.RSS))
		}
		fmt.Fprintf(w, "%s\t%.1f\t%s\t%s\t%s\t%s\t%s\t\n", r.Label, float64(r.Size)/1e6,
			mib(r.Median.RSS), mib(r.Median.Anon), mib(r.Median.File), mib(r.Median.PSS), strings.Join(runs, " "))
	}
	return w.Flush()
}

// build builds ./cmd/portcullis into path; docker: as the Dockerfile does.
func build(ctx context.Context, path, tags string, docker bool) error {
	args := []string{"build", "-o", path}
	if docker {
		args = append(args, "-trimpath", "-ldflags=-s -w")
	}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	cmd := exec.CommandContext(ctx, "go", append(args, "./cmd/portcullis")...)
	if docker {
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s (run from the repository's root): %v\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

func copyFile(from, to string) error {
	data, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, data, 0o755)
}

// dropPageCache asks the kernel to forget path's clean cached pages
// (posix_fadvise POSIX_FADV_DONTNEED), so the next start reads it as a
// node that has just pulled the image does. Pages a live process maps
// stay.
func dropPageCache(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	const fadvDontNeed = 4
	if _, _, errno := syscall.Syscall6(syscall.SYS_FADVISE64, f.Fd(), 0, 0, fadvDontNeed, 0, 0); errno != 0 {
		return fmt.Errorf("fadvise %s: %w", path, errno)
	}
	return nil
}

// measure starts b as a proxy, waits until it holds the policy (the
// gateway lists it connected at the sandbox's version; standalone: it
// listens), lets it idle and reads its memory.
func measure(ctx context.Context, cfg config, b binary, dir string, gw *gateway, policyFile string, run int) (benchenv.Memory, error) {
	if cfg.cold {
		if err := dropPageCache(b.Path); err != nil {
			return benchenv.Memory{}, err
		}
	}
	id := fmt.Sprintf("%s-%d", b.Label, run)
	args := []string{"proxy", "--listen", "127.0.0.1:0", "--data-dir", dir}
	if gw != nil {
		args = append(args, "--gateway", "http://"+gw.addr, "--sandbox", gw.sandbox, "--token-file", gw.tokenFile, "--proxy-id", id)
	} else {
		args = append(args, "--policy", policyFile)
	}
	cmd := exec.Command(b.Path, args...)
	cmd.Env = append(os.Environ(), "PORTCULLIS_TOKEN=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return benchenv.Memory{}, err
	}
	if err := cmd.Start(); err != nil {
		return benchenv.Memory{}, err
	}
	exited := make(chan error, 1)
	listening := make(chan struct{}, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "Portcullis proxy listening on ") {
				listening <- struct{}{}
			}
		}
		exited <- cmd.Wait()
	}()
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	}()
	deadline := time.After(60 * time.Second)
	select {
	case <-listening:
	case err := <-exited:
		exited <- err
		return benchenv.Memory{}, fmt.Errorf("proxy exited: %v\n%s", err, stderr.String())
	case <-deadline:
		return benchenv.Memory{}, fmt.Errorf("proxy not listening after 60s\n%s", stderr.String())
	case <-ctx.Done():
		return benchenv.Memory{}, ctx.Err()
	}
	if gw != nil {
		for !gw.applied(ctx, id) {
			select {
			case err := <-exited:
				exited <- err
				return benchenv.Memory{}, fmt.Errorf("proxy exited: %v\n%s", err, stderr.String())
			case <-deadline:
				return benchenv.Memory{}, fmt.Errorf("the gateway never listed proxy %s at version %d\n%s", id, gw.version, stderr.String())
			case <-ctx.Done():
				return benchenv.Memory{}, ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	select {
	case <-time.After(cfg.idle):
	case <-ctx.Done():
		return benchenv.Memory{}, ctx.Err()
	}
	m := benchenv.ReadMemory(cmd.Process.Pid)
	if m.RSS == 0 {
		return m, fmt.Errorf("proxy gone before its memory was read\n%s", stderr.String())
	}
	return m, nil
}

// median is the run with the median RSS (the upper one of an even count).
func median(runs []benchenv.Memory) benchenv.Memory {
	s := slices.Clone(runs)
	slices.SortFunc(s, func(a, b benchenv.Memory) int { return cmp.Compare(a.RSS, b.RSS) })
	return s[len(s)/2]
}

func kernel() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(b))
}

// gateway is `portcullis gateway` on SQLite in a temp dir, with the
// sandbox the proxies follow.
type gateway struct {
	cmd       *exec.Cmd
	exited    chan error
	addr      string
	sandbox   string
	tokenFile string
	version   uint32
	proxies   portcullisv1connect.ProxyServiceClient
}

func startGateway(ctx context.Context, bin, dir, policy string) (*gateway, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	var b [24]byte
	rand.Read(b[:])
	admin := "pcs_idlerss-" + hex.EncodeToString(b[:])
	g := &gateway{sandbox: "idle", tokenFile: filepath.Join(dir, "sandbox.token"), exited: make(chan error, 1)}
	g.cmd = exec.Command(bin, "gateway", "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "data"))
	g.cmd.Env = append(os.Environ(), "PORTCULLIS_BOOTSTRAP_TOKEN="+admin, "PORTCULLIS_DATABASE_URL=")
	g.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stderr strings.Builder
	g.cmd.Stderr = &stderr
	stdout, err := g.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := g.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start gateway: %w", err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "Portcullis gateway listening on "); ok {
				addr <- a
			}
		}
		g.exited <- g.cmd.Wait()
	}()
	select {
	case g.addr = <-addr:
	case err := <-g.exited:
		return nil, fmt.Errorf("gateway exited: %v\n%s", err, stderr.String())
	case <-time.After(60 * time.Second):
		g.stop()
		return nil, fmt.Errorf("gateway not listening after 60s\n%s", stderr.String())
	case <-ctx.Done():
		g.stop()
		return nil, ctx.Err()
	}
	client := connect.NewClient(connecthttp.NewTransport(http.DefaultClient, "http://"+g.addr), gatewaytest.Bearer(admin))
	g.proxies = portcullisv1connect.NewProxyServiceClient(client)
	created, err := portcullisv1connect.NewSandboxServiceClient(client).CreateSandbox(ctx, &portcullisv1.CreateSandboxRequest{Name: g.sandbox, Policy: policy})
	if err != nil {
		g.stop()
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	g.version = created.GetPolicyVersion().GetVersion()
	if err := os.WriteFile(g.tokenFile, []byte(created.GetToken()), 0o600); err != nil {
		g.stop()
		return nil, err
	}
	return g, nil
}

// applied reports whether the gateway lists proxy id connected with the
// sandbox's version applied (ACKed).
func (g *gateway) applied(ctx context.Context, id string) bool {
	res, err := g.proxies.ListProxies(ctx, &portcullisv1.ListProxiesRequest{Sandbox: g.sandbox})
	if err != nil {
		return false
	}
	for _, p := range res.GetProxies() {
		if p.GetProxyId() == id && p.GetConnected() && p.GetAppliedVersion() == g.version {
			return true
		}
	}
	return false
}

func (g *gateway) stop() {
	g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.exited:
	case <-time.After(10 * time.Second):
		g.cmd.Process.Kill()
		<-g.exited
	}
}
