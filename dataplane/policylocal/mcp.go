package policylocal

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// policy.local's MCP server (http://policy.local/mcp): an agent that
// speaks MCP asks for access through the protocol it already uses. The
// tools answer what the REST endpoints answer; a refusal, a rate limit or
// a missing gateway is a tool result with isError set and the same JSON
// error body as its text, never a protocol error.

const policyLocalInstructions = `This server is your network proxy. When a request is denied by policy (HTTP 403, or a JSON-RPC error carrying a denial_id), call list_denials to see what was denied and the narrowest rule that would allow it, then propose with that denial_id and a rationale a human reviewer will read. A human decides; proposal_status (with wait_seconds) tells you when. A tool call answered HTTP 429 (JSON-RPC error -32029, rate limited) was allowed but over its rate limit: wait retry_after_seconds and retry; it is not a denial and cannot be proposed.`

// newMCPHandler builds the MCP handler of policy.local. It is
// stateless (no sessions to keep for an untrusted client), answers JSON,
// and is reached only through the proxy, so the SDK's DNS-rebinding check
// (which compares Host with the proxy's loopback listener) does not apply;
// cross-origin browser requests are refused before it is called.
func newMCPHandler(pl *Server) http.Handler {
	s := mcp.NewServer(&mcp.Implementation{Name: "portcullis-policy-local", Version: "v1"},
		&mcp.ServerOptions{Instructions: policyLocalInstructions})
	mcp.AddTool(s, &mcp.Tool{
		Name:        "list_denials",
		Description: "List this sandbox's recent denied requests, newest first. Each has a denial_id and, when one can be offered, a suggestion: the narrowest proposal that would allow exactly that request.",
	}, pl.toolListDenials)
	mcp.AddTool(s, &mcp.Tool{
		Name: "propose",
		Description: "Ask for access. Either give denial_id (from list_denials) and a rationale — the narrowest rule for that request is proposed — " +
			"or a proposal: rationale and operations (add_allow_rules, add_rule, add_binary, add_deny_rules, repin), optionally base_version and idempotency_key. " +
			"Returns the stored proposal (id, status, findings); a human approves or rejects it.",
	}, pl.toolPropose)
	mcp.AddTool(s, &mcp.Tool{
		Name:        "proposal_status",
		Description: "The status of a proposal (pending, approved, applied, rejected, expired, superseded, withdrawn). With wait_seconds (at most 300) it waits until the proposal is decided.",
		// Written out: the id is accepted as a number or as the string
		// propose answers it as (protojson writes 64-bit ids as strings).
		InputSchema: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"id":           map[string]any{"type": []string{"integer", "string"}, "description": "the proposal id returned by propose"},
				"wait_seconds": map[string]any{"type": "integer", "minimum": 0, "description": "wait up to this many seconds (at most 300) for a decision; 0 answers at once"},
			},
			"required":             []string{"id"},
			"additionalProperties": false,
		},
	}, pl.toolProposalStatus)
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{
		Stateless:                  true,
		JSONResponse:               true,
		DisableLocalhostProtection: true,
		MaxRequestBodyBytes:        maxLocalMCPBody,
	})
}

// localMCP serves POST /mcp. The body is read first, bounded in size and
// time, so a slow client cannot hold the read side open while a tool
// waits.
func (pl *Server) localMCP(w http.ResponseWriter, r *http.Request) {
	body, lerr := readLocalBody(w, r, maxLocalMCPBody)
	if lerr != nil {
		writeErrorBody(w, lerr)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	pl.mcpHandler().ServeHTTP(w, r)
}

type listDenialsInput struct {
	Last int `json:"last,omitempty" jsonschema:"how many recent denials to list, newest first (default 20, at most 200)"`
}

func (pl *Server) toolListDenials(_ context.Context, _ *mcp.CallToolRequest, in listDenialsInput) (*mcp.CallToolResult, any, error) {
	last := in.Last
	switch {
	case last == 0:
		last = defaultDenials
	case last < 0:
		return nil, nil, newLocalError(http.StatusBadRequest, "invalid_argument", "last must be positive (at most 200)")
	}
	return nil, map[string]any{"denials": pl.recentDenials(last)}, nil
}

type proposeInput struct {
	DenialID       string           `json:"denial_id,omitempty" jsonschema:"a denial_id from list_denials: propose the narrowest rule that would allow that request"`
	Rationale      string           `json:"rationale,omitempty" jsonschema:"why the access is needed, for the human reviewer (required with operations)"`
	IdempotencyKey string           `json:"idempotency_key,omitempty" jsonschema:"optional key: a retry with the same key returns the same proposal"`
	BaseVersion    *uint64          `json:"base_version,omitempty" jsonschema:"optional policy version the operations apply to (default: current)"`
	Operations     []map[string]any `json:"operations,omitempty" jsonschema:"the proposal's operations, as in a proposal file (instead of denial_id)"`
}

func (pl *Server) toolPropose(ctx context.Context, _ *mcp.CallToolRequest, in proposeInput) (*mcp.CallToolResult, any, error) {
	var req *portcullisv1.SubmitProposalRequest
	switch {
	case in.DenialID != "" && (len(in.Operations) > 0 || in.BaseVersion != nil):
		return nil, nil, newLocalError(http.StatusBadRequest, "invalid_argument", "give either denial_id or operations, not both")
	case in.DenialID != "":
		req = &portcullisv1.SubmitProposalRequest{DenialId: in.DenialID, Rationale: in.Rationale, IdempotencyKey: in.IdempotencyKey}
	case len(in.Operations) > 0:
		doc, err := json.Marshal(struct {
			Rationale      string           `json:"rationale"`
			BaseVersion    *uint64          `json:"base_version,omitempty"`
			IdempotencyKey string           `json:"idempotency_key,omitempty"`
			Operations     []map[string]any `json:"operations"`
		}{in.Rationale, in.BaseVersion, in.IdempotencyKey, in.Operations})
		if err != nil {
			return nil, nil, newLocalError(http.StatusBadRequest, "invalid_argument", "cannot encode the proposal: "+err.Error())
		}
		req = &portcullisv1.SubmitProposalRequest{Document: string(doc)}
	default:
		return nil, nil, newLocalError(http.StatusBadRequest, "invalid_argument", "give denial_id (from list_denials) or a proposal's rationale and operations")
	}
	prop, lerr := pl.submit(ctx, req)
	if lerr != nil {
		return nil, nil, lerr
	}
	return nil, trimmedProposal(prop), nil
}

type proposalStatusInput struct {
	ID          proposalRef `json:"id"`
	WaitSeconds int         `json:"wait_seconds,omitempty"`
}

// proposalRef is a proposal id given as a number (12) or a string ("12").
type proposalRef uint64

func (r *proposalRef) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	id, ok := proposalID(s)
	if !ok {
		return fmt.Errorf("id %s is not a proposal id (a positive integer)", b)
	}
	*r = proposalRef(id)
	return nil
}

func (pl *Server) toolProposalStatus(ctx context.Context, _ *mcp.CallToolRequest, in proposalStatusInput) (*mcp.CallToolResult, any, error) {
	if in.ID == 0 {
		return nil, nil, newLocalError(http.StatusBadRequest, "invalid_argument", "id must be a positive proposal id")
	}
	if in.WaitSeconds < 0 {
		return nil, nil, newLocalError(http.StatusBadRequest, "invalid_argument", "wait_seconds must not be negative")
	}
	wait := min(time.Duration(in.WaitSeconds)*time.Second, maxWait)
	prop, lerr := pl.waitProposal(ctx, uint64(in.ID), wait)
	if lerr != nil {
		return nil, nil, lerr
	}
	return nil, trimmedProposal(prop), nil
}
