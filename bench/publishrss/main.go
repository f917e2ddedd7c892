// Command publishrss measures the gateway's peak resident memory while it
// takes a few large Sentry batches at once, on each transport the intake
// serves: HTTP (application/cloudevents-batch+json), Connect (binary and
// JSON) and gRPC (grpc-go). Each run starts the shipped binary afresh
// (portcullis gateway on SQLite in a temp dir), creates one sentry token
// per concurrent sender (a source has at most its share of the intake's
// places, so one source's batches would wait for each other), reads the
// gateway's VmRSS from /proc, sends the batches at once, waits for every
// answer and reads its VmHWM (the peak). It prints the peak's rise over
// the resident size before, and that rise as a multiple of the bytes in
// flight (the requests' bodies). Nothing here asserts a threshold.
//
// Two shapes of batch, each of about -bytes:
//
//   - one: a single event whose data is a map of many small members (the
//     costliest protobuf Struct to decode): the intake refuses it (an
//     event is at most 64 KiB), so the figure is what refusing costs;
//   - many: 1,000 events of small-member data, each under 64 KiB: the
//     intake reads and stores them all.
//
// go build -o /tmp/portcullis ./cmd/portcullis
// go run ./bench/publishrss -binary /tmp/portcullis
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connecthttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portcullis-dev/portcullis/bench/internal/benchcli"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
)

func main() {
	bin := flag.String("binary", "", "a built portcullis binary (go build -o /tmp/portcullis ./cmd/portcullis)")
	senders := flag.Int("senders", 4, "batches sent at once, each by its own source")
	size := flag.Int("bytes", 3_800_000, "about how large each batch is, in its protobuf form")
	transports := flag.String("transports", "http,connect,connect-json,grpc", "comma-separated transports to measure")
	shapes := flag.String("shapes", "one,many", "comma-separated batch shapes (one, many)")
	slow := flag.Int("slowloris", 0, "instead: a legitimate batch's latency alone and beside this many slow connections (8 in issue 34)")
	rounds := flag.Int("rounds", 5, "with -slowloris: batches timed in each setting")
	flag.Parse()
	benchcli.Main("publishrss", func(ctx context.Context) error {
		if *bin == "" {
			return benchcli.Usagef("-binary is required")
		}
		if *slow > 0 {
			return slowloris(ctx, *bin, *slow, *rounds)
		}
		fmt.Printf("%-6s %-13s %12s %10s %10s %10s %8s  %s\n", "shape", "transport", "in flight", "rss before", "peak", "rise", "rise/in", "answers")
		for shape := range strings.SplitSeq(*shapes, ",") {
			for tr := range strings.SplitSeq(*transports, ",") {
				r, err := run(ctx, *bin, shape, tr, *senders, *size)
				if err != nil {
					return fmt.Errorf("%s over %s: %w", shape, tr, err)
				}
				fmt.Printf("%-6s %-13s %10.1f MB %7.1f MB %7.1f MB %7.1f MB %7.1f×  %s\n", shape, tr, mb(r.inFlight), mb(r.before), mb(r.peak), mb(r.peak-r.before),
					float64(r.peak-r.before)/float64(r.inFlight), r.answer)
			}
		}
		return nil
	})
}

func mb(n int64) float64 { return float64(n) / 1e6 }

type result struct {
	inFlight, before, peak int64
	answer                 string
}

// events builds a batch of the shape: n events whose data hold members
// of about size bytes in all.
func events(shape, source string, size int) []*portcullisv1.SentryEvent {
	n := 1
	if shape == "many" {
		n = 1000
	}
	perEvent := size / n
	var out []*portcullisv1.SentryEvent
	for i := range n {
		members := map[string]any{}
		// A member "k<i>": 1 is about 20 bytes of Struct wire.
		for j := 0; j < perEvent/20; j++ {
			members["k"+strconv.Itoa(j)] = 1.0
		}
		data, err := structpb.NewStruct(map[string]any{"severity": "low", "tool_call": map[string]any{"server": "orders", "tool": "refund"}, "m": members})
		if err != nil {
			panic(err)
		}
		out = append(out, &portcullisv1.SentryEvent{
			Specversion: "1.0", Id: fmt.Sprint("e", i), Source: source, Type: "portcullis.sentry.v1.tool_access", Subject: "support",
			Time: timestamppb.Now(), Sequence: uint64(i + 1), Data: data,
		})
	}
	return out
}

func run(ctx context.Context, bin, shape, transport string, senders, size int) (result, error) {
	g, err := start(ctx, bin)
	if err != nil {
		return result{}, err
	}
	defer g.stop()
	type call struct {
		token string
		send  func(ctx context.Context) (string, error)
		bytes int64
	}
	var calls []call
	for i := range senders {
		source := fmt.Sprintf("sentry://rss-%d", i)
		tok, err := g.tokens.CreateToken(g.admin(ctx), &portcullisv1.CreateTokenRequest{Name: source, Role: "sentry"})
		if err != nil {
			return result{}, err
		}
		token := tok.GetToken()
		evs := events(shape, source, size)
		req := &portcullisv1.PublishEventsRequest{Events: evs}
		c := call{token: token}
		switch transport {
		case "http":
			var batch []json.RawMessage
			for _, e := range evs {
				batch = append(batch, cloudEventJSON(e))
			}
			body, _ := json.Marshal(batch)
			c.bytes = int64(len(body))
			c.send = func(ctx context.Context) (string, error) {
				r, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+g.addr+"/v1/sentry/events", bytes.NewReader(body))
				r.Header.Set("Content-Type", "application/cloudevents-batch+json")
				r.Header.Set("Authorization", "Bearer "+token)
				res, err := http.DefaultClient.Do(r)
				if err != nil {
					return "", err
				}
				defer res.Body.Close()
				raw, _ := io.ReadAll(res.Body)
				var a struct {
					Stored  int `json:"stored"`
					Refused []struct {
						Reason string `json:"reason"`
					} `json:"refused"`
				}
				json.Unmarshal(raw, &a)
				return answer(res.StatusCode, a.Stored, len(a.Refused)), nil
			}
		case "connect", "connect-json":
			var opts []connecthttp.Option
			if transport == "connect-json" {
				opts = append(opts, connecthttp.WithProtoJSON())
				b, _ := protojson.Marshal(req)
				c.bytes = int64(len(b))
			} else {
				c.bytes = int64(proto.Size(req))
			}
			sc := portcullisv1connect.NewSentryServiceClient(connect.NewClient(connecthttp.NewTransport(http.DefaultClient, "http://"+g.addr, opts...)))
			c.send = func(ctx context.Context) (string, error) {
				cctx, info := connect.NewClientContext(ctx)
				info.RequestHeader().Set("Authorization", "Bearer "+token)
				res, err := sc.PublishEvents(cctx, req)
				if err != nil {
					return "", err
				}
				return answer(200, int(res.GetStored()), len(res.GetRefused())), nil
			}
		case "grpc":
			c.bytes = int64(proto.Size(req))
			sc := portcullisv1.NewSentryServiceClient(g.conn)
			c.send = func(ctx context.Context) (string, error) {
				res, err := sc.PublishEvents(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token), req)
				if err != nil {
					return "", err
				}
				return answer(200, int(res.GetStored()), len(res.GetRefused())), nil
			}
		default:
			return result{}, benchcli.Usagef("unknown transport %q", transport)
		}
		calls = append(calls, c)
	}
	var r result
	for _, c := range calls {
		r.inFlight += c.bytes
	}
	if r.before, err = procStatus(g.cmd.Process.Pid, "VmRSS"); err != nil {
		return result{}, err
	}
	answers := make([]string, len(calls))
	errs := make([]error, len(calls))
	var wg sync.WaitGroup
	for i, c := range calls {
		wg.Go(func() { answers[i], errs[i] = c.send(ctx) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return result{}, err
		}
	}
	if r.peak, err = procStatus(g.cmd.Process.Pid, "VmHWM"); err != nil {
		return result{}, err
	}
	r.answer = strings.Join(answers, " ")
	return r, nil
}

func answer(code, stored, refused int) string {
	return fmt.Sprintf("%d:%d/%d", code, stored, refused)
}

// cloudEventJSON is the CloudEvents JSON form of e.
func cloudEventJSON(e *portcullisv1.SentryEvent) json.RawMessage {
	data, _ := protojson.Marshal(e.GetData())
	b, _ := json.Marshal(map[string]any{
		"specversion": "1.0", "id": e.GetId(), "source": e.GetSource(), "type": e.GetType(), "subject": e.GetSubject(),
		"time": e.GetTime().AsTime().Format(time.RFC3339Nano), "sequence": e.GetSequence(), "data": json.RawMessage(data),
	})
	return b
}

// procStatus reads a "kB" line of /proc/PID/status, in bytes.
func procStatus(pid int, key string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", key, pid)
}

type gateway struct {
	cmd    *exec.Cmd
	dir    string
	addr   string
	token  string
	conn   *grpc.ClientConn
	tokens portcullisv1.TokenServiceClient
	done   chan error
}

func (g *gateway) admin(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+g.token)
}

// start runs bin as a gateway on SQLite in a temp dir.
func start(ctx context.Context, bin string) (*gateway, error) {
	var b [24]byte
	rand.Read(b[:])
	g := &gateway{token: "pcs_publishrss-" + hex.EncodeToString(b[:]), done: make(chan error, 1)}
	var err error
	if g.dir, err = os.MkdirTemp("", "publishrss-"); err != nil {
		return nil, err
	}
	g.cmd = exec.Command(bin, "gateway", "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(g.dir, "data"))
	g.cmd.Env = append(os.Environ(), "PORTCULLIS_BOOTSTRAP_TOKEN="+g.token, "PORTCULLIS_DATABASE_URL=")
	g.cmd.Stderr = io.Discard
	stdout, err := g.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := g.cmd.Start(); err != nil {
		os.RemoveAll(g.dir)
		return nil, err
	}
	banner := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		addr := ""
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "Portcullis gateway listening on "); ok {
				addr = a
			}
			if strings.HasPrefix(sc.Text(), "  console: ") {
				banner <- addr
			}
		}
		g.done <- g.cmd.Wait()
	}()
	select {
	case g.addr = <-banner:
	case err := <-g.done:
		os.RemoveAll(g.dir)
		return nil, fmt.Errorf("gateway exited before serving: %v", err)
	case <-time.After(60 * time.Second):
		g.cmd.Process.Kill()
		<-g.done
		os.RemoveAll(g.dir)
		return nil, fmt.Errorf("gateway did not print its banner within 60s")
	case <-ctx.Done():
		g.cmd.Process.Kill()
		<-g.done
		os.RemoveAll(g.dir)
		return nil, ctx.Err()
	}
	if g.conn, err = grpc.NewClient("passthrough:///"+g.addr, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
		g.stop()
		return nil, err
	}
	g.tokens = portcullisv1.NewTokenServiceClient(g.conn)
	return g, nil
}

func (g *gateway) stop() {
	if g.conn != nil {
		g.conn.Close()
	}
	g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.done:
	case <-time.After(20 * time.Second):
		g.cmd.Process.Kill()
		<-g.done
	}
	os.RemoveAll(g.dir)
}
