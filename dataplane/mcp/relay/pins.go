package relay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/portcullis-dev/portcullis/dataplane/decision"
	"github.com/portcullis-dev/portcullis/dataplane/mcp"
)

// Pinned tool definitions. A tools/call allow rule may pin the tool's
// definition (policy.L7Rule.Definition). The proxy fingerprints every tool
// of every tools/list result it relays and keeps the latest per MCP
// endpoint; a notifications/tools/list_changed makes what it kept stale.
// A call that a pin would allow passes only while the proxy knows the
// tool's current definition to be the pinned one; when it knows none, it
// lists the server's tools itself, within the caller's session and with
// the caller's credentials, before judging. A tool whose definition
// differs from its pin is not listed, and its calls are denied with the
// reason tool_definition_changed and the fingerprint seen. Every change of
// a tool's definition, pinned or not, is recorded (ToolDefinitions) and
// handed to Config.OnChange (in gateway mode, the shipper: the gateway
// keeps every definition per sandbox).
//
// A tools/list result that names a tool more than once (in one result, or
// across the pages of the proxy's own listing) leaves its definition
// ambiguous: a client may take either entry, and which one a pin was
// checked against would be the proxy's guess. Whatever the order of the
// entries, and even when they are the same definition, the tool counts as
// changed: no pin holds for it (the filtered list hides it wherever a rule
// pins it, and its calls such a rule would allow are denied with
// tool_definition_changed) until a listing names it once. The proxy logs
// the tool the first time a listing names it twice. Each entry's
// definition is recorded as seen, as any other.

// Endpoint names an MCP endpoint as the proxy reaches it.
type Endpoint struct {
	Host string
	Port int
	Path string // canonical
}

// toolDefs is what the proxy knows of the tools' definitions: per
// endpoint, each tool's latest fingerprint and the list epoch it was seen
// in (a list_changed starts a new epoch, and older fingerprints are stale).
type toolDefs struct {
	mu  sync.Mutex
	eps map[Endpoint]*endpointTools

	// listing runs one self-listing per endpoint at a time; the calls
	// that need it wait for its result.
	listing singleflight.Group

	// changes are the last definition changes seen (Changes).
	changes []ToolDefinitionChange
	// onChange, if set, receives each change (Config.OnChange), outside
	// mu.
	onChange func(ToolDefinitionChange)
	// log hears of tools a listing names twice.
	log *slog.Logger
}

type endpointTools struct {
	epoch  uint64
	tools  map[string]seenTool
	listed time.Time // when the proxy last listed every tool itself
}

type seenTool struct {
	fingerprint string // "" when the definition could not be canonicalised
	epoch       uint64
	at          time.Time // when it was listed
	twice       bool      // the listing named the tool more than once
}

// Bounds on what toolDefs holds: an MCP server may list any number of
// tools, and a host glob may reach any number of servers.
const (
	maxDefEndpoints   = 256
	maxToolsPerServer = 4096
	maxDefChanges     = 256
	// relistInterval is how soon after listing a server's tools itself the
	// proxy lists them again for a call whose tool it still does not know
	// (a pinned tool the server does not list): calls must not become a
	// way to flood the server with lists.
	relistInterval = 2 * time.Second
	// defMaxAge is how long a definition the proxy saw listed counts as
	// the tool's current one: a server without sessions sends no
	// list_changed, so a pinned call after that lists the tools again.
	defMaxAge = 30 * time.Second
	// maxListPages bounds the pages of one self-listing.
	maxListPages = 64
	// listTimeout bounds one self-listing.
	listTimeout = 10 * time.Second
)

// ToolDefinitionChange is one tool whose definition the proxy saw change
// (or saw for the first time: Before is "").
type ToolDefinitionChange = decision.ToolDefinitionChange

// maxChangeDefinition bounds the definition bytes a change record keeps.
const maxChangeDefinition = decision.MaxDefinitionBytes

// endpoint returns key's tools, made when absent (evicting some other
// endpoint at the bound). Call with mu held.
func (d *toolDefs) endpoint(key Endpoint) *endpointTools {
	if d.eps == nil {
		d.eps = map[Endpoint]*endpointTools{}
	}
	e := d.eps[key]
	if e == nil {
		if len(d.eps) >= maxDefEndpoints {
			for k := range d.eps { // any one: its tools are listed again when needed
				delete(d.eps, k)
				break
			}
		}
		e = &endpointTools{tools: map[string]seenTool{}}
		d.eps[key] = e
	}
	return e
}

// observe records tool name's definition as listed now by key's server
// (twice: in a listing that names it more than once), and returns the
// fingerprint a pin is checked against: "" when the definition cannot be
// canonicalised or is ambiguous (no pin matches it).
func (d *toolDefs) observe(key Endpoint, name string, def []byte, twice bool, now time.Time) string {
	fp, err := mcp.Fingerprint(def)
	if err != nil {
		fp = ""
	}
	c, changed, newlyTwice := d.keep(key, name, def, fp, twice, now)
	if newlyTwice {
		d.log.Warn("an MCP server lists a tool more than once: its definition is ambiguous, and no pin holds for it",
			"host", key.Host, "port", key.Port, "path", key.Path, "tool", name)
	}
	if changed && d.onChange != nil {
		d.onChange(c)
	}
	if twice {
		return ""
	}
	return fp
}

// keep records fp as tool name's latest definition at key (twice: named
// more than once by its listing), and returns the change it is, if it is
// one, and whether the tool was not named twice before.
func (d *toolDefs) keep(key Endpoint, name string, def []byte, fp string, twice bool, now time.Time) (_ ToolDefinitionChange, changed, newlyTwice bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e := d.endpoint(key)
	before, known := e.tools[name]
	if !known && len(e.tools) >= maxToolsPerServer {
		return ToolDefinitionChange{}, false, false // judged, but not kept: the server lists too many tools
	}
	e.tools[name] = seenTool{fingerprint: fp, epoch: e.epoch, at: now, twice: twice}
	newlyTwice = twice && !(known && before.twice)
	if known && before.fingerprint == fp {
		return ToolDefinitionChange{}, false, newlyTwice
	}
	c := ToolDefinitionChange{Time: now, Host: key.Host, Port: key.Port, Path: key.Path, Tool: name,
		Before: before.fingerprint, After: fp}
	if len(def) <= maxChangeDefinition {
		c.Definition = bytes.Clone(def)
	}
	if len(d.changes) >= maxDefChanges {
		d.changes = append(d.changes[:0], d.changes[1:]...)
	}
	kept := c
	kept.Definition = nil // the ring is the changes' outline; the definition goes to the shipper
	d.changes = append(d.changes, kept)
	return c, true, newlyTwice
}

// current returns the fingerprint of tool name's current definition at
// key ("" when its listing named it twice), and false when the proxy
// knows none (never listed, listed before the server said its tools
// changed, or more than defMaxAge ago).
func (d *toolDefs) current(key Endpoint, name string, now time.Time) (string, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e := d.eps[key]
	if e == nil {
		return "", false
	}
	t, ok := e.tools[name]
	if !ok || t.epoch != e.epoch || now.Sub(t.at) >= defMaxAge {
		return "", false
	}
	if t.twice {
		return "", true // ambiguous: no pin holds
	}
	return t.fingerprint, true
}

// changed makes every definition known at key stale (the server sent
// notifications/tools/list_changed).
func (d *toolDefs) changed(key Endpoint) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e := d.eps[key]; e != nil {
		e.epoch++
		e.listed = time.Time{}
	}
}

// listedRecently reports whether the proxy listed key's tools itself less
// than relistInterval ago, in the current epoch.
func (d *toolDefs) listedRecently(key Endpoint, now time.Time) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	e := d.eps[key]
	return e != nil && !e.listed.IsZero() && now.Sub(e.listed) < relistInterval
}

func (d *toolDefs) markListed(key Endpoint, at time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.endpoint(key).listed = at
}

// Changes returns the last tool definition changes the proxy saw, oldest
// first, without their definitions (those went to Config.OnChange).
func (rl *Relay) Changes() []ToolDefinitionChange {
	rl.defs.mu.Lock()
	defer rl.defs.mu.Unlock()
	return append([]ToolDefinitionChange(nil), rl.defs.changes...)
}

// WithDefinitions sets, on each tools/call of mreq, the fingerprint of its
// tool's current definition at ep, as far as the proxy knows it (what a
// pin is checked against), and returns how many of those tools it knows
// no definition of.
func (rl *Relay) WithDefinitions(ep Endpoint, mreq *mcp.Request) (unknown int) {
	for i := range mreq.Messages {
		m := &mreq.Messages[i].Message
		if m.Method != "tools/call" || m.Response {
			continue
		}
		fp, ok := rl.defs.current(ep, m.Tool, rl.cfg.Now())
		m.ToolDefinition = fp
		if !ok {
			unknown++
		}
	}
	return unknown
}

// Listing is how the proxy lists a server's tools itself: where, and as
// whose request.
type Listing struct {
	// Scheme ("http" or "https") and Authority (host:port) make the URL
	// with Path, the endpoint's canonical (escaped) path.
	Scheme, Authority, Path string
	// Host is the caller's Host line.
	Host string
	// Header is the caller's: its session and credentials go along, so
	// that the list is the one the caller would be shown.
	Header http.Header
	// Version is the caller's MCP protocol version.
	Version string
	// Upstream sends the requests, to the address checked for the
	// caller's.
	Upstream Upstream
	// Credential, when not nil, adds what the caller's forwarded request
	// would carry (its bound provider's credential) to each request, its
	// body given; it returns the body to send.
	Credential func(out *http.Request, body []byte) []byte
}

// Upstream sends one request whose body is held whole (h1.Pool is one).
// The response's header fields are read into header (nil: a new map).
type Upstream interface {
	RoundTrip(ctx context.Context, req *http.Request, body []byte, header http.Header) (*http.Response, error)
}

// Verify lists the tools of ep's server itself, as l says (the caller of
// a tools/call whose tool's definition the proxy does not know), so that
// the call can be judged again. One listing runs per endpoint at a time;
// ctx's values are kept, not its cancellation (the listing serves every
// call waiting for it).
func (rl *Relay) Verify(ctx context.Context, ep Endpoint, l Listing) error {
	if rl.defs.listedRecently(ep, rl.cfg.Now()) {
		return nil // what it did not find then, it would not find now
	}
	_, err, _ := rl.defs.listing.Do(fmt.Sprint(ep), func() (any, error) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), listTimeout)
		defer cancel()
		err := rl.listTools(ctx, ep, l)
		if err != nil {
			// A failed listing waits its turn too: calls must not
			// become a way to flood the server with lists.
			rl.defs.markListed(ep, rl.cfg.Now())
		}
		return nil, err
	})
	return err
}

// verifyCounter numbers the proxy's own requests.
var verifyCounter atomic.Uint64

// listTools sends tools/list, every page, to ep's server and records
// each tool's definition; a tool two entries name, on one page or on two,
// is recorded as named twice.
func (rl *Relay) listTools(ctx context.Context, ep Endpoint, l Listing) error {
	unescaped, err := url.PathUnescape(l.Path)
	if err != nil {
		return err
	}
	cursor := ""
	entries := map[string]int{} // tool name → entries naming it, all pages
	for page := 0; ; page++ {
		if page == maxListPages {
			return fmt.Errorf("the server lists more than %d pages of tools", maxListPages)
		}
		id := json.RawMessage(strconv.Quote("portcullis-verify-" + strconv.FormatUint(verifyCounter.Add(1), 10)))
		body := listRequestBody(id, cursor, l.Version)
		out := &http.Request{
			Method:     http.MethodPost,
			URL:        &url.URL{Scheme: l.Scheme, Host: l.Authority, Path: unescaped, RawPath: l.Path},
			Proto:      "HTTP/1.1",
			ProtoMajor: 1,
			ProtoMinor: 1,
			Header: http.Header{
				"Content-Type":    {"application/json"},
				"Accept":          {"application/json, text/event-stream"},
				"Accept-Encoding": {"identity"},
			},
			Host:          l.Host,
			ContentLength: int64(len(body)),
		}
		// The caller's session and credentials: the list the caller would
		// be shown.
		for _, h := range []string{mcp.HeaderMCPSessionID, mcp.HeaderMCPProtocolVersion, "Authorization", "Cookie"} {
			if v := l.Header.Values(h); len(v) > 0 {
				out.Header[h] = v
			}
		}
		if l.Version == "2026-07-28" {
			out.Header.Set(mcp.HeaderMCPMethod, "tools/list")
		}
		if l.Credential != nil {
			body = l.Credential(out, body)
		}
		res, err := l.Upstream.RoundTrip(ctx, out, body, nil)
		if err != nil {
			return fmt.Errorf("list the server's tools: %w", err)
		}
		tools, next, err := readListAnswer(res, id)
		res.Body.Close()
		if err != nil {
			return fmt.Errorf("list the server's tools: %w", err)
		}
		now := rl.cfg.Now()
		for _, tool := range tools {
			entries[tool.Name]++
		}
		for _, tool := range tools {
			rl.defs.observe(ep, tool.Name, tool.Definition, entries[tool.Name] > 1, now)
		}
		if next == "" {
			rl.defs.markListed(ep, now)
			return nil
		}
		cursor = next
	}
}

// listRequestBody is a tools/list request in the caller's protocol
// version (2026-07-28 carries the version and client in params._meta).
func listRequestBody(id json.RawMessage, cursor, version string) []byte {
	params := map[string]any{}
	if cursor != "" {
		params["cursor"] = cursor
	}
	if version == "2026-07-28" {
		params["_meta"] = map[string]any{
			mcp.MetaKeyProtocolVersion:                   version,
			"io.modelcontextprotocol/clientCapabilities": map[string]any{},
			"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "portcullis-proxy", "version": "1"},
		}
	}
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": "tools/list", "params": params})
	return b
}

// readListAnswer reads the answer to the tools/list request id from res:
// a JSON body, or the event of an event stream that holds it.
func readListAnswer(res *http.Response, id json.RawMessage) ([]mcp.Tool, string, error) {
	if res.StatusCode != http.StatusOK {
		return nil, "", fmt.Errorf("the server answered %s", res.Status)
	}
	if ce := res.Header.Get("Content-Encoding"); ce != "" && ce != "identity" {
		return nil, "", fmt.Errorf("the server's answer is %s-encoded", ce)
	}
	stream := mcp.IsEventStream(res.Header.Get("Content-Type"))
	tools, next, found, err := mcp.ReadListAnswer(res.Body, stream, id, maxListMessage)
	switch {
	case err != nil || found:
		return tools, next, err
	case stream:
		return nil, "", errors.New("the server's stream ended without the answer")
	}
	return nil, "", errors.New("the server's answer does not answer the request")
}
