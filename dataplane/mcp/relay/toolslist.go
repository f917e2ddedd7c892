package relay

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
)

// The agent sees only the tools it may call: on an MCP endpoint the proxy
// rewrites tools/list results — a JSON answer, each event of an event
// stream, every page — keeping a tool when Shows says so (the proxy's
// judging: when the policy in force would allow a tools/call of it with
// some arguments; every tool at an endpoint that does not filter), and
// everything else of the result as the server sent it (nextCursor among
// it). A client routes an answer by its id whatever stream or body brings
// it, so every answer of the endpoint is looked at: one answering another
// request of the same POST passes as sent, and one with any other id is
// filtered when it looks like a tools/list result. A result the proxy
// cannot read strictly never reaches the agent: its request gets a
// JSON-RPC error instead.

// Response is how one response from an MCP endpoint is read on its way
// to the agent: its tools/list results filtered (every tool's definition
// fingerprinted on the way), and its events watched for
// notifications/tools/list_changed and for the requests the server sends
// the client. Its zero value is ready for Init; one may be reused for the
// next response after Init again.
type Response struct {
	relay   *Relay
	session Session // the endpoint and MCP session the response belongs to
	shows   Shows
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
}

// Shows says which listed tools the agent may see: the policy's part of
// filtering a tools/list result.
type Shows interface {
	// Shows reports whether the agent may see tool name, whose
	// definition's fingerprint is fingerprint ("" when it has none a pin
	// could match: not canonical, or named twice by its listing).
	Shows(name, fingerprint string) bool
}

// keep fingerprints a listed tool (twice: the result names it more than
// once), recording its definition, and says whether the agent may see it.
func (r *Response) keep(name string, def []byte, twice bool) bool {
	fp := r.relay.defs.observe(r.session.Endpoint, name, def, twice, r.relay.cfg.Now())
	return r.shows.Shows(name, fp)
}

// listChanged is called when the server says its tools changed.
func (r *Response) listChanged() { r.relay.defs.changed(r.session.Endpoint) }

// requests is called with the requests the server sends the client
// (their IDKeys), stamped by the clock the client's answers are judged at.
func (r *Response) requests(ids []string) {
	r.relay.pending.add(r.session, ids, r.relay.cfg.JudgedAt())
}

// noLists is the ListResponse.IDs of a POST without a tools/list request:
// no answer is a tools/list result. Never written.
var noLists = map[string]bool{}

// listFilterCode is the JSON-RPC error code of a tools/list result the
// proxy could not read (a denial is -32001).
const listFilterCode = -32003

// maxListMessage bounds one message (a JSON answer, or an event's data)
// the proxy reads to filter.
const maxListMessage = 8 << 20

// Init makes r read the response, relayed by rl, to a request in session:
// a POST whose messages are mreq, or a GET (mreq nil), which may replay a
// POST's stream. shows judges which tools the agent sees.
func (r *Response) Init(rl *Relay, session Session, mreq *mcp.Request, shows Shows) {
	*r = Response{relay: rl, session: session, shows: shows}
	r.get = mreq == nil
	if mreq == nil {
		return
	}
	r.answers.IDs = noLists
	r.answers.Own = r.own[:0]
	requests := 0
	for _, m := range mreq.Messages {
		if m.Message.Response || m.ID == nil {
			continue
		}
		requests++
		if m.Message.Method != "tools/list" {
			r.answers.Own = append(r.answers.Own, m.ID)
			continue
		}
		id, err := mcp.IDKey(m.ID)
		if err != nil {
			continue // Parse refused such ids already
		}
		if len(r.ids) == 0 {
			r.answers.IDs = map[string]bool{}
		}
		r.answers.IDs[id] = true
		r.ids = append(r.ids, m.ID)
	}
	r.answers.Only = requests == 1 && len(r.ids) == 1
}

// Reset drops what r refers to (a response copied), so that a pooled
// Response keeps nothing alive.
func (r *Response) Reset() { *r = Response{} }

// errNotInspectable is a response whose tools/list results cannot be read.
var errNotInspectable = errors.New("not inspectable")

// CopyFiltered copies res to w with its tools/list results filtered:
// event by event for an event stream, whole for anything else answering a
// POST (any of its responses may answer a tools/list request of another
// stream). It returns false, having written nothing, when the response
// should be copied unchanged: not a success, or without a body. A GET's
// successful answer is read as an event stream whatever its Content-Type
// says, as clients read it.
func (r *Response) CopyFiltered(w http.ResponseWriter, res *http.Response) (handled bool, err error) {
	if res.StatusCode < 200 || res.StatusCode > 299 || res.StatusCode == http.StatusNoContent || res.ContentLength == 0 {
		return false, nil
	}
	if ce := encoded(res.Header["Content-Encoding"]); ce != "" {
		r.refuse(w, "the server's answer is "+ce+"-encoded")
		return true, errNotInspectable
	}
	if r.get || mcp.IsEventStream(res.Header.Get("Content-Type")) {
		return true, r.copyEvents(w, res)
	}
	bp := bodyBuffers.Get().(*bytes.Buffer)
	defer releaseBodyBuffer(bp)
	r.limit = io.LimitedReader{R: res.Body, N: maxListMessage + 1}
	_, err = bp.ReadFrom(&r.limit)
	body := bp.Bytes()
	switch {
	case err != nil:
		r.refuse(w, "the server's answer could not be read")
		return true, err
	case len(body) > maxListMessage:
		r.refuse(w, fmt.Sprintf("the server's answer is over %d bytes", maxListMessage))
		return true, errNotInspectable
	case len(bytes.TrimSpace(body)) == 0:
		w.WriteHeader(res.StatusCode)
		_, err := w.Write(body)
		return true, err
	}
	out, removed, ferr := mcp.FilterToolsList(body, r.answers, r.keep)
	if ferr != nil {
		r.refuse(w, ferr.Error())
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
func (r *Response) refuse(w http.ResponseWriter, why string) {
	w.Header().Del("Content-Encoding")
	w.Header().Del("Content-Length")
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadGateway)
	w.Write(r.errorBody(why))
}

// errorBody answers the POST's tools/list requests, or when it has none
// its other requests, with an error saying why.
func (r *Response) errorBody(why string) []byte {
	msg := "the proxy could not inspect the tools/list result: " + why
	ids := r.ids
	if len(ids) == 0 {
		msg = "the proxy could not inspect the server's answer: " + why
		ids = r.answers.Own
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
func (r *Response) copyEvents(w http.ResponseWriter, res *http.Response) error {
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
			if errors.Is(err, mcp.ErrEventTooLarge) && !r.get {
				w.Write(mcp.EventBytes(nil, r.errorBody(err.Error()), true))
				rc.Flush()
			}
			return err
		}
		out := ev.Bytes() // re-encoded when a line ends in a lone CR
		if ev.Message() { // else a priming event, a comment …: passed as it came
			se, ferr := mcp.ReadServerEvent(ev.Data)
			if se.ListChanged {
				r.listChanged()
			}
			if len(se.Requests) > 0 {
				r.requests(se.Requests)
			}
			var filtered []byte
			removed := 0
			if ferr == nil {
				filtered, removed, ferr = mcp.FilterToolsList(ev.Data, r.answers, r.keep)
			}
			switch {
			case ferr != nil && r.get:
				continue // no request to answer
			case ferr != nil:
				out = mcp.EventBytes(resumeFields(ev.Fields), r.errorBody(ferr.Error()), true)
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
