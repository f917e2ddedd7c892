package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect/v2"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portcullis-dev/portcullis/gateway/sentryintake"
	"github.com/portcullis-dev/portcullis/internal/events"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
	"github.com/portcullis-dev/portcullis/sentry"
	"github.com/portcullis-dev/portcullis/store"
)

// The Sentry intake's transports: SentryService (Connect, gRPC, gRPC-Web)
// and POST /v1/sentry/events (CloudEvents JSON, one event or a batch, or
// one event in the HTTP binding's binary mode). All read events with the
// sentry package's reader — the RPC's messages (sentrywire.go) and binary
// mode's headers are written out as the CloudEvents JSON they stand for
// first — and hand them to gateway/sentryintake. A sentry token writes its own source's
// events and reads nothing; the operator RPCs are for admins and
// operators.

// SentryEventsPath is the HTTP intake's path.
const SentryEventsPath = "/v1/sentry/events"

// The media types of the HTTP intake (CloudEvents 1.0 JSON format,
// structured and batched).
const (
	cloudEventMedia      = "application/cloudevents+json"
	cloudEventBatchMedia = "application/cloudevents-batch+json"
)

type sentryService struct{ *Server }

// ingest checks the caller and runs one batch through the intake.
func (s *Server) ingest(ctx context.Context, p Principal, batch sentry.Batch) (sentryintake.Result, error) {
	if p.Role != store.RoleSentry {
		return sentryintake.Result{}, connect.NewError(connect.CodePermissionDenied, "only a sentry token may send events")
	}
	return s.sentry.Ingest(ctx, sentryintake.Sender{Source: p.Name, Sandboxes: p.Sandboxes}, batch)
}

func (s sentryService) PublishEvents(ctx context.Context, req *portcullisv1.PublishEventsRequest) (*portcullisv1.PublishEventsResponse, error) {
	p := mustPrincipal(ctx)
	batch, err := s.readProto(ctx, req.GetEvents())
	if err != nil {
		return nil, err
	}
	res, err := s.ingest(ctx, p, batch)
	if err != nil {
		return nil, err
	}
	src := res.Source(p.Name)
	return &portcullisv1.PublishEventsResponse{
		Stored: uint32(res.Stored), Duplicates: uint32(res.Duplicates),
		AckedSequence: src.AckedSequence, Gaps: gapsToProto(src.Gaps), MoreGaps: src.MoreGaps, Refused: refusalsToProto(res.Refused),
	}, nil
}

func (s sentryService) IngestEvents(ctx context.Context, stream portcullisv1connect.SentryServiceIngestEventsServerStream) error {
	p := mustPrincipal(ctx)
	for {
		req, err := stream.Receive()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		batch, err := s.readProto(ctx, req.GetEvents())
		if err != nil {
			return err
		}
		res, err := s.ingest(ctx, p, batch)
		if err != nil {
			return err
		}
		out := &portcullisv1.IngestEventsResponse{Stored: uint32(res.Stored), Duplicates: uint32(res.Duplicates), Refused: refusalsToProto(res.Refused)}
		for _, src := range res.Sources {
			out.Acks = append(out.Acks, &portcullisv1.SourceAck{Source: src.Source, AckedSequence: src.AckedSequence, Gaps: gapsToProto(src.Gaps), MoreGaps: src.MoreGaps})
		}
		if err := stream.Send(out); err != nil {
			return err
		}
	}
}

// readProto reads the events of a message, a batch in its turn.
func (s *Server) readProto(ctx context.Context, events []*portcullisv1.SentryEvent) (sentry.Batch, error) {
	if len(events) > 1 {
		release, err := s.sentry.Reading(ctx)
		if err != nil {
			return sentry.Batch{}, err
		}
		defer release()
	}
	return batchFromProto(events)
}

// batchFromProto writes each event out as its CloudEvents JSON and reads
// it back with the sentry reader, so both transports check events alike.
func batchFromProto(events []*portcullisv1.SentryEvent) (sentry.Batch, error) {
	if len(events) > sentry.MaxBatchEvents {
		return sentry.Batch{}, invalidField("events", "%d events, at most %d in a batch", len(events), sentry.MaxBatchEvents)
	}
	var b sentry.Batch
	for i, e := range events {
		raw, err := cloudEventJSON(e)
		if err == nil {
			var ev sentry.Event
			if ev, err = sentry.ParseCloudEvent(raw); err == nil {
				b.Events = append(b.Events, ev)
				continue
			}
		}
		var ferr *sentry.FieldError
		if !errors.As(err, &ferr) {
			ferr = &sentry.FieldError{Field: "data", Reason: err.Error()}
		}
		b.Refused = append(b.Refused, sentry.Refusal{Index: i, ID: e.GetId(), Err: ferr})
	}
	return b, nil
}

// cloudEventJSON is the CloudEvents JSON form of an event message.
func cloudEventJSON(e *portcullisv1.SentryEvent) ([]byte, error) {
	type envelope struct {
		SpecVersion     string          `json:"specversion"`
		ID              string          `json:"id"`
		Source          string          `json:"source"`
		Type            string          `json:"type"`
		Time            string          `json:"time,omitempty"`
		Subject         string          `json:"subject,omitempty"`
		Sequence        string          `json:"sequence,omitempty"`
		DataContentType string          `json:"datacontenttype,omitempty"`
		Data            json.RawMessage `json:"data,omitempty"`
		Signature       []byte          `json:"signature,omitempty"`
	}
	env := envelope{SpecVersion: e.GetSpecversion(), ID: e.GetId(), Source: e.GetSource(), Type: e.GetType(),
		Subject: e.GetSubject(), DataContentType: e.GetDatacontenttype(), Signature: e.GetSignature()}
	if e.GetTime() != nil {
		if err := e.GetTime().CheckValid(); err != nil {
			return nil, &sentry.FieldError{Field: "time", Reason: err.Error()}
		}
		env.Time = e.GetTime().AsTime().UTC().Format(time.RFC3339Nano)
	}
	if e.GetSequence() != 0 {
		env.Sequence = strconv.FormatUint(e.GetSequence(), 10)
	}
	if data, refused := privateData(e); refused != "" {
		return nil, &sentry.FieldError{Field: "data", Reason: refused}
	} else if data != nil {
		env.Data = data
	} else if e.GetData() != nil {
		data, err := protojson.Marshal(e.GetData())
		if err != nil {
			return nil, &sentry.FieldError{Field: "data", Reason: err.Error()}
		}
		env.Data = data
	}
	return json.Marshal(env)
}

func gapsToProto(gaps [][2]uint64) []*portcullisv1.SequenceGap {
	out := make([]*portcullisv1.SequenceGap, 0, len(gaps))
	for _, g := range gaps {
		out = append(out, &portcullisv1.SequenceGap{From: g[0], To: g[1]})
	}
	return out
}

func refusalsToProto(refused []sentry.Refusal) []*portcullisv1.EventRefusal {
	out := make([]*portcullisv1.EventRefusal, 0, len(refused))
	for _, r := range refused {
		out = append(out, &portcullisv1.EventRefusal{Index: uint32(r.Index), Id: r.ID, Reason: r.Err.Error()})
	}
	return out
}

// sentryHTTPAnswer is the HTTP intake's answer.
type sentryHTTPAnswer struct {
	Stored        int           `json:"stored"`
	Duplicates    int           `json:"duplicates"`
	AckedSequence uint64        `json:"acked_sequence"`
	Gaps          [][2]uint64   `json:"gaps"`
	MoreGaps      uint64        `json:"more_gaps"`
	Refused       []refusalJSON `json:"refused"`
	Error         string        `json:"error,omitempty"`
}

type refusalJSON struct {
	Index  int    `json:"index"`
	ID     string `json:"id,omitempty"`
	Reason string `json:"reason"`
}

// sentryEvents serves POST /v1/sentry/events: one CloudEvent
// (application/cloudevents+json, or binary mode: ce-* headers and data
// as the body) or a batch (application/cloudevents-batch+json), with a
// sentry token.
// bodies holds the buffers of Sentry request bodies between requests: a
// batch is most of a megabyte, and allocating one per request made the
// garbage collector run about a third more often at full ingest. A body
// is done with when its request's handler returns: the events read from
// it keep slices of it (sentry.ParseBatch) only until they are stored.
var bodies = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// bodyDeadline makes reading r's body fail once at passes, and returns
// what lifts the deadline (once the body is read: the answer is written
// without it). The connection's read deadline is set where the server
// supports it; elsewhere a timer closes the body.
func bodyDeadline(w http.ResponseWriter, r *http.Request, at time.Time) func() {
	rc := http.NewResponseController(w)
	if err := rc.SetReadDeadline(at); err == nil {
		var once sync.Once
		return func() { once.Do(func() { _ = rc.SetReadDeadline(time.Time{}) }) }
	}
	t := time.AfterFunc(time.Until(at), func() { r.Body.Close() })
	return func() { t.Stop() }
}

// readBody reads a request body of at most limit bytes into buf, grown
// once when the sender said its length (io.ReadAll would grow it a dozen
// times for a batch). The length is trusted only up to limit, which
// bounds the buffer either way.
func readBody(w http.ResponseWriter, r *http.Request, limit int64, buf *bytes.Buffer) ([]byte, error) {
	buf.Reset()
	if n := r.ContentLength; n > 0 && n <= limit {
		buf.Grow(int(n) + bytes.MinRead) // room to read the end of the body
	}
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, limit))
	return buf.Bytes(), err
}

func (s *Server) sentryEvents(w http.ResponseWriter, r *http.Request) {
	fail := func(code int, msg string) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		writeJSON(w, code, map[string]string{"error": msg})
	}
	p, err := s.auth.authenticate(r.Context(), r.Header.Get("Authorization"))
	if err != nil {
		w.Header().Set("WWW-Authenticate", "Bearer")
		fail(http.StatusUnauthorized, "a valid sentry bearer token is required")
		return
	}
	if p.Role != store.RoleSentry {
		fail(http.StatusForbidden, fmt.Sprintf("role %s may not send Sentry events; create a token with --role sentry", p.Role))
		return
	}
	media, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	binary := r.Header.Get("Ce-Specversion") != "" && media != cloudEventMedia && media != cloudEventBatchMedia
	if !binary && (err != nil || media != cloudEventMedia && media != cloudEventBatchMedia) {
		fail(http.StatusUnsupportedMediaType, fmt.Sprintf("Content-Type must be %s (one event) or %s (a batch), or the event's data with ce-* headers (binary mode)", cloudEventMedia, cloudEventBatchMedia))
		return
	}
	if binary {
		media = cloudEventMedia // one event
	}
	limit := int64(sentry.MaxBatchBytes)
	if media == cloudEventMedia {
		limit = sentry.MaxEventBytes
	}
	// The whole body must arrive within SentryBodyTimeout of the request,
	// whatever the sender's pace: a sender trickling bytes is cut off.
	stopBody := bodyDeadline(w, r, time.Now().Add(s.cfg.SentryBodyTimeout))
	defer stopBody()
	var release func()
	if media == cloudEventBatchMedia {
		// A batch body may be 16 MiB. One source has at most its share of
		// batches in flight, from the first byte of the body to the
		// answer; its others wait here, unread, until the body deadline.
		s.receiving.Add(1)
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.SentryBodyTimeout)
		leave, err := s.batchBodies.enter(ctx, p.Name)
		cancel()
		if err != nil {
			s.receiving.Add(-1)
			fail(http.StatusRequestTimeout, fmt.Sprintf("the body did not arrive within %v", s.cfg.SentryBodyTimeout))
			return
		}
		defer leave()
		release = func() { s.receiving.Add(-1) }
	}
	buf := bodies.Get().(*bytes.Buffer)
	defer bodies.Put(buf)
	body, err := readBody(w, r, limit, buf)
	if release != nil {
		release()
	}
	stopBody()
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			fail(http.StatusRequestEntityTooLarge, fmt.Sprintf("body larger than %d bytes", limit))
			return
		}
		fail(http.StatusRequestTimeout, fmt.Sprintf("the body did not arrive whole within %v: %v", s.cfg.SentryBodyTimeout, err))
		return
	}
	if media == cloudEventBatchMedia {
		// Only now, with the body read, does the batch take one of the
		// places all sources share: parsing and storing it is what they
		// bound.
		free, err := s.batchBodies.shared(r.Context())
		if err != nil {
			return
		}
		defer free()
	}
	var batch sentry.Batch
	if media == cloudEventMedia {
		var ev sentry.Event
		if binary {
			// The event in its structured form, read by the same reader;
			// a refusal of its headers is a refusal like the reader's.
			body, err = binaryEvent(r.Header, body)
		}
		if err == nil {
			ev, err = sentry.ParseCloudEvent(body)
		}
		var ferr *sentry.FieldError
		switch {
		case errors.As(err, &ferr):
			batch.Refused = []sentry.Refusal{{Index: 0, ID: "", Err: ferr}}
		case err != nil:
			fail(http.StatusBadRequest, err.Error())
			return
		default:
			batch.Events = []sentry.Event{ev}
		}
	} else {
		release, err := s.sentry.Reading(r.Context())
		if err != nil {
			fail(http.StatusServiceUnavailable, "the request ended before its turn to be read")
			return
		}
		batch, err = sentry.ParseBatch(body)
		release()
		if err != nil {
			fail(http.StatusBadRequest, err.Error())
			return
		}
	}
	res, err := s.ingest(r.Context(), p, batch)
	if err != nil {
		s.log.ErrorContext(r.Context(), "sentry intake failed", "source", p.Name, "err", err)
		fail(http.StatusServiceUnavailable, "the events could not be stored; send them again")
		return
	}
	src := res.Source(p.Name)
	ans := sentryHTTPAnswer{Stored: res.Stored, Duplicates: res.Duplicates, AckedSequence: src.AckedSequence, Gaps: src.Gaps, MoreGaps: src.MoreGaps, Refused: []refusalJSON{}}
	if ans.Gaps == nil {
		ans.Gaps = [][2]uint64{}
	}
	for _, rf := range res.Refused {
		ans.Refused = append(ans.Refused, refusalJSON{Index: rf.Index, ID: rf.ID, Reason: rf.Err.Error()})
	}
	code := http.StatusOK
	if media == cloudEventMedia && len(res.Refused) > 0 {
		// One event, refused: the request failed.
		code = http.StatusBadRequest
		ans.Error = ans.Refused[0].Reason
	}
	writeJSON(w, code, ans)
}

// binaryEvent writes an event sent in the CloudEvents HTTP binary content
// mode (its attributes in ce-* headers, its data the body) in the JSON
// format, as the HTTP protocol binding maps them: each ce-NAME header is
// attribute NAME (names are case-insensitive; values percent-decoded,
// and UTF-8), Content-Type is datacontenttype, the body is data. Our
// data is JSON, so the body must be a JSON value of a JSON media type.
// Its error is a *sentry.FieldError naming the attribute.
func binaryEvent(h http.Header, body []byte) ([]byte, error) {
	attrs := map[string]any{}
	for k, vs := range h {
		name, ok := strings.CutPrefix(strings.ToLower(k), "ce-")
		if !ok {
			continue
		}
		switch name {
		case "data", "data_base64", "datacontenttype":
			return nil, &sentry.FieldError{Field: name, Reason: "is not a header in binary mode: data is the body, datacontenttype the Content-Type"}
		}
		if len(vs) != 1 {
			return nil, &sentry.FieldError{Field: name, Reason: "sent in more than one header"}
		}
		v, err := percentDecode(vs[0])
		if err != nil {
			return nil, &sentry.FieldError{Field: name, Reason: err.Error()}
		}
		attrs[name] = v
	}
	ct := h.Get("Content-Type")
	if ct == "" {
		return nil, &sentry.FieldError{Field: "datacontenttype", Reason: "is required in binary mode (the Content-Type of data)"}
	}
	if !sentry.IsJSONMedia(ct) {
		return nil, &sentry.FieldError{Field: "datacontenttype", Reason: fmt.Sprintf("%q: data must be JSON (application/json or a +json type)", ct)}
	}
	attrs["datacontenttype"] = ct
	if !json.Valid(body) {
		return nil, &sentry.FieldError{Field: "data", Reason: "the body is not a JSON value"}
	}
	attrs["data"] = json.RawMessage(body)
	return json.Marshal(attrs)
}

// percentDecode reads a ce-* header value: the binding percent-encodes
// space, '"', '%' and every byte outside printable ASCII; the result must
// be UTF-8.
func percentDecode(v string) (string, error) {
	d, err := url.PathUnescape(v) // '+' stays '+', as the binding wants
	if err != nil {
		return "", fmt.Errorf("bad percent-encoding: %w", err)
	}
	if !utf8.ValidString(d) {
		return "", errors.New("percent-decodes to bytes that are not UTF-8")
	}
	return d, nil
}

// observeSentry feeds the metrics with one batch's outcome.
func (m *metrics) observeSentry(res events.SentryBatch) {
	m.sentryEvents.WithLabelValues("stored").Add(float64(res.Stored))
	m.sentryEvents.WithLabelValues("duplicate").Add(float64(res.Duplicates))
	m.sentryEvents.WithLabelValues("refused").Add(float64(res.Refused))
	for _, src := range res.Sources {
		var missing uint64
		for _, g := range src.Gaps {
			missing += g[1] - g[0] + 1
		}
		m.sentryGaps.WithLabelValues(src.Source).Set(float64(missing))
	}
}

// The operator RPCs.

func (s sentryService) ListEvents(ctx context.Context, req *portcullisv1.ListSentryEventsRequest) (*portcullisv1.ListSentryEventsResponse, error) {
	limit, err := listLimit("limit", req.GetLimit(), defaultListLimit, maxListLimit)
	if err != nil {
		return nil, err
	}
	f := store.SentryEventFilter{Sandbox: req.GetSandbox(), Source: req.GetSource(), Type: req.GetType(), Limit: limit}
	if req.GetSince() != nil {
		f.Since = req.GetSince().AsTime()
	}
	list, err := s.sentry.Events().ListSentryEvents(ctx, f)
	if err != nil {
		return nil, err
	}
	return &portcullisv1.ListSentryEventsResponse{Events: protoList(list, sentryEventToProto)}, nil
}

func sentryEventToProto(e store.SentryEvent) *portcullisv1.StoredSentryEvent {
	return &portcullisv1.StoredSentryEvent{
		Source: e.Source, Id: e.ID, Sequence: e.Sequence, Type: e.Type, Subject: e.Subject,
		Time: timestamppb.New(e.Time), ReceivedAt: timestamppb.New(e.ReceivedAt),
		Severity: e.Severity, Processing: e.Processing, PolicyHash: e.PolicyHash, DenialId: e.DenialID, TraceId: e.TraceID,
		Flags: e.Flags, Document: string(e.Document),
	}
}

func (s sentryService) ListGaps(ctx context.Context, req *portcullisv1.ListSentryGapsRequest) (*portcullisv1.ListSentryGapsResponse, error) {
	if req.GetSource() != "" {
		if err := checkSentrySource("source", req.GetSource()); err != nil {
			return nil, err
		}
	}
	list, err := s.sentry.Events().SentryGaps(ctx, req.GetSource())
	if err != nil {
		return nil, err
	}
	return &portcullisv1.ListSentryGapsResponse{Sources: protoList(list, func(src store.SentrySource) *portcullisv1.SourceAck {
		return &portcullisv1.SourceAck{Source: src.Source, AckedSequence: src.AckedSequence, Gaps: gapsToProto(src.Gaps), MoreGaps: src.MoreGaps}
	})}, nil
}

func (s sentryService) ListActions(ctx context.Context, req *portcullisv1.ListSentryActionsRequest) (*portcullisv1.ListSentryActionsResponse, error) {
	limit, err := listLimit("limit", req.GetLimit(), defaultListLimit, maxListLimit)
	if err != nil {
		return nil, err
	}
	list, err := s.store.ListSentryActions(ctx, store.SentryActionFilter{Sandbox: req.GetSandbox(), Status: req.GetStatus(), Limit: limit})
	if err != nil {
		return nil, err
	}
	return &portcullisv1.ListSentryActionsResponse{Actions: protoList(list, sentryActionToProto)}, nil
}

func sentryActionToProto(a store.SentryAction) *portcullisv1.SentryAction {
	out := &portcullisv1.SentryAction{
		Id: a.ID, Source: a.Source, EventId: a.EventID, Sandbox: a.Sandbox, Type: a.Type, Status: a.Status, Reason: a.Reason,
		Version: uint32(a.Version), ReceivedAt: timestamppb.New(a.ReceivedAt), CreatedAt: timestamppb.New(a.CreatedAt), DecidedBy: a.DecidedBy,
	}
	if a.AckedAt != nil {
		out.AckedAt = timestamppb.New(*a.AckedAt)
	}
	if a.DecidedAt != nil {
		out.DecidedAt = timestamppb.New(*a.DecidedAt)
	}
	return out
}

func (s sentryService) DecideAction(ctx context.Context, req *portcullisv1.DecideSentryActionRequest) (*portcullisv1.DecideSentryActionResponse, error) {
	p := mustPrincipal(ctx)
	a, err := s.sentry.Decide(ctx, req.GetId(), req.GetDecision(), req.GetReason(), p.Actor())
	if err != nil {
		return nil, err
	}
	return &portcullisv1.DecideSentryActionResponse{Action: sentryActionToProto(a)}, nil
}

func (s sentryService) SetSourceKey(ctx context.Context, req *portcullisv1.SetSentrySourceKeyRequest) (*portcullisv1.SetSentrySourceKeyResponse, error) {
	p := mustPrincipal(ctx)
	if err := checkSentrySource("source", req.GetSource()); err != nil {
		return nil, err
	}
	if n := len(req.GetPublicKey()); n != 32 {
		return nil, invalidField("public_key", "an Ed25519 public key is 32 bytes, not %d", n)
	}
	k, err := s.life.SetSentryKey(ctx, store.SentryKey{Source: req.GetSource(), PublicKey: req.GetPublicKey()}, p.Actor())
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(k.PublicKey)
	return &portcullisv1.SetSentrySourceKeyResponse{Source: k.Source, Fingerprint: hex.EncodeToString(sum[:])}, nil
}

func (s sentryService) DeleteSourceKey(ctx context.Context, req *portcullisv1.DeleteSentrySourceKeyRequest) (*portcullisv1.DeleteSentrySourceKeyResponse, error) {
	p := mustPrincipal(ctx)
	if err := checkSentrySource("source", req.GetSource()); err != nil {
		return nil, err
	}
	if err := s.life.DeleteSentryKey(ctx, req.GetSource(), p.Actor()); err != nil {
		return nil, missing(err, "source %q has no key", req.GetSource())
	}
	return &portcullisv1.DeleteSentrySourceKeyResponse{}, nil
}

// quarantineOf names the Sentry event whose quarantine holds sb frozen,
// if one does.
func (s *Server) quarantineOf(ctx context.Context, sb store.Sandbox, out *portcullisv1.Sandbox) error {
	if !sb.Frozen {
		return nil
	}
	list, err := s.store.ListSentryActions(ctx, store.SentryActionFilter{Sandbox: sb.Name, Status: []string{store.SentryFrozen, store.SentryApplied}, Limit: 1})
	if err != nil {
		return err
	}
	if len(list) == 1 && list[0].Version == sb.CurrentVersion {
		out.QuarantineSource, out.QuarantineEventId = list[0].Source, list[0].EventID
	}
	return nil
}

func (s sentryService) Timeline(ctx context.Context, req *portcullisv1.SentryTimelineRequest) (*portcullisv1.SentryTimelineResponse, error) {
	limit, err := listLimit("limit", req.GetLimit(), sentryintake.DefaultTimelineLimit, sentryintake.MaxTimelineLimit)
	if err != nil {
		return nil, err
	}
	since := s.cfg.Now().Add(-sentryintake.DefaultTimelineSpan)
	if req.GetSince() != nil {
		if err := req.GetSince().CheckValid(); err != nil {
			return nil, invalidField("since", "%v", err)
		}
		since = req.GetSince().AsTime()
	}
	if _, err := s.store.GetSandbox(ctx, req.GetSandbox()); err != nil {
		return nil, missing(err, "sandbox %q not found", req.GetSandbox())
	}
	entries, err := s.sentry.Timeline(ctx, req.GetSandbox(), since, limit)
	if err != nil {
		return nil, err
	}
	return &portcullisv1.SentryTimelineResponse{Entries: protoList(entries, func(e sentryintake.Entry) *portcullisv1.TimelineEntry {
		return &portcullisv1.TimelineEntry{Time: timestamppb.New(e.Time), Kind: e.Kind, Summary: e.Summary,
			PolicyVersion: uint32(e.Version), Refs: e.Refs, Links: e.Links, Flags: e.Flags}
	})}, nil
}
