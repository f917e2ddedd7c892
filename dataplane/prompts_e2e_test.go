package dataplane_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/portcullis-dev/portcullis/dataplane/decision"
)

// docsPolicy allows one family of prompts and a tree of resources, and
// denies a prompt and a subtree inside them.
const docsPolicy = `
version: 1
network_policies:
  docs:
    endpoints:
      - host: orders.example.com
        port: PORT
        path: /mcp
        protocol: mcp
        mcp:
          versions: ["2025-11-25", "2026-07-28"]
        rules:
          - allow: { method: initialize }
          - allow: { method: notifications/initialized }
          - allow: { method: server/discover }
          - allow: { method: prompts/get, prompt: { any: [summarize, "report_*"] } }
          - allow: { method: resources/read, resource: "file:///docs/**" }
          - allow: { method: resources/subscribe, resource: "file:///docs/*.md" }
          - allow: { method: resources/unsubscribe, resource: "file:///docs/*.md" }
        deny_rules:
          - { method: prompts/get, prompt: "report_secret*" }
          - { method: resources/read, resource: "file:///docs/private/**" }
    binaries:
      - path: /usr/bin/python3
`

// docsHandler is a real MCP server (official Go SDK) with every prompt and
// resource the test asks for, so only the proxy can refuse them.
func docsHandler(stateless bool) http.Handler {
	s := mcp.NewServer(&mcp.Implementation{Name: "docs", Version: "v1"}, &mcp.ServerOptions{
		SubscribeHandler:   func(context.Context, *mcp.SubscribeRequest) error { return nil },
		UnsubscribeHandler: func(context.Context, *mcp.UnsubscribeRequest) error { return nil },
	})
	for _, name := range []string{"summarize", "report_daily", "report_secrets", "admin_reset"} {
		s.AddPrompt(&mcp.Prompt{Name: name}, func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "prompt " + req.Params.Name}}}}, nil
		})
	}
	for _, uri := range []string{"file:///docs/readme.md", "file:///docs/guide/intro.md", "file:///docs/private/key", "file:///etc/passwd", "file:///docs/../etc/passwd"} {
		s.AddResource(&mcp.Resource{URI: uri, Name: uri}, func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, Text: "content of " + req.Params.URI}}}, nil
		})
	}
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s },
		&mcp.StreamableHTTPOptions{Stateless: stateless, DisableLocalhostProtection: true})
}

// TestMCPPromptAndResourceRules: through a real proxy, with the official
// MCP Go SDK client and server, prompts/get and resources/read rules allow
// one prompt or URI and deny another, in allow rules and in deny_rules; a
// denied call never reaches the server and its record names the prompt or
// URI.
func TestMCPPromptAndResourceRules(t *testing.T) {
	for _, tc := range []struct {
		name      string
		stateless bool
		version   string
	}{
		{"2025-11-25 with sessions", false, "2025-11-25"},
		{"2026-07-28 stateless", true, "2026-07-28"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := startUpstream(t, docsHandler(tc.stateless))
			tp := startProxy(t, docsPolicy, up)
			cs := connectMCP(t, tp, up, tc.version, nil)
			ctx := t.Context()

			// denied makes the call and checks that it failed naming what it
			// named, that the server never saw it, and that its denial
			// record carries the name and the rule.
			denied := func(what, name, rule string, call func() error) {
				t.Helper()
				before := up.count()
				if err := call(); err == nil || !strings.Contains(err.Error(), name) {
					t.Errorf("%s %s: got %v, want a JSON-RPC error naming it", what, name, err)
				}
				if up.count() != before {
					t.Errorf("%s %s reached the server", what, name)
				}
				recs := tp.proxy.Decisions()
				last := recs[len(recs)-1]
				if last.Decision != decision.Deny || last.MCPMethod != what || last.Tool != name || last.Rule != rule || !strings.HasPrefix(last.DenialID, "dn_") {
					t.Errorf("%s %s: record %+v, want a denial by %q naming it", what, name, last, rule)
				}
			}

			for _, name := range []string{"summarize", "report_daily"} {
				res, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: name})
				if err != nil || len(res.Messages) != 1 || res.Messages[0].Content.(*mcp.TextContent).Text != "prompt "+name {
					t.Fatalf("prompts/get %s = %v, %v; want the server's prompt", name, res, err)
				}
			}
			getPrompt := func(name string) func() error {
				return func() error { _, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: name}); return err }
			}
			denied("prompts/get", "admin_reset", "", getPrompt("admin_reset")) // no allow rule names it
			denied("prompts/get", "report_secrets", "deny_rules[0]", getPrompt("report_secrets"))

			for _, uri := range []string{"file:///docs/readme.md", "file:///docs/guide/intro.md"} {
				res, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
				if err != nil || len(res.Contents) != 1 || res.Contents[0].Text != "content of "+uri {
					t.Fatalf("resources/read %s = %v, %v; want the server's content", uri, res, err)
				}
			}
			read := func(uri string) func() error {
				return func() error { _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri}); return err }
			}
			denied("resources/read", "file:///etc/passwd", "", read("file:///etc/passwd"))
			denied("resources/read", "file:///docs/private/key", "deny_rules[1]", read("file:///docs/private/key"))
			// Another spelling of a denied URI is denied too: a URI that is
			// not plain meets every deny rule.
			denied("resources/read", "file:///docs/../etc/passwd", "deny_rules[1]", read("file:///docs/../etc/passwd"))
			denied("resources/read", "file:///docs/PRIVATE/key", "deny_rules[1]", read("file:///docs/PRIVATE/key"))

			if tc.stateless {
				return // subscriptions need a session
			}
			if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: "file:///docs/readme.md"}); err != nil {
				t.Fatalf("resources/subscribe file:///docs/readme.md: %v", err)
			}
			if err := cs.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: "file:///docs/readme.md"}); err != nil {
				t.Fatalf("resources/unsubscribe file:///docs/readme.md: %v", err)
			}
			denied("resources/subscribe", "file:///docs/guide/intro.md", "", func() error {
				return cs.Subscribe(ctx, &mcp.SubscribeParams{URI: "file:///docs/guide/intro.md"})
			})
		})
	}
}
