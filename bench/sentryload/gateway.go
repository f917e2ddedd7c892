package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/portcullis-dev/portcullis/bench/internal/benchdb"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// buildBinary builds ./cmd/portcullis (the shipped binary) into dir.
func buildBinary(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "portcullis")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/portcullis")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build ./cmd/portcullis (run from the repository's root): %w", err)
	}
	return bin, nil
}

// gatewayProc is the gateway under test: `portcullis gateway` in its own
// process, with its defaults but for the listen address (127.0.0.1:0),
// --quarantine-budget -1 and --quarantine-budget-per-source -1 (the
// breakers would hold the benchmark's quarantines after ten, and after
// three from its one quarantine source), and GODEBUG=gctrace=1 (each
// collection's live heap on stderr, which is how memory per in-flight
// event is read).
type gatewayProc struct {
	engine string
	addr   string // host:port
	admin  string
	dbURL  string // postgres: the fresh database
	// eventsURL is the fresh database of the events when they are kept
	// apart (-events-database-url); else dbURL.
	eventsURL string
	cmd       *exec.Cmd
	done      chan error
	dir       string
	drop      func() error

	conn    *grpc.ClientConn
	sandbox portcullisv1.SandboxServiceClient
	token   portcullisv1.TokenServiceClient
	sentry  portcullisv1.SentryServiceClient
	http    *http.Client

	mu      sync.Mutex
	applied []appliedLog // "sentry quarantine applied by every proxy"
	gcs     []gcTrace
	stderr  bytes.Buffer // the log lines that are neither, for errors
}

// appliedLog is one "sentry quarantine applied by every proxy" line.
type appliedLog struct {
	Sandbox string  `json:"sandbox"`
	Ms      float64 `json:"ingest_to_last_ack_ms"`
	Commit  float64 `json:"ingest_to_commit_ms"` // until the deny-all version was durable (its ACKs may come first)
}

// gcTrace is one gctrace line: when it was read and the live heap the
// collection marked.
type gcTrace struct {
	at     time.Time
	liveMB int
}

// startGateway starts bin as a gateway on a fresh Postgres database of
// serverURL, or on SQLite in a temporary directory when serverURL is "".
// dbParams (such as pool_max_conns=8) are added to the database URL the
// gateway is given.
func startGateway(ctx context.Context, bin, serverURL, eventsServerURL, dbParams string, logw, gatewayLog io.Writer) (*gatewayProc, error) {
	g := &gatewayProc{engine: "sqlite", drop: func() error { return nil }, done: make(chan error, 1), http: &http.Client{Timeout: 2 * time.Minute}}
	var b [24]byte
	rand.Read(b[:])
	g.admin = "pcs_sentryload-" + hex.EncodeToString(b[:])
	var err error
	if g.dir, err = os.MkdirTemp("", "sentryload-"); err != nil {
		return nil, err
	}
	env := append(os.Environ(), "PORTCULLIS_BOOTSTRAP_TOKEN="+g.admin, "GODEBUG=gctrace=1", "PORTCULLIS_DATABASE_URL=")
	if serverURL != "" {
		g.engine = "postgres"
		if g.dbURL, g.drop, err = benchdb.Fresh(ctx, serverURL, "sentryload"); err != nil {
			os.RemoveAll(g.dir)
			return nil, err
		}
		gwURL := g.dbURL
		if dbParams != "" {
			sep := "?"
			if strings.Contains(gwURL, "?") {
				sep = "&"
			}
			gwURL += sep + dbParams
		}
		env[len(env)-1] = "PORTCULLIS_DATABASE_URL=" + gwURL
		g.eventsURL = g.dbURL
		if eventsServerURL != "" {
			var dropEvents func() error
			if g.eventsURL, dropEvents, err = benchdb.Fresh(ctx, eventsServerURL, "sentryload_events"); err != nil {
				g.drop()
				os.RemoveAll(g.dir)
				return nil, err
			}
			dropControl := g.drop
			g.drop = func() error { return errors.Join(dropControl(), dropEvents()) }
			env = append(env, "PORTCULLIS_SENTRY_DATABASE_URL="+g.eventsURL)
		}
	}
	g.cmd = exec.Command(bin, "gateway", "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(g.dir, "data"), "--quarantine-budget", "-1", "--quarantine-budget-per-source", "-1")
	g.cmd.Env = env
	stdout, err := g.cmd.StdoutPipe()
	if err != nil {
		return nil, g.cleanup(err)
	}
	stderr, err := g.cmd.StderrPipe()
	if err != nil {
		return nil, g.cleanup(err)
	}
	if err := g.cmd.Start(); err != nil {
		return nil, g.cleanup(fmt.Errorf("start %s gateway: %w", bin, err))
	}
	banner := make(chan string, 1)
	var readers sync.WaitGroup
	readers.Add(2)
	go func() {
		defer readers.Done()
		sc := bufio.NewScanner(stdout)
		addr := ""
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "Portcullis gateway listening on "); ok {
				addr = a
			}
			if strings.HasPrefix(sc.Text(), "  console: ") { // the banner's last line
				banner <- addr
			}
		}
	}()
	go func() {
		defer readers.Done()
		if gatewayLog != nil {
			stderr = io.NopCloser(io.TeeReader(stderr, gatewayLog))
		}
		g.readStderr(stderr)
	}()
	go func() {
		readers.Wait()
		g.done <- g.cmd.Wait()
	}()
	select {
	case g.addr = <-banner:
	case err := <-g.done:
		g.done <- err
		return nil, g.cleanup(fmt.Errorf("gateway exited before serving: %v\n%s", err, g.stderrText()))
	case <-time.After(60 * time.Second):
		return nil, g.cleanup(fmt.Errorf("gateway did not print its banner within 60s\n%s", g.stderrText()))
	case <-ctx.Done():
		return nil, g.cleanup(ctx.Err())
	}
	g.conn, err = grpc.NewClient("passthrough:///"+g.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, g.cleanup(err)
	}
	g.sandbox = portcullisv1.NewSandboxServiceClient(g.conn)
	g.token = portcullisv1.NewTokenServiceClient(g.conn)
	g.sentry = portcullisv1.NewSentryServiceClient(g.conn)
	fmt.Fprintf(logw, "gateway %d (%s, %s) on %s\n", g.cmd.Process.Pid, bin, g.engine, g.addr)
	return g, nil
}

// readStderr keeps what this program reads from the gateway's stderr: the
// quarantine lane's log and the runtime's gctrace. The runtime writes a
// gctrace line in pieces, so a log line (one write) can land inside one:
// the log object is taken from wherever it starts, and the live heap from
// whichever piece holds it.
func (g *gatewayProc) readStderr(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if i := strings.Index(line, `{"time":`); i >= 0 {
			g.logLine(line[i:])
			line = line[:i]
		}
		if live, ok := parseGCTrace(line); ok {
			g.mu.Lock()
			g.gcs = append(g.gcs, gcTrace{at: time.Now(), liveMB: live})
			g.mu.Unlock()
		}
	}
	io.Copy(io.Discard, r)
}

// logLine keeps one of the gateway's JSON log lines: the quarantine
// lane's, and warnings and errors for when something fails.
func (g *gatewayProc) logLine(line string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if strings.Contains(line, `"sentry quarantine applied by every proxy"`) {
		var a appliedLog
		if json.Unmarshal([]byte(line), &a) == nil {
			g.applied = append(g.applied, a)
		}
		return
	}
	if strings.Contains(line, `"level":"INFO"`) {
		return // one line per connecting proxy and the like
	}
	if g.stderr.Len() < 1<<20 {
		g.stderr.WriteString(line + "\n")
	}
}

// parseGCTrace reads the live heap (the third figure of "4->5->2 MB")
// from a GODEBUG=gctrace=1 line:
//
//	gc 12 @3.1s 2%: 0.02+1.5+0.01 ms clock, …, 40->41->21 MB, 42 MB goal, 0 MB stacks, 0 MB globals, 2 P
//
// It also reads the piece of such a line after a log line interrupted it.
func parseGCTrace(line string) (int, bool) {
	if !strings.Contains(line, " MB goal") {
		return 0, false
	}
	for f := range strings.SplitSeq(line, ", ") {
		if heap, ok := strings.CutSuffix(f, " MB"); ok && strings.Count(heap, "->") == 2 {
			parts := strings.Split(heap, "->")
			live, err := strconv.Atoi(parts[2])
			return live, err == nil
		}
	}
	return 0, false
}

func (g *gatewayProc) stderrText() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.stderr.String()
}

// appliedLogs returns the quarantine lane's log lines read so far.
func (g *gatewayProc) appliedLogs() []appliedLog {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]appliedLog(nil), g.applied...)
}

// gcsBetween returns the live heaps of the collections logged in [from, to].
func (g *gatewayProc) gcsBetween(from, to time.Time) []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []int
	for _, gc := range g.gcs {
		if !gc.at.Before(from) && !gc.at.After(to) {
			out = append(out, gc.liveMB)
		}
	}
	return out
}

func (g *gatewayProc) pid() int { return g.cmd.Process.Pid }

func (g *gatewayProc) adminCtx(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+g.admin)
}

// stop ends the gateway with SIGTERM (SIGKILL after 20 s) and removes
// what it left.
func (g *gatewayProc) stop() error {
	if g.conn != nil {
		g.conn.Close()
	}
	g.cmd.Process.Signal(syscall.SIGTERM)
	var err error
	select {
	case err = <-g.done:
	case <-time.After(20 * time.Second):
		g.cmd.Process.Kill()
		err = errors.Join(errors.New("gateway did not stop within 20s of SIGTERM"), <-g.done)
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 0 {
		err = nil
	}
	return g.cleanup(err)
}

func (g *gatewayProc) cleanup(err error) error {
	if g.cmd != nil && g.cmd.Process != nil && g.cmd.ProcessState == nil {
		select {
		case <-g.done:
		default:
			g.cmd.Process.Kill()
			<-g.done
		}
	}
	err = errors.Join(err, g.drop())
	os.RemoveAll(g.dir)
	return err
}

// metric reads the sum of the samples of name (any labels) from the
// gateway's /metrics, and the cumulative buckets of a histogram.
type scraped struct {
	values  map[string]float64
	buckets map[string][]bucket // histogram name → cumulative buckets, +Inf last
}

type bucket struct {
	le    float64
	count float64
}

// scrape reads /metrics (API port, admin token).
func (g *gatewayProc) scrape(ctx context.Context) (scraped, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+g.addr+"/metrics", nil)
	if err != nil {
		return scraped{}, err
	}
	req.Header.Set("Authorization", "Bearer "+g.admin)
	res, err := g.http.Do(req)
	if err != nil {
		return scraped{}, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return scraped{}, fmt.Errorf("/metrics: %s", res.Status)
	}
	s := scraped{values: map[string]float64{}, buckets: map[string][]bucket{}}
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		name, labels, _ := strings.Cut(line[:i], "{")
		if base, ok := strings.CutSuffix(name, "_bucket"); ok {
			le, _ := strings.CutPrefix(strings.TrimSuffix(labels, "}"), `le="`)
			le = strings.TrimSuffix(le, `"`)
			f := math.Inf(1)
			if le != "+Inf" {
				if f, err = strconv.ParseFloat(le, 64); err != nil {
					continue
				}
			}
			s.buckets[base] = append(s.buckets[base], bucket{f, v})
			continue
		}
		s.values[name] += v
	}
	return s, sc.Err()
}
