package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// AgentConfig is what Agent needs: where its proxy is, which MCP server
// to call, and what.
type AgentConfig struct {
	// Proxy is the sandbox's proxy, the agent's only way out
	// (http://proxy:3128).
	Proxy string
	// Server is the MCP endpoint (http://demo-mcp:8081/mcp).
	Server string
	// Tool and Arguments (a JSON object) are the call the agent needs.
	// Defaults lookup_order and {"order_id":"A-10420"}: an id the
	// article's arguments_schema refuses.
	Tool      string
	Arguments string
	// Rationale goes with the proposal.
	Rationale string
	// Out receives what the agent does, one line a step.
	Out io.Writer
	// Retry is how often a refused or unreachable step is tried again
	// (default 1s; the compose services start in any order).
	Retry time.Duration
}

// Agent plays the sandboxed agent of the README's loop, as a program: it
// calls a tool through its proxy (MCP 2026-07-28, stateless); when the
// call is denied it proposes the narrowest change through
// http://policy.local, holding no token, waits until an operator decides,
// and calls again. It returns nil once the call succeeded (at once, if it
// was already allowed), and an error if the proposal was refused,
// rejected or withdrawn, or ctx ended first.
func Agent(ctx context.Context, cfg AgentConfig) error {
	if cfg.Tool == "" {
		cfg.Tool = "lookup_order"
	}
	if cfg.Arguments == "" {
		cfg.Arguments = `{"order_id":"A-10420"}`
	}
	if cfg.Rationale == "" {
		cfg.Rationale = "the agent needs this call: order ids have five digits now"
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	if cfg.Retry <= 0 {
		cfg.Retry = time.Second
	}
	if !json.Valid([]byte(cfg.Arguments)) {
		return fmt.Errorf("arguments %q are not JSON", cfg.Arguments)
	}
	proxy, err := url.Parse(cfg.Proxy)
	if err != nil || proxy.Host == "" {
		return fmt.Errorf("proxy %q: want a URL such as http://proxy:3128", cfg.Proxy)
	}
	a := &agent{cfg: cfg, hc: &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy)}}}
	defer a.hc.CloseIdleConnections()

	// Wait for the proxy and its first policy version: until then it
	// denies everything.
	for {
		code, raw, err := a.local(ctx, http.MethodGet, "http://policy.local/v1/policy", nil)
		if err == nil && code == http.StatusOK {
			break
		}
		a.say("waiting for the proxy's policy: %d %v %s", code, err, bytes.TrimSpace(raw))
		if err := a.pause(ctx); err != nil {
			return err
		}
	}

	var res callResult
	for {
		res, err = a.call(ctx)
		if err == nil && res.DenialID == "" && res.Error == "" {
			a.say("%s %s: allowed: %s", cfg.Tool, cfg.Arguments, res.Result)
			return nil
		}
		if err == nil && res.DenialID != "" {
			break
		}
		a.say("%s %s: not yet judged (%v%s); retrying", cfg.Tool, cfg.Arguments, err, res.Error)
		if err := a.pause(ctx); err != nil {
			return err
		}
	}
	a.say("%s %s: denied (%s): %s", cfg.Tool, cfg.Arguments, res.DenialID, res.Error)

	// The proposal, through policy.local: the proxy adds the sandbox's
	// token and the denied call's arguments.
	body, _ := json.Marshal(map[string]string{"denial_id": res.DenialID, "rationale": cfg.Rationale})
	var prop struct {
		ID     json.Number `json:"id"`
		Status string      `json:"status"`
	}
	for {
		code, raw, err := a.local(ctx, http.MethodPost, "http://policy.local/v1/proposals", body)
		if err == nil && (code == http.StatusCreated || code == http.StatusOK) {
			if err := json.Unmarshal(raw, &prop); err != nil || prop.ID == "" {
				return fmt.Errorf("policy.local answered %s", raw)
			}
			break
		}
		if err == nil && code >= 400 && code < 500 {
			return fmt.Errorf("the proposal was refused (%d): %s", code, bytes.TrimSpace(raw))
		}
		a.say("policy.local: %d %v %s; retrying", code, err, bytes.TrimSpace(raw))
		if err := a.pause(ctx); err != nil {
			return err
		}
	}
	a.say("proposal %s filed (%s): waiting for an operator (portcullis proposals approve %s --reason …)", prop.ID, prop.Status, prop.ID)

	// Wait until it is decided.
	for prop.Status == "pending" || prop.Status == "approved" {
		code, raw, err := a.local(ctx, http.MethodGet, "http://policy.local/v1/proposals/"+prop.ID.String()+"/wait?timeout=60s", nil)
		if err != nil || code != http.StatusOK {
			a.say("policy.local: %d %v %s; retrying", code, err, bytes.TrimSpace(raw))
			if err := a.pause(ctx); err != nil {
				return err
			}
			continue
		}
		if err := json.Unmarshal(raw, &prop); err != nil {
			return fmt.Errorf("policy.local answered %s", raw)
		}
	}
	if prop.Status != "applied" {
		return fmt.Errorf("proposal %s was %s", prop.ID, prop.Status)
	}
	a.say("proposal %s applied", prop.ID)

	// The proxy applies the new version within moments of the gateway.
	last := ""
	for {
		res, err = a.call(ctx)
		if err == nil && res.DenialID == "" && res.Error == "" {
			a.say("%s %s: allowed: %s", cfg.Tool, cfg.Arguments, res.Result)
			return nil
		}
		if why := fmt.Sprint(err, res.Error); why != last {
			a.say("%s %s: not yet allowed (%s); retrying", cfg.Tool, cfg.Arguments, why)
			last = why
		}
		if err := a.pause(ctx); err != nil {
			return fmt.Errorf("the call is still denied after the approval: %s", res.Error)
		}
	}
}

type agent struct {
	cfg AgentConfig
	hc  *http.Client
}

func (a *agent) say(format string, args ...any) { fmt.Fprintf(a.cfg.Out, format+"\n", args...) }

func (a *agent) pause(ctx context.Context) error {
	t := time.NewTimer(a.cfg.Retry)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// callResult is one tools/call's outcome: a result, or a JSON-RPC error
// (with the denial's id when the proxy denied it).
type callResult struct {
	Result   string
	Error    string
	DenialID string
}

// call makes the tools/call through the proxy, as an MCP 2026-07-28
// client without a session does.
func (a *agent) call(ctx context.Context) (callResult, error) {
	const version = "2026-07-28"
	msg := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":%q,"arguments":%s,`+
		`"_meta":{"io.modelcontextprotocol/protocolVersion":%q,"io.modelcontextprotocol/clientCapabilities":{},`+
		`"io.modelcontextprotocol/clientInfo":{"name":"portcullis-demo-agent","version":"1"}}}}`, a.cfg.Tool, a.cfg.Arguments, version)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.cfg.Server, strings.NewReader(msg))
	if err != nil {
		return callResult{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", version)
	req.Header.Set("Mcp-Method", "tools/call")
	req.Header.Set("Mcp-Name", a.cfg.Tool)
	res, err := a.hc.Do(req)
	if err != nil {
		return callResult{}, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return callResult{}, err
	}
	// A JSON answer, or an event stream whose data line is the answer.
	data := raw
	if strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		for _, l := range strings.Split(string(raw), "\n") {
			if d, ok := strings.CutPrefix(l, "data: "); ok {
				data = []byte(d)
			}
		}
	}
	var rpc struct {
		Result json.RawMessage `json:"result"`
		Error  *struct {
			Message string `json:"message"`
			Data    struct {
				DenialID string `json:"denial_id"`
			} `json:"data"`
		} `json:"error"`
	}
	if err := json.Unmarshal(data, &rpc); err != nil {
		return callResult{}, fmt.Errorf("HTTP %d: %s", res.StatusCode, bytes.TrimSpace(raw))
	}
	if rpc.Error != nil {
		return callResult{Error: rpc.Error.Message, DenialID: rpc.Error.Data.DenialID}, nil
	}
	if res.StatusCode != http.StatusOK {
		return callResult{}, errors.New(res.Status)
	}
	return callResult{Result: string(rpc.Result)}, nil
}

// local is a request to policy.local through the proxy.
func (a *agent) local(ctx context.Context, method, u string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := a.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, 4<<20))
	return res.StatusCode, raw, err
}
