// Command proverdos checks issue 11's acceptance for the prover: the real
// gateway binary, run under `ulimit -v` (2 GB by default), survives the
// worst proposals and Prove requests we could construct and answers
// /healthz throughout. For each case it prints the answer, the time, the
// slowest /healthz poll during the case, the peak resident memory seen
// during the case and the process's high-water mark (VmHWM).
//
//	go run ./bench/proverdos               # builds ./cmd/portcullis first
//	go run ./bench/proverdos -bin ./portcullis -vmem-kb 2000000
//
// Build a -bin as the Dockerfile does (CGO_ENABLED=0).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	bin := flag.String("bin", "", "portcullis binary (default: build ./cmd/portcullis)")
	vmem := flag.Int("vmem-kb", 2000000, "ulimit -v for the gateway, in KiB")
	only := flag.String("only", "", "run only cases whose name contains this")
	flag.Parse()
	if err := run(*bin, *vmem, *only); err != nil {
		fmt.Fprintln(os.Stderr, "proverdos:", err)
		os.Exit(1)
	}
}

const adminToken = "proverdos-admin-token-0123456789abcdef"

func run(bin string, vmemKB int, only string) error {
	dir, err := os.MkdirTemp("", "proverdos")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if bin == "" {
		bin = filepath.Join(dir, "portcullis")
		// As the Dockerfile builds it: no cgo (a cgo binary also reserves
		// 64 MB of address space per thread for glibc's malloc arenas).
		build := exec.Command("go", "build", "-trimpath", "-o", bin, "./cmd/portcullis")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("build: %w", err)
		}
	}
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	cmd := exec.Command("bash", "-c", fmt.Sprintf("ulimit -v %d && exec \"$0\" gateway --listen %s --data-dir %s", vmemKB, addr, filepath.Join(dir, "data")), bin)
	cmd.Env = append(os.Environ(), "PORTCULLIS_BOOTSTRAP_TOKEN="+adminToken)
	gw, err := start(cmd, filepath.Join(dir, "gateway.log"))
	if err != nil {
		return err
	}
	defer gw.stop()
	pid, exited := gw.cmd.Process.Pid, gw.exited
	base := "http://" + addr
	if err := waitHealthy(base, exited); err != nil {
		return err
	}
	fmt.Printf("gateway pid %d under ulimit -v %d KiB at %s; at start VmHWM %d MB, VmSize %d MB\n\n", pid, vmemKB, base, status(pid, "VmHWM")/1024, status(pid, "VmSize")/1024)

	var created struct {
		Token string `json:"token"`
	}
	if err := call(base, adminToken, "portcullis.v1.SandboxService/CreateSandbox", map[string]any{"name": "dos", "policy": basePolicy}, &created); err != nil {
		return fmt.Errorf("create sandbox: %w", err)
	}
	if created.Token == "" {
		return fmt.Errorf("create sandbox: no token")
	}
	// The path: the agent, holding no token, posts to
	// http://policy.local through the sandbox's real proxy, which relays
	// to the gateway with the sandbox's token.
	local, stopProxy, err := startProxy(bin, dir, base, created.Token)
	if err != nil {
		return err
	}
	defer stopProxy()
	fmt.Printf("%-34s %-40s %9s %11s %10s %9s\n", "case", "answer", "time", "healthz max", "peak RSS", "VmHWM")
	for _, c := range cases() {
		if only != "" && !strings.Contains(c.name, only) {
			continue
		}
		res := measure(base, pid, exited, func() string {
			n := c.parallel
			if n == 0 {
				n = 1
			}
			answers := make([]string, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if c.viaProxy {
						answers[i] = postLocal(local, c.body["document"].(string))
					} else {
						answers[i] = answer(call(base, created.Token, c.method, c.body, nil))
					}
				}()
			}
			wg.Wait()
			if n > 1 {
				return fmt.Sprintf("%d× %s", n, answers[0])
			}
			return answers[0]
		})
		fmt.Printf("%-34s %-40s %8.2fs %10.0fms %7d MB %6d MB\n", c.name, clip(res.answer, 40), res.elapsed.Seconds(), float64(res.healthMax.Milliseconds()), res.peakRSS/1024, status(pid, "VmHWM")/1024)
		if res.healthFail > 0 {
			fmt.Printf("    /healthz failed %d times during the case\n", res.healthFail)
		}
		select {
		case err := <-exited:
			return fmt.Errorf("the gateway died during %s: %v (log: %s)", c.name, err, tail(gw.log))
		default:
		}
	}
	fmt.Printf("\ngateway alive after every case; VmHWM %d MB, VmSize %d MB\n", status(pid, "VmHWM")/1024, status(pid, "VmSize")/1024)
	return nil
}

type result struct {
	answer     string
	elapsed    time.Duration
	healthMax  time.Duration
	healthFail int
	peakRSS    int
}

// measure runs f while polling /healthz and sampling VmRSS.
func measure(base string, pid int, exited chan error, f func() string) result {
	var r result
	var stop atomic.Bool
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		client := &http.Client{Timeout: 5 * time.Second}
		for !stop.Load() {
			st := time.Now()
			resp, err := client.Get(base + "/healthz")
			el := time.Since(st)
			mu.Lock()
			if err != nil || resp.StatusCode != http.StatusOK {
				r.healthFail++
			}
			if el > r.healthMax {
				r.healthMax = el
			}
			if rss := status(pid, "VmRSS"); rss > r.peakRSS {
				r.peakRSS = rss
			}
			mu.Unlock()
			if resp != nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	st := time.Now()
	ans := f()
	el := time.Since(st)
	stop.Store(true)
	<-done
	mu.Lock()
	defer mu.Unlock()
	r.answer, r.elapsed = ans, el
	if rss := status(pid, "VmRSS"); rss > r.peakRSS {
		r.peakRSS = rss
	}
	return r
}

// status reads a kB field of /proc/PID/status.
func status(pid int, field string) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
			return n
		}
	}
	return -1
}

func waitHealthy(base string, exited chan error) error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			return fmt.Errorf("gateway exited at start: %v", err)
		default:
		}
		if resp, err := http.Get(base + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("gateway not healthy after 60 s")
}

// callError is a Connect error answer.
type callError struct {
	status  int
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *callError) Error() string { return e.Code + ": " + e.Message }

// call is a unary Connect call with the JSON protocol.
func call(base, token, method string, body any, out any) error {
	raw, err := json.Marshal(body)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/"+method, bytes.NewReader(raw))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		ce := &callError{status: resp.StatusCode}
		_ = json.Unmarshal(data, ce)
		return ce
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

func answer(err error) string {
	if err == nil {
		return "ok"
	}
	if ce, ok := err.(*callError); ok {
		switch {
		case strings.Contains(ce.Message, "too_complex"):
			return ce.Code + " too_complex"
		case strings.Contains(ce.Message, "too complex"):
			return ce.Code + " too complex"
		}
		return ce.Code + " " + ce.Message
	}
	return err.Error()
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n-1] + "…"
	}
	return s
}

// tail is the gateway log from its first panic or fatal error (or its
// end).
func tail(file string) string {
	data, _ := os.ReadFile(file)
	s := string(data)
	for _, m := range []string{"fatal error:", "panic:"} {
		if i := strings.Index(s, m); i >= 0 {
			s = s[i:]
			break
		}
	}
	if len(s) > 3000 {
		s = s[:3000]
	}
	return s
}

// startProxy runs `portcullis proxy` for the sandbox, following the
// gateway, and returns a client that sends through it once it answers
// policy.local.
func startProxy(bin, dir, gateway, token string) (*http.Client, func(), error) {
	tokenFile := filepath.Join(dir, "sandbox.token")
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		return nil, nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(bin, "proxy", "--listen", addr, "--gateway", gateway, "--sandbox", "dos",
		"--token-file", tokenFile, "--data-dir", filepath.Join(dir, "proxy"))
	px, err := start(cmd, filepath.Join(dir, "proxy.log"))
	if err != nil {
		return nil, nil, err
	}
	proxyURL, _ := url.Parse("http://" + addr)
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}, Timeout: 5 * time.Minute}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-px.exited:
			return nil, nil, fmt.Errorf("proxy exited at start: %v (log: %s)", err, tail(px.log))
		default:
		}
		if resp, err := client.Get("http://policy.local/v1/policy"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return client, px.stop, nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	px.stop()
	return nil, nil, fmt.Errorf("proxy not serving policy.local after 60 s (log: %s)", tail(px.log))
}

// postLocal posts a proposal file to http://policy.local/v1/proposals and
// answers the status and the refusal's rule.
func postLocal(client *http.Client, doc string) string {
	resp, err := client.Post("http://policy.local/v1/proposals", "application/yaml", strings.NewReader(doc))
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode < 300 {
		return fmt.Sprintf("%d accepted", resp.StatusCode)
	}
	for _, rule := range []string{"too_complex", "too complex"} {
		if strings.Contains(string(body), rule) {
			return fmt.Sprintf("%d %s", resp.StatusCode, rule)
		}
	}
	return fmt.Sprintf("%d %s", resp.StatusCode, body)
}

// process is a portcullis command this program started, its output in a
// log file that tail reads when it dies.
type process struct {
	cmd    *exec.Cmd
	log    string     // the log file's path
	exited chan error // Wait's result, sent once
}

// start runs cmd with its stdout and stderr going to a new file at
// logPath.
func start(cmd *exec.Cmd, logPath string) (*process, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	p := &process{cmd: cmd, log: logPath, exited: make(chan error, 1)}
	go func() {
		p.exited <- cmd.Wait()
		logf.Close()
	}()
	return p, nil
}

// stop interrupts the process, as Ctrl-C would, and kills it if it has not
// exited 10 s later.
func (p *process) stop() {
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
	}
}

// freeAddr is a loopback host:port that was free a moment ago, for a child
// to listen on.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}
