package dataplane

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/portcullis-dev/portcullis/dataplane/mcp"
	"github.com/portcullis-dev/portcullis/policy"
)

// The agent sees only the tools it may call: on an MCP endpoint the proxy
// rewrites tools/list results — a JSON answer, each event of an event
// stream, every page — keeping a tool when the policy in force would
// allow a tools/call of it with some arguments (a tool allowed only for
// some arguments stays listed), and everything else of the result as the
// server sent it (nextCursor among it). A client routes an answer by its
// id whatever stream or body brings it, so every answer of the endpoint
// is looked at: one answering another request of the same POST passes as
// sent, and one with any other id is filtered when it looks like a
// tools/list result. mcp.filter_tools_list: false and audit endpoints
// pass the results unchanged. A result the proxy cannot read strictly
// never reaches the agent: its request gets a JSON-RPC error instead.

// toolsList is how one response from an MCP endpoint is read on its way
// to the agent: its tools/list results filtered (every tool's definition
// fingerprinted on the way), and its events watched for
// notifications/tools/list_changed.
type toolsList struct {
	p       *Proxy
	session sessionKey // the endpoint and MCP session the response belongs to
	answers mcp.ListResponse
	// ids are the tools/list requests' ids, answered with an error when
	// their result cannot be read; none for a POST without one and for a
	// GET.
	ids []json.RawMessage
	// get says the response answers a GET: a stream with no request of
	// its own to answer.
	get bool
	// own backs answers.Own for a POST of one request, and limit bounds
	// the read of a JSON answer: both here to need no allocation.
	own   [1]json.RawMessage
	limit io.LimitedReader
	// vis is which tools the agent may see, judged when a result comes.
	vis visibility
}

// keep fingerprints a listed tool (twice: the result names it more than
// once) and says whether the agent may see it.
func (l *toolsList) keep(name string, def []byte, twice bool) bool {
	return l.vis.keep(name, def, twice)
}

// listChanged is called when the server says its tools changed.
func (l *toolsList) listChanged() { l.p.defs.changed(l.session.ep) }

// requests is called with the requests the server sends the client
// (their IDKeys), stamped by the clock the client's answers are judged at
// (req.Time).
func (l *toolsList) requests(ids []string) { l.p.pending.add(l.session, ids, l.p.now()) }

// noLists is the ListResponse.IDs of a POST without a tools/list request:
// no answer is a tools/list result. Never written.
var noLists = map[string]bool{}

// listFilterCode is the JSON-RPC error code of a tools/list result the
// proxy could not read (a denial is -32001).
const listFilterCode = -32003

// maxListMessage bounds one message (a JSON answer, or an event's data)
// the proxy reads to filter.
const maxListMessage = 8 << 20

// toolsListFor returns how a response to r from the MCP endpoint key — a
// POST whose messages are mreq, or a GET (mreq nil), which may replay a
// POST's stream — is read on its way to the agent.
func (p *Proxy) toolsListFor(base policy.Request, r *http.Request, key mcpEndpointKey, mreq *mcp.Request) *toolsList {
	l := toolsLists.Get().(*toolsList)
	*l = toolsList{p: p, session: sessionKey{ep: key, session: r.Header.Get(mcp.HeaderMCPSessionID)}}
	version := r.Header.Get(mcp.HeaderMCPProtocolVersion)
	l.get = mreq == nil
	if mreq != nil {
		version = mreq.Version
		l.answers.IDs = noLists
		l.answers.Own = l.own[:0]
		requests := 0
		for _, m := range mreq.Messages {
			if m.Message.Response || m.ID == nil {
				continue
			}
			requests++
			if m.Message.Method != "tools/list" {
				l.answers.Own = append(l.answers.Own, m.ID)
				continue
			}
			id, err := mcp.IDKey(m.ID)
			if err != nil {
				continue // Parse refused such ids already
			}
			if len(l.ids) == 0 {
				l.answers.IDs = map[string]bool{}
			}
			l.answers.IDs[id] = true
			l.ids = append(l.ids, m.ID)
		}
		l.answers.Only = requests == 1 && len(l.ids) == 1
	}
	l.vis = visibility{p: p, base: base, version: version, key: key}
	return l
}

// toolsLists lends toolsList values: one is made for every request to an
// MCP endpoint, and none outlives its response (release).
var toolsLists = sync.Pool{New: func() any { return new(toolsList) }}

// release gives l back once its response has been copied; l is not used
// after.
func (l *toolsList) release() {
	*l = toolsList{}
	toolsLists.Put(l)
}

// visibility is which tools a tools/list through base (the request's
// destination and caller) may show under the policy in force, judged again
// when a new policy is loaded.
type visibility struct {
	p       *Proxy
	base    policy.Request
	version string
	key     mcpEndpointKey

	cur     *loaded
	filters bool            // the endpoint filters (not audit, filter_tools_list)
	listed  bool            // tools/list itself is allowed
	seen    map[string]bool // tool name and fingerprint → shown
}

// load judges the policy in force now.
func (v *visibility) load() {
	v.cur = v.p.current.Load()
	v.seen = map[string]bool{}
	v.filters, v.listed = true, false
	if v.cur == nil {
		return
	}
	list := v.base
	list.HTTPMethod = http.MethodPost
	list.MCP = &policy.MCPMessage{Method: "tools/list", ProtocolVersion: v.version}
	d := v.cur.matcher.Decide(&list)
	if !d.Allow {
		return // the list itself is denied now: show nothing
	}
	ep := endpointOf(v.cur, d)
	v.listed = true
	v.filters = !d.Audit && ep != nil && ep.Enforcement != policy.EnforcementAudit && ep.MCP.FiltersToolsList()
}

// keep fingerprints tool name's definition def (recording it) and says
// whether the agent may see the tool. A tool the result names twice is
// judged with no definition (toolDefs.observe): a rule pinning it does not
// show it.
func (v *visibility) keep(name string, def []byte, twice bool) bool {
	fp := v.p.defs.observe(v.key, name, def, twice, v.p.cfg.Now())
	if v.seen == nil || v.p.current.Load() != v.cur {
		v.load() // first use, or a new policy
	}
	switch {
	case !v.filters:
		return true
	case !v.listed || v.cur == nil:
		return false
	}
	seenKey := name + "\x00" + fp
	if shown, ok := v.seen[seenKey]; ok {
		return shown
	}
	call := v.base
	call.HTTPMethod = http.MethodPost
	call.MCP = &policy.MCPMessage{Method: "tools/call", Tool: name, ProtocolVersion: v.version, AnyArguments: true, ToolDefinition: fp}
	shown := v.cur.matcher.Decide(&call).Allow
	v.seen[seenKey] = shown
	return shown
}

// endpointOf is the endpoint that made decision d, nil if none did.
func endpointOf(cur *loaded, d policy.Decision) *policy.Endpoint {
	np, ok := cur.matcher.Policy().NetworkPolicies[d.Entry]
	if !ok || d.Endpoint < 0 || d.Endpoint >= len(np.Endpoints) {
		return nil
	}
	return np.Endpoints[d.Endpoint]
}

// errNotInspectable is a response whose tools/list results cannot be read.
var errNotInspectable = errors.New("not inspectable")

// copyFiltered copies res to w with its tools/list results filtered:
// event by event for an event stream, whole for anything else answering a
// POST (any of its responses may answer a tools/list request of another
// stream). It returns false, having written nothing, when the response
// should be copied unchanged: not a success, or without a body. A GET's
// successful answer is read as an event stream whatever its Content-Type
// says, as clients read it.
func (l *toolsList) copyFiltered(w http.ResponseWriter, res *http.Response) (handled bool, err error) {
	if res.StatusCode < 200 || res.StatusCode > 299 || res.StatusCode == http.StatusNoContent || res.ContentLength == 0 {
		return false, nil
	}
	if ce := encoded(res.Header["Content-Encoding"]); ce != "" {
		l.refuse(w, "the server's answer is "+ce+"-encoded")
		return true, errNotInspectable
	}
	if l.get || mcp.IsEventStream(res.Header.Get("Content-Type")) {
		return true, l.copyEvents(w, res)
	}
	bp := bodyBuffers.Get().(*bytes.Buffer)
	defer releaseBodyBuffer(bp)
	l.limit = io.LimitedReader{R: res.Body, N: maxListMessage + 1}
	_, err = bp.ReadFrom(&l.limit)
	body := bp.Bytes()
	switch {
	case err != nil:
		l.refuse(w, "the server's answer could not be read")
		return true, err
	case len(body) > maxListMessage:
		l.refuse(w, fmt.Sprintf("the server's answer is over %d bytes", maxListMessage))
		return true, errNotInspectable
	case len(bytes.TrimSpace(body)) == 0:
		w.WriteHeader(res.StatusCode)
		_, err := w.Write(body)
		return true, err
	}
	out, removed, ferr := mcp.FilterToolsList(body, l.answers, l.keep)
	if ferr != nil {
		l.refuse(w, ferr.Error())
		return true, errNotInspectable
	}
	if removed > 0 {
		w.Header().Set("Content-Length", strconv.Itoa(len(out)))
	}
	w.WriteHeader(res.StatusCode)
	_, err = w.Write(out)
	return true, err
}

// encoded returns the first content coding of a Content-Encoding field's
// values other than identity ("" when there is none): the answer cannot
// be read. Every value and every element of a list counts — a client
// that applies them all would decode what the proxy did not read.
func encoded(values []string) string {
	for _, v := range values {
		for c := range strings.SplitSeq(v, ",") {
			if c = strings.TrimSpace(c); c != "" && !strings.EqualFold(c, "identity") {
				return c
			}
		}
	}
	return ""
}

// bodyBuffers hold the JSON answers copyFiltered reads whole; one over
// 64 KiB is not kept.
var bodyBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func releaseBodyBuffer(b *bytes.Buffer) {
	if b.Cap() > 64<<10 {
		return
	}
	b.Reset()
	bodyBuffers.Put(b)
}

// refuse answers the tools/list requests with an error instead of a
// result the proxy cannot read (a 502: the upstream's answer is at fault).
func (l *toolsList) refuse(w http.ResponseWriter, why string) {
	w.Header().Del("Content-Encoding")
	w.Header().Del("Content-Length")
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadGateway)
	w.Write(l.errorBody(why))
}

// errorBody answers the POST's tools/list requests, or when it has none
// its other requests, with an error saying why.
func (l *toolsList) errorBody(why string) []byte {
	msg := "the proxy could not inspect the tools/list result: " + why
	ids := l.ids
	if len(ids) == 0 {
		msg = "the proxy could not inspect the server's answer: " + why
		ids = l.answers.Own
	}
	if len(ids) == 1 {
		return mcp.ResponseErrorBody(ids[0], listFilterCode, msg)
	}
	return mcp.DenyBody(ids, listFilterCode, msg, nil)
}

// copyEvents copies an event stream event by event, each flushed, with
// the data of every event that holds a tools/list result filtered. An
// event that carries no message (mcp.Event.Message: a resumable server's
// priming event, a comment, a retry …) passes as it came, and so does a
// message event the filter leaves unchanged — unless a line of it ends in
// a lone CR: then it goes re-encoded with LF line ends (mcp.Event.Bytes),
// so that a client ending lines only at LF reads what the proxy read. An
// event whose data cannot be read strictly — not JSON, or a tools/list
// result the proxy cannot read — is replaced, on a POST's stream, by an
// error answering its tools/list requests (or, without one, its other
// requests); on a GET stream (no request to answer) it is dropped.
func (l *toolsList) copyEvents(w http.ResponseWriter, res *http.Response) error {
	w.Header().Del("Content-Length")
	w.WriteHeader(res.StatusCode)
	rc := http.NewResponseController(w)
	if err := rc.Flush(); err != nil {
		return err
	}
	events := mcp.NewEventReader(res.Body, maxListMessage)
	for {
		ev, err := events.Next()
		if err != nil {
			if err == io.EOF {
				return nil
			}
			if errors.Is(err, mcp.ErrEventTooLarge) && !l.get {
				w.Write(mcp.EventBytes(nil, l.errorBody(err.Error()), true))
				rc.Flush()
			}
			return err
		}
		out := ev.Bytes() // re-encoded when a line ends in a lone CR
		if ev.Message() { // else a priming event, a comment …: passed as it came
			se, ferr := mcp.ReadServerEvent(ev.Data)
			if se.ListChanged {
				l.listChanged()
			}
			if len(se.Requests) > 0 {
				l.requests(se.Requests)
			}
			var filtered []byte
			removed := 0
			if ferr == nil {
				filtered, removed, ferr = mcp.FilterToolsList(ev.Data, l.answers, l.keep)
			}
			switch {
			case ferr != nil && l.get:
				continue // no request to answer
			case ferr != nil:
				out = mcp.EventBytes(resumeFields(ev.Fields), l.errorBody(ferr.Error()), true)
			case removed > 0:
				out = mcp.EventBytes(ev.RelayFields(), filtered, true)
			}
		}
		if _, err := w.Write(out); err != nil {
			return err
		}
		if err := rc.Flush(); err != nil {
			return err
		}
	}
}

// resumeFields are the id and retry fields among fields: what an error
// replacing an event the proxy refused keeps of it (the client's place in
// the stream), and nothing else the refused event carried.
func resumeFields(fields [][]byte) [][]byte {
	var kept [][]byte
	for _, f := range fields {
		name, _, _ := bytes.Cut(bytes.TrimRight(f, "\r\n"), []byte(":"))
		if string(name) == "id" || string(name) == "retry" {
			kept = append(kept, f)
		}
	}
	return kept
}
