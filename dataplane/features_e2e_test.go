// MCP 2026-07-28 deprecates sampling, roots and logging (SEP-2577), but the
// versions before it have them, and the proxy must pass them unchanged.
//
//lint:file-ignore SA1019 the deprecated MCP features are what these tests exercise

package dataplane_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Every MCP feature passes the proxy unchanged: the same scenario — tools,
// progress, cancellation, resources and subscriptions, prompts, sampling,
// elicitation, roots, logging, a server notification on the GET stream,
// a replay of a stream from its last event (resumption), and the
// session's DELETE — runs directly
// against the server and through a proxy whose policy allows every known
// method, and the two transcripts must be equal.
func TestEveryMCPFeatureThroughProxy(t *testing.T) {
	const allowAll = `
version: 1
network_policies:
  all:
    name: all
    endpoints:
      - host: orders.example.com
        port: PORT
        path: /mcp
        protocol: mcp
        mcp: { allow_all_known_mcp_methods: true }
    binaries:
      - path: /usr/bin/python3
`
	direct := featureScenario(t, func(up *upstream) *http.Client {
		return &http.Client{Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: up.roots},
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, network, fmt.Sprintf("127.0.0.1:%d", up.port))
			},
		}}
	})
	proxied := featureScenario(t, func(up *upstream) *http.Client {
		return startProxy(t, allowAll, up).httpClient()
	})
	if len(direct) < 15 {
		t.Fatalf("the scenario is short: %q", direct)
	}
	t.Logf("scenario: %q", direct)
	if !slices.Equal(direct, proxied) {
		t.Fatalf("through the proxy differs from direct:\ndirect:  %q\nproxied: %q", direct, proxied)
	}
}

// featureScenario runs every feature against a fresh server reached with
// the client connect returns, and returns what the client and server saw.
func featureScenario(t *testing.T, connect func(*upstream) *http.Client) []string {
	t.Helper()
	var (
		mu  sync.Mutex
		log []string
	)
	note := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		log = append(log, fmt.Sprintf(format, args...))
	}
	blocking, cancelled := make(chan struct{}, 1), make(chan struct{}, 1)
	subscribed := make(chan struct{}, 1)
	server := mcp.NewServer(&mcp.Implementation{Name: "features", Version: "v1"}, &mcp.ServerOptions{
		SubscribeHandler: func(context.Context, *mcp.SubscribeRequest) error { subscribed <- struct{}{}; return nil },
		UnsubscribeHandler: func(_ context.Context, r *mcp.UnsubscribeRequest) error {
			note("server: unsubscribed %s", r.Params.URI)
			return nil
		},
	})
	mcp.AddTool(server, &mcp.Tool{Name: "echo"}, func(_ context.Context, _ *mcp.CallToolRequest, args map[string]any) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprint(args["text"])}}}, nil, nil
	})
	mcp.AddTool(server, &mcp.Tool{Name: "work"}, func(ctx context.Context, req *mcp.CallToolRequest, _ map[string]any) (*mcp.CallToolResult, any, error) {
		for i := 1; i <= 3; i++ {
			req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: req.Params.GetProgressToken(), Progress: float64(i), Total: 3, Message: fmt.Sprint("step ", i)})
		}
		req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "info", Data: "worked"})
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil, nil
	})
	mcp.AddTool(server, &mcp.Tool{Name: "block"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ map[string]any) (*mcp.CallToolResult, any, error) {
		blocking <- struct{}{}
		<-ctx.Done()
		cancelled <- struct{}{}
		return nil, nil, ctx.Err()
	})
	mcp.AddTool(server, &mcp.Tool{Name: "ask"}, func(ctx context.Context, req *mcp.CallToolRequest, _ map[string]any) (*mcp.CallToolResult, any, error) {
		sampled, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{MaxTokens: 10,
			Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "hello?"}}}})
		if err != nil {
			return nil, nil, err
		}
		elicited, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "your name?",
			RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}}}})
		if err != nil {
			return nil, nil, err
		}
		roots, err := req.Session.ListRoots(ctx, nil)
		if err != nil {
			return nil, nil, err
		}
		text := fmt.Sprintf("sampled %q, elicited %s %v, roots %d %s", sampled.Content.(*mcp.TextContent).Text, elicited.Action, elicited.Content["name"], len(roots.Roots), roots.Roots[0].URI)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, nil, nil
	})
	server.AddResource(&mcp.Resource{URI: "file:///orders.txt", Name: "orders", MIMEType: "text/plain"},
		func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: "file:///orders.txt", MIMEType: "text/plain", Text: "A-1042 shipped"}}}, nil
		})
	server.AddPrompt(&mcp.Prompt{Name: "greet", Arguments: []*mcp.PromptArgument{{Name: "who"}}},
		func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "hello " + req.Params.Arguments["who"]}}}}, nil
		})
	up := startUpstream(t, mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server },
		&mcp.StreamableHTTPOptions{DisableLocalhostProtection: true, EventStore: mcp.NewMemoryEventStore(nil)}))

	// The client hands notifications to its handlers asynchronously: they
	// are noted in order once all arrived.
	notified := make(chan string, 8)
	updated := make(chan string, 1)
	listChanged := make(chan struct{}, 1)
	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "v1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			notified <- fmt.Sprintf("client: progress %v/%v %s", r.Params.Progress, r.Params.Total, r.Params.Message)
		},
		LoggingMessageHandler: func(_ context.Context, r *mcp.LoggingMessageRequest) {
			notified <- fmt.Sprintf("client: log %s %v", r.Params.Level, r.Params.Data)
		},
		ResourceUpdatedHandler: func(_ context.Context, r *mcp.ResourceUpdatedNotificationRequest) { updated <- r.Params.URI },
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { listChanged <- struct{}{} },
		CreateMessageHandler: func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			return &mcp.CreateMessageResult{Model: "m", Role: "assistant", Content: &mcp.TextContent{Text: "hi"}}, nil
		},
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Ada"}}, nil
		},
	})
	client.AddRoots(&mcp.Root{URI: "file:///work", Name: "work"})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // a guard against a hang
	defer cancel()
	httpClient := connect(up)
	streams := &streamRecorder{next: httpClient.Transport}
	httpClient = &http.Client{Transport: streams}
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint: fmt.Sprintf("https://orders.example.com:%d/mcp", up.port), HTTPClient: httpClient, MaxRetries: 3,
	}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	text := func(res *mcp.CallToolResult, err error) string {
		if err != nil {
			return "error: " + err.Error()
		}
		return res.Content[0].(*mcp.TextContent).Text
	}
	call := func(name string, args map[string]any) (*mcp.CallToolResult, error) {
		return cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	}

	var tools []string
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		tools = append(tools, tool.Name)
	}
	slices.Sort(tools)
	note("tools: %v", tools)
	note("echo: %s", text(call("echo", map[string]any{"text": "ping"})))
	if err := cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
		t.Fatal(err)
	}
	work := &mcp.CallToolParams{Name: "work", Arguments: map[string]any{}}
	work.SetProgressToken("w1")
	note("work: %s", text(cs.CallTool(ctx, work)))
	var notes []string
	for len(notes) < 4 {
		select {
		case n := <-notified:
			notes = append(notes, n)
		case <-ctx.Done():
			t.Fatalf("notifications: %q", notes)
		}
	}
	slices.Sort(notes)
	for _, n := range notes {
		note("%s", n)
	}
	// Resumption: the work call's stream again, from its first event.
	ids := streams.lastIDs()
	if len(ids) < 2 {
		t.Fatalf("the work call's stream had event ids %q", ids)
	}
	// The SDK refuses (409) to replay a stream whose POST handler is still
	// finishing: the client may hold the result a moment before that
	// handler has let its stream go. Asked again shortly, it replays.
	var res *http.Response
	for attempt := 0; ; attempt++ {
		replay, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("https://orders.example.com:%d/mcp", up.port), nil)
		replay.Header = http.Header{"Accept": {"text/event-stream"}, "Mcp-Session-Id": {cs.ID()}, "Mcp-Protocol-Version": {"2025-11-25"}, "Last-Event-Id": {ids[0]}}
		var err error
		if res, err = streams.next.RoundTrip(replay); err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != http.StatusConflict || attempt == 50 {
			break
		}
		res.Body.Close()
		time.Sleep(20 * time.Millisecond)
	}
	replayed, _ := io.ReadAll(res.Body)
	res.Body.Close()
	note("replay from the first event: %d %d events, the result among them %v", res.StatusCode,
		strings.Count(string(replayed), "\ndata: "), strings.Contains(string(replayed), `"text":"done"`))

	// Cancellation: the client gives up; the server's handler sees it.
	blockCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(blockCtx, &mcp.CallToolParams{Name: "block", Arguments: map[string]any{}})
		done <- err
	}()
	select { // the call reached the server (a call cancelled before it is sent is never seen)
	case <-blocking:
	case <-ctx.Done():
		t.Fatal("the blocking call never reached the server")
	}
	stop()
	note("block: cancelled by the client %v", errors.Is(<-done, context.Canceled))
	select {
	case <-cancelled:
		note("server: the blocked call was cancelled")
	case <-ctx.Done():
		t.Fatal("the server never saw the cancellation")
	}

	resources, err := cs.ListResources(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	note("resources: %s", resources.Resources[0].URI)
	read, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "file:///orders.txt"})
	if err != nil {
		t.Fatal(err)
	}
	note("read: %s", read.Contents[0].Text)
	if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: "file:///orders.txt"}); err != nil {
		t.Fatal(err)
	}
	<-subscribed
	server.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: "file:///orders.txt"})
	note("client: updated %s", <-updated)
	if err := cs.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: "file:///orders.txt"}); err != nil {
		t.Fatal(err)
	}

	prompts, err := cs.ListPrompts(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	note("prompts: %s", prompts.Prompts[0].Name)
	prompt, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "greet", Arguments: map[string]string{"who": "Ada"}})
	if err != nil {
		t.Fatal(err)
	}
	note("prompt: %s", prompt.Messages[0].Content.(*mcp.TextContent).Text)

	// Sampling, elicitation and roots: the server asks, the client answers.
	note("ask: %s", text(call("ask", map[string]any{})))

	// A server notification on the GET stream.
	mcp.AddTool(server, &mcp.Tool{Name: "late"}, func(context.Context, *mcp.CallToolRequest, map[string]any) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{}, nil, nil
	})
	<-listChanged
	note("client: tools changed")
	if err := cs.Ping(ctx, nil); err != nil {
		t.Fatal(err)
	}
	note("ping")

	// The session's DELETE.
	if err := cs.Close(); err != nil {
		note("close: %v", err)
	}
	note("server saw DELETE: %v", up.saw("DELETE /mcp"))
	return log
}

// streamRecorder notes the event ids of each event stream a POST
// answers, for a replay.
type streamRecorder struct {
	next http.RoundTripper
	mu   sync.Mutex
	last *bytes.Buffer
}

func (s *streamRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := s.next.RoundTrip(req)
	if err != nil || req.Method != http.MethodPost || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		return res, err
	}
	buf := &bytes.Buffer{}
	s.mu.Lock()
	s.last = buf
	s.mu.Unlock()
	res.Body = struct {
		io.Reader
		io.Closer
	}{io.TeeReader(res.Body, &lockedWriter{mu: &s.mu, w: buf}), res.Body}
	return res, nil
}

// lastIDs are the event ids of the last POST's stream.
func (s *streamRecorder) lastIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	if s.last == nil {
		return nil
	}
	for _, line := range strings.Split(s.last.String(), "\n") {
		if id, ok := strings.CutPrefix(line, "id: "); ok {
			ids = append(ids, strings.TrimSpace(id))
		}
	}
	return ids
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
