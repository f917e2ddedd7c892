package gateway

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strconv"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portcullis-dev/portcullis/advisor"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/store"
)

// The MCP tool definitions the sandbox's proxies saw (gateway/distribution
// stores them as they are shipped): SandboxService.ListTools groups them
// per endpoint and tool, the current definition first, and a proposal
// that re-pins a tool shows the definition pinned and the one proposed
// (Proposal.definition_changes).

func (s sandboxService) ListTools(ctx context.Context, req *portcullisv1.ListToolsRequest) (*portcullisv1.ListToolsResponse, error) {
	if _, err := s.store.GetSandbox(ctx, req.GetName()); err != nil {
		return nil, missing(err, "sandbox %q not found", req.GetName())
	}
	defs, err := s.store.ListToolDefinitions(ctx, store.ToolDefinitionFilter{Sandbox: req.GetName()})
	if err != nil {
		return nil, err
	}
	out := &portcullisv1.ListToolsResponse{Tools: []*portcullisv1.SandboxTool{}}
	var cur *portcullisv1.SandboxTool
	for _, d := range defs { // ordered by endpoint and tool, newest first
		if req.GetTool() != "" && d.Tool != req.GetTool() {
			continue
		}
		if cur == nil || cur.Host != d.Host || cur.Port != uint32(d.Port) || cur.Path != d.Path || cur.Tool != d.Tool {
			cur = &portcullisv1.SandboxTool{Host: d.Host, Port: uint32(d.Port), Path: d.Path, Tool: d.Tool}
			out.Tools = append(out.Tools, cur)
		}
		cur.Definitions = append(cur.Definitions, toolDefinitionToProto(d))
	}
	boundDefinitions(out.Tools, maxListedDefinitionBytes)
	return out, nil
}

// maxListedDefinitionBytes bounds the definitions one ListTools answer
// carries: a sandbox keeps up to 1,000 definitions of up to 64 KiB each,
// more than a client takes in one message (4 MiB by default).
const maxListedDefinitionBytes = 2 << 20

// boundDefinitions leaves out of tools the definitions past budget bytes,
// marking them omitted: every tool's current definition first, in order,
// then the past ones.
func boundDefinitions(tools []*portcullisv1.SandboxTool, budget int) {
	for _, current := range []bool{true, false} {
		for _, t := range tools {
			for i, d := range t.Definitions {
				if (i == 0) != current {
					continue
				}
				if n := len(d.Definition); n > budget {
					d.Definition, d.DefinitionOmitted = "", true
				} else {
					budget -= n
				}
			}
		}
	}
}

func toolDefinitionToProto(d store.ToolDefinition) *portcullisv1.ToolDefinition {
	return &portcullisv1.ToolDefinition{
		Fingerprint: d.Fingerprint,
		Definition:  string(d.Definition),
		FirstSeen:   timestamppb.New(d.FirstSeen),
		LastSeen:    timestamppb.New(d.LastSeen),
		ProxyId:     d.ProxyID,
	}
}

// seenDefinition returns the definition of tool with that fingerprint as
// a proxy of sandbox saw it last (any endpoint: the fingerprint covers
// the whole tool object), or only the fingerprint when the gateway never
// saw it.
func (s *Server) seenDefinition(ctx context.Context, sandbox, tool, fingerprint string) (*portcullisv1.ToolDefinition, error) {
	defs, err := s.store.ListToolDefinitions(ctx, store.ToolDefinitionFilter{Sandbox: sandbox, Fingerprint: fingerprint})
	if err != nil {
		return nil, err
	}
	var best *store.ToolDefinition
	for i, d := range defs {
		if d.Tool == tool && (best == nil || d.LastSeen.After(best.LastSeen)) {
			best = &defs[i]
		}
	}
	if best == nil {
		return &portcullisv1.ToolDefinition{Fingerprint: fingerprint}, nil
	}
	return toolDefinitionToProto(*best), nil
}

// definitionChanges shows each repin of p: the definition its rules pin
// now and the one they would pin, as the sandbox's proxies saw them.
func (s *Server) definitionChanges(ctx context.Context, p store.Proposal) ([]*portcullisv1.DefinitionChange, error) {
	if !bytes.Contains(p.Document, []byte(`"repin"`)) {
		return nil, nil // no repin: no need to read the document
	}
	prop, err := advisor.ParseProposal(p.Document)
	if err != nil {
		return nil, fmt.Errorf("proposal %d: stored document: %w", p.ID, err)
	}
	var out []*portcullisv1.DefinitionChange
	for _, op := range prop.Operations {
		o := op.Repin
		if o == nil {
			continue
		}
		c := &portcullisv1.DefinitionChange{Endpoint: net.JoinHostPort(o.Host, strconv.Itoa(o.Port)) + o.Path, Tool: o.Tool}
		if c.Pinned, err = s.seenDefinition(ctx, p.Sandbox, o.Tool, o.From); err != nil {
			return nil, err
		}
		if c.Proposed, err = s.seenDefinition(ctx, p.Sandbox, o.Tool, o.To); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}
