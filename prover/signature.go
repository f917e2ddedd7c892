package prover

import (
	"encoding/json"
	"net/netip"
	"path"
	"strconv"
	"strings"

	"github.com/portcullis-dev/portcullis/policy"
)

// Signatures: every predicate Decide evaluates on a request of the group.

func bit(sb *strings.Builder, b bool) {
	if b {
		sb.WriteByte('1')
	} else {
		sb.WriteByte('0')
	}
}

func cleanAbsolute(p string) bool { return strings.HasPrefix(p, "/") && path.Clean(p) == p }

func destAddr(r policy.Request) (netip.Addr, bool) {
	if r.Addr.IsValid() {
		return r.Addr.Unmap().WithZone(""), true
	}
	return policy.ParseHostIP(r.Host)
}

// inDest reports whether r is addressed to the group's destination.
func (g *group) inDest(r policy.Request) bool {
	if !hasPort(g.dest, r.Port) {
		return false
	}
	if g.dest.Host == "" {
		a, ok := destAddr(r)
		return ok && len(g.dest.AllowedIPs) > 0 && allowedIPsContains(g.dest.AllowedIPs, a)
	}
	return policy.MatchHost(g.dest.Host, r.Host)
}

// destSig is the destination part of the signature: binary, host, address
// and port.
func (g *group) destSig(r policy.Request) string {
	return g.binSig(r.Binary) + "|" + g.hostAddrSig(r)
}

// binSig is the binary's part of the signature.
func (g *group) binSig(binary string) string {
	var sb strings.Builder
	clean := cleanAbsolute(binary)
	for _, b := range g.binPats {
		bit(&sb, clean && policy.MatchGlob(b, binary))
	}
	return sb.String()
}

// hostAddrSig is the host, address and port part of the signature.
func (g *group) hostAddrSig(r policy.Request) string {
	var sb strings.Builder
	for _, h := range g.hostPats {
		bit(&sb, policy.MatchHost(h, r.Host))
	}
	bit(&sb, strings.TrimSpace(r.Host) == "")
	bit(&sb, policy.IsMetadataHost(r.Host))
	bit(&sb, policy.IsLoopbackName(r.Host))
	literal, isLiteral := policy.ParseHostIP(r.Host)
	bit(&sb, isLiteral)
	sb.WriteByte('|')
	a, ok := destAddr(r)
	bit(&sb, ok)
	if ok {
		for _, l := range g.ipLists {
			bit(&sb, allowedIPsContains(l, a))
		}
		bit(&sb, policy.IsPrivate(a))
		_, denied := policy.AlwaysDenied(a, g.dev)
		bit(&sb, denied)
		if isLiteral {
			_, denied := policy.AlwaysDenied(literal, g.dev)
			bit(&sb, denied)
		}
		bit(&sb, r.Addr.IsValid() && isLiteral && literal != r.Addr.Unmap().WithZone(""))
	}
	sb.WriteByte('|')
	sb.WriteString(strconv.Itoa(r.Port))
	return sb.String()
}

// l7Sig is the part of the signature from the HTTP method, path and MCP
// message.
func (g *group) l7Sig(r policy.Request) string { return g.l7SigMemo(r, nil) }

// l7SigMemo is l7Sig, taking the path part of the signature from
// pathSigs (by path; read only) when it is there.
func (g *group) l7SigMemo(r policy.Request, pathSigs map[string]string) string {
	var sb strings.Builder
	m := strings.ToUpper(r.HTTPMethod)
	if m == "" {
		return "-"
	}
	for _, x := range g.methods {
		bit(&sb, m == x)
	}
	sb.WriteByte('|')
	if ps, ok := pathSigs[r.Path]; ok {
		sb.WriteString(ps)
	} else {
		sb.WriteString(g.pathSig(r.Path))
	}
	if g.hasQuery {
		sb.WriteString("|q=" + strconv.Quote(r.Query))
	}
	if !g.hasMCP {
		return sb.String()
	}
	sb.WriteByte('|')
	bit(&sb, r.MCP == nil)
	if r.MCP == nil {
		return sb.String()
	}
	msg := r.MCP
	bit(&sb, msg.Response)
	if msg.Response {
		return sb.String()
	}
	bit(&sb, msg.Method == "")
	bit(&sb, policy.IsKnownMCPMethod(msg.Method))
	for _, p := range g.mcpMethodPats {
		bit(&sb, policy.MatchGlob(p, msg.Method))
		bit(&sb, policy.MatchDenyGlob(p, msg.Method))
	}
	if msg.Method == "tools/call" {
		sb.WriteByte('|')
		bit(&sb, msg.Tool == "")
		bit(&sb, policy.ValidToolName(msg.Tool))
		for _, t := range g.toolPats {
			bit(&sb, policy.MatchGlob(t, msg.Tool))
			bit(&sb, t == msg.Tool)
		}
		args := strings.TrimSpace(string(msg.Arguments))
		bit(&sb, args != "" && !json.Valid(msg.Arguments))
	}
	if msg.Method == "prompts/get" {
		sb.WriteByte('|')
		bit(&sb, msg.Prompt == "")
		for _, p := range g.promptPats {
			bit(&sb, policy.MatchGlob(p, msg.Prompt))
			bit(&sb, policy.MatchDenyGlob(p, msg.Prompt))
		}
	}
	if policy.IsResourceMethod(msg.Method) {
		sb.WriteByte('|')
		bit(&sb, msg.Resource == "")
		bit(&sb, policy.PlainResourceURI(msg.Resource) == nil)
		for _, p := range g.resourcePats {
			bit(&sb, policy.MatchResource(p, msg.Resource))
			bit(&sb, policy.MatchDenyResource(p, msg.Resource))
		}
	}
	sb.WriteByte('|')
	v := msg.ProtocolVersion
	bit(&sb, v == "")
	bit(&sb, v == policy.DefaultMCPVersion)
	for _, x := range g.versions {
		bit(&sb, v == x)
	}
	return sb.String()
}

// pathSig is the path part of l7Sig.
func (g *group) pathSig(p string) string {
	var sb strings.Builder
	for _, aes := range []bool{false, true} {
		if aes && !g.aes {
			break
		}
		c, err := policy.CanonicalPath(p, aes)
		bit(&sb, err != nil)
		if err == nil {
			for _, p := range g.pathPats {
				bit(&sb, policy.MatchGlob(p, c))
				bit(&sb, policy.MatchDenyPath(p, c))
			}
		}
	}
	return sb.String()
}

// pathSigTable is pathSig of every path candidate. Both depend only on
// the group's path patterns and whether one of its endpoints allows
// encoded slashes, so the table is remembered by those (and is read
// only).
func (g *group) pathSigTable() map[string]string {
	kind := "pathsig"
	if g.aes {
		kind += "%2F"
	}
	return cached(kind, g.pathPats, func() map[string]string {
		t := map[string]string{}
		for _, p := range g.pathCandidates() {
			g.m.charge(stageCandidates, 8*len(g.pathPats)*(len(p)+1)+len(p))
			t[p] = g.pathSig(p)
		}
		return t
	})
}

// signature names the class of r in the group; ok is false when r is not
// addressed to the group's destination.
func (g *group) signature(r policy.Request) (string, bool) {
	if !g.inDest(r) {
		return "", false
	}
	return g.destSig(r) + "#" + g.l7Sig(r), true
}
