// Command streamfloor measures what an idle bidirectional gRPC stream
// costs a server in memory, for two transports, with a handler that does
// nothing but wait: Connect on net/http's HTTP/2 server (what the gateway
// serves every RPC with) and grpc-go's own server. It is the floor under
// the gateway's memory per idle policy stream (bench/pushload): what the
// transport keeps per stream before the gateway adds anything.
//
// The server runs in a child process (this binary with -serve), so its
// memory is measured apart from the clients': heap in use plus stack in
// use after GC, before and after N streams are open and idle, divided by N.
//
//	go run ./bench/streamfloor                  # N = 10,000, 100 streams per connection
//	go run ./bench/streamfloor -n 2000 -share 1 # a connection per stream
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connecthttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/portcullis-dev/portcullis/bench/internal/benchenv"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
)

func main() {
	serve := flag.String("serve", "", "internal: run the server with this transport (connect or grpc)")
	n := flag.Int("n", 10_000, "streams")
	share := flag.Int("share", 100, "streams per connection (1: a connection per stream; at most 250)")
	flag.Parse()
	benchenv.RaiseFileLimit()
	if *serve != "" {
		if err := runServer(*serve); err != nil {
			fmt.Fprintln(os.Stderr, "streamfloor server:", err)
			os.Exit(1)
		}
		return
	}
	if *share < 1 || *share > 250 || *n < 1 {
		fmt.Fprintln(os.Stderr, "streamfloor: want -n ≥ 1 and 1 ≤ -share ≤ 250")
		os.Exit(2)
	}
	fmt.Printf("%s, %d idle streams, %d per connection; server heap+stack growth per stream (after GC)\n", runtime.Version(), *n, *share)
	for _, transport := range []string{"connect", "grpc"} {
		per, err := measure(transport, *n, *share)
		if err != nil {
			fmt.Fprintln(os.Stderr, "streamfloor:", err)
			os.Exit(1)
		}
		fmt.Printf("  %-8s heap %6.1f KiB  stack %6.1f KiB  total %6.1f KiB  goroutines/stream %.2f\n",
			transport, per.heap/1024, per.stack/1024, (per.heap+per.stack)/1024, per.goroutines)
	}
}

// sample is the server's memory, as it reports it.
type sample struct {
	Heap, Stack uint64
	Goroutines  int
}

type perStream struct{ heap, stack, goroutines float64 }

func measure(transport string, n, share int) (perStream, error) {
	self, err := os.Executable()
	if err != nil {
		return perStream{}, err
	}
	cmd := exec.Command(self, "-serve", transport)
	cmd.Stderr = os.Stderr
	stdin, _ := cmd.StdinPipe()
	stdoutPipe, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		return perStream{}, err
	}
	defer func() { stdin.Close(); cmd.Wait() }()
	out := bufio.NewScanner(stdoutPipe)
	if !out.Scan() {
		return perStream{}, errors.New("the server said nothing")
	}
	addr := out.Text()
	ask := func() (sample, error) {
		var s sample
		if _, err := io.WriteString(stdin, "sample\n"); err != nil {
			return s, err
		}
		if !out.Scan() {
			return s, errors.New("the server did not answer")
		}
		return s, json.Unmarshal(out.Bytes(), &s)
	}
	before, err := ask()
	if err != nil {
		return perStream{}, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var conns []*grpc.ClientConn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	var wg sync.WaitGroup
	errc := make(chan error, n)
	for i := 0; i < n; i += share {
		conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return perStream{}, err
		}
		conns = append(conns, conn)
		client := portcullisv1.NewDistributionServiceClient(conn)
		for j := i; j < min(i+share, n); j++ {
			wg.Go(func() {
				st, err := client.StreamPolicy(ctx)
				if err == nil {
					err = st.Send(&portcullisv1.StreamPolicyRequest{Message: &portcullisv1.StreamPolicyRequest_Hello{Hello: &portcullisv1.ProxyHello{Sandbox: "s", ProxyId: fmt.Sprint("p", j)}}})
				}
				if err == nil {
					_, err = st.Recv() // the server's answer: the stream is open
				}
				if err != nil {
					errc <- err
				}
			})
		}
	}
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		return perStream{}, fmt.Errorf("%s stream: %w", transport, err)
	}
	time.Sleep(time.Second) // let the server's handlers settle into their wait
	after, err := ask()
	if err != nil {
		return perStream{}, err
	}
	return perStream{
		heap:       float64(int64(after.Heap)-int64(before.Heap)) / float64(n),
		stack:      float64(int64(after.Stack)-int64(before.Stack)) / float64(n),
		goroutines: float64(after.Goroutines-before.Goroutines) / float64(n),
	}, nil
}

// waitingHandler answers the hello with a heartbeat and then waits for
// the stream to end, as an idle policy stream does.
type waitingHandler struct {
	portcullisv1connect.UnimplementedDistributionServiceHandler
}

func (waitingHandler) StreamPolicy(ctx context.Context, st portcullisv1connect.DistributionServiceStreamPolicyServerStream) error {
	return waitIdle(st.Receive, st.Send)
}

// grpcWaiting is waitingHandler on grpc-go.
type grpcWaiting struct {
	portcullisv1.UnimplementedDistributionServiceServer
}

func (grpcWaiting) StreamPolicy(st grpc.BidiStreamingServer[portcullisv1.StreamPolicyRequest, portcullisv1.StreamPolicyResponse]) error {
	return waitIdle(st.Recv, st.Send)
}

// waitIdle is an idle policy stream, on either stack: it answers the
// hello with a heartbeat, then reads until the client goes away.
func waitIdle(recv func() (*portcullisv1.StreamPolicyRequest, error), send func(*portcullisv1.StreamPolicyResponse) error) error {
	if _, err := recv(); err != nil {
		return err
	}
	if err := send(&portcullisv1.StreamPolicyResponse{Message: &portcullisv1.StreamPolicyResponse_Heartbeat{Heartbeat: &portcullisv1.Heartbeat{}}}); err != nil {
		return err
	}
	for {
		if _, err := recv(); err != nil {
			return nil
		}
	}
}

// runServer serves on 127.0.0.1:0, prints the address, then answers
// each "sample" line on stdin with its memory as JSON.
func runServer(transport string) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	switch transport {
	case "connect":
		rpc := connect.NewServer()
		portcullisv1connect.RegisterDistributionServiceHandler(rpc, waitingHandler{})
		mux := http.NewServeMux()
		connecthttp.Mount(mux, rpc)
		p := new(http.Protocols)
		p.SetHTTP1(true)
		p.SetUnencryptedHTTP2(true)
		go (&http.Server{Handler: mux, Protocols: p}).Serve(ln)
	case "grpc":
		srv := grpc.NewServer()
		portcullisv1.RegisterDistributionServiceServer(srv, grpcWaiting{})
		go srv.Serve(ln)
	default:
		return fmt.Errorf("unknown transport %q", transport)
	}
	fmt.Println(ln.Addr())
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if strings.TrimSpace(in.Text()) != "sample" {
			continue
		}
		ms := benchenv.SettledMemStats()
		b, _ := json.Marshal(sample{Heap: ms.HeapInuse, Stack: ms.StackInuse, Goroutines: runtime.NumGoroutine()})
		fmt.Println(string(b))
	}
	return nil
}
