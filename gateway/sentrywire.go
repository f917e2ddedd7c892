package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"math"
	"net/http"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connecthttp"
	"connectrpc.com/connect/v2/connectproto"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
	"github.com/portcullis-dev/portcullis/sentry"
)

// The Sentry RPCs' messages (PublishEvents, IngestEvents) are read by
// hand rather than by the protobuf runtime: a google.protobuf.Struct
// decoded costs about 60 times the bytes it was sent in, and the message
// used to be decoded whole before any bound of the intake applied. Here a
// PublishEvents call takes its source's place before Connect reads its
// message (at most its read limit, within SentryBodyTimeout), an
// IngestEvents message once read; then a shared place, and only then are
// the message's bytes read; each event's data goes from its wire form
// straight to the JSON text the sentry reader reads, at most
// sentry.MaxEventBytes of it, so that reading a message costs a small
// multiple of its size.

// Private fields of a SentryEvent that carry, from the codec to the
// handler, what became of its data: the JSON text, or why it was refused.
// They are never read from a client: the codec decodes every field
// itself and keeps no unknown field.
const (
	dataJSONField   protowire.Number = protowire.MaxValidNumber
	dataRefuseField protowire.Number = protowire.MaxValidNumber - 1
)

// isSentryIngest reports whether procedure sends events to the intake.
func isSentryIngest(procedure string) bool {
	return procedure == portcullisv1connect.SentryServicePublishEventsProcedure ||
		procedure == portcullisv1connect.SentryServiceIngestEventsProcedure
}

// sentryCodecs are the codecs of the Sentry ingest procedures.
func sentryCodecs() connecthttp.Option {
	return connecthttp.WithConditionalOptions(func(spec connect.Spec) []connecthttp.Option {
		if !isSentryIngest(spec.Procedure) {
			return nil
		}
		return []connecthttp.Option{connecthttp.WithCodecs(
			wireCodec{Codec: connectproto.NewBinaryCodec(), json: false},
			wireCodec{Codec: connectproto.NewJSONCodec(), json: true},
		)}
	})
}

// wireRequest is what admittedStream asks the codec to read into: the
// request message, and what to wait for before reading it.
type wireRequest struct {
	msg   proto.Message
	admit func() error
}

// wireCodec reads a wireRequest by hand; anything else (the responses,
// errors' details) goes to the usual codec.
type wireCodec struct {
	connect.Codec
	json bool
}

func (c wireCodec) UnmarshalRead(ctx context.Context, src io.Reader, msg any) error {
	w, ok := msg.(*wireRequest)
	if !ok {
		return c.Codec.UnmarshalRead(ctx, src, msg)
	}
	var b []byte
	if buf, ok := src.(interface{ Bytes() []byte }); ok {
		b = buf.Bytes() // Connect's buffer, valid until we return
	} else {
		var err error
		if b, err = io.ReadAll(src); err != nil {
			return err
		}
	}
	if err := w.admit(); err != nil {
		return err
	}
	var events []*portcullisv1.SentryEvent
	var err error
	if c.json {
		events, err = eventsFromJSON(b)
	} else {
		events, err = eventsFromWire(b)
	}
	if err != nil {
		return err
	}
	switch m := w.msg.(type) {
	case *portcullisv1.PublishEventsRequest:
		m.Events = events
	case *portcullisv1.IngestEventsRequest:
		m.Events = events
	default:
		return fmt.Errorf("gateway: no Sentry reader for %T", w.msg)
	}
	return nil
}

// admittedStream gives each request message of a Sentry ingest RPC to
// the codec as a wireRequest that takes the source's places before it is
// read, and gives them back once the message has been answered (the next
// Receive, or the end of the call). A PublishEvents message (unary) takes
// its source's place before a byte of it is read, so that a source's
// calls beyond its places wait unread, not each buffering a message; an
// IngestEvents stream, which waits for its next message holding nothing,
// takes it once the message is read. Either waits at most timeout.
type admittedStream struct {
	connect.ServerStream
	ctx     context.Context
	places  *places
	source  string
	unary   bool
	timeout time.Duration
	release func()
}

func (a *admittedStream) Receive(msg any) error {
	a.done()
	m, ok := msg.(proto.Message)
	if !ok {
		return a.ServerStream.Receive(msg)
	}
	if a.unary {
		leave, err := a.enter()
		if err != nil {
			return err
		}
		a.release = leave
		return a.ServerStream.Receive(&wireRequest{msg: m, admit: func() error {
			free, err := a.places.shared(a.ctx)
			if err != nil {
				return err
			}
			a.release = func() { free(); leave() }
			return nil
		}})
	}
	return a.ServerStream.Receive(&wireRequest{msg: m, admit: func() error {
		leave, err := a.enter()
		if err != nil {
			return err
		}
		free, err := a.places.shared(a.ctx)
		if err != nil {
			leave()
			return err
		}
		a.release = func() { free(); leave() }
		return nil
	}})
}

// enter waits at most a.timeout for one of the source's places.
func (a *admittedStream) enter() (func(), error) {
	ctx, cancel := context.WithTimeout(a.ctx, a.timeout)
	defer cancel()
	leave, err := a.places.enter(ctx, a.source)
	if err != nil {
		if a.ctx.Err() != nil {
			return nil, a.ctx.Err()
		}
		return nil, connect.NewError(connect.CodeDeadlineExceeded, fmt.Sprintf("the message did not arrive within %v: the source's places are taken", a.timeout))
	}
	return leave, nil
}

func (a *admittedStream) done() {
	if a.release != nil {
		a.release()
		a.release = nil
	}
}

// admitSentry is the interceptor (after authorize) that bounds the Sentry
// ingest RPCs by the intake's places before their messages are read.
func (s *Server) admitSentry(next connect.ServerFunc) connect.ServerFunc {
	return func(ctx context.Context, spec connect.Spec, stream connect.ServerStream) error {
		if !isSentryIngest(spec.Procedure) {
			return next(ctx, spec, stream)
		}
		p, ok := principalFrom(ctx)
		if !ok {
			return connect.NewError(connect.CodeUnauthenticated, "a sentry token is required")
		}
		a := &admittedStream{ServerStream: stream, ctx: ctx, places: s.batchBodies, source: p.Name,
			unary: spec.Procedure == portcullisv1connect.SentryServicePublishEventsProcedure, timeout: s.cfg.SentryBodyTimeout}
		if !a.unary {
			closeStream, ok := s.batchBodies.openStream(p.Name)
			if !ok {
				return connect.NewError(connect.CodeResourceExhausted, fmt.Sprintf("source %q holds %d IngestEvents streams open already, the most one source may", p.Name, s.batchBodies.maxStreams()))
			}
			defer closeStream()
		}
		defer a.done()
		return next(ctx, spec, a)
	}
}

// publishDeadline bounds the read of a PublishEvents request as the HTTP
// intake's: its whole body, place awaited included, must arrive within
// SentryBodyTimeout of the request.
func (s *Server) publishDeadline(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == portcullisv1connect.SentryServicePublishEventsProcedure {
			stop := bodyDeadline(w, r, time.Now().Add(s.cfg.SentryBodyTimeout))
			defer stop()
		}
		next.ServeHTTP(w, r)
	})
}

// errTooManyEvents refuses a message of more than sentry.MaxBatchEvents.
var errTooManyEvents = fmt.Errorf("events: more than %d events in a batch", sentry.MaxBatchEvents)

// eventsFromWire reads the events (field 1) of a PublishEventsRequest or
// IngestEventsRequest in its protobuf binary form.
func eventsFromWire(b []byte) ([]*portcullisv1.SentryEvent, error) {
	var events []*portcullisv1.SentryEvent
	for e, err := range wireElements(b) {
		if err != nil {
			return nil, err
		}
		if len(events) == sentry.MaxBatchEvents {
			return nil, errTooManyEvents
		}
		ev, err := eventFromWire(e)
		if err != nil {
			return nil, fmt.Errorf("events[%d]: %w", len(events), err)
		}
		events = append(events, ev)
	}
	return events, nil
}

// eventFromWire reads one SentryEvent; its data becomes JSON text (or a
// refusal) in the event's private fields.
func eventFromWire(b []byte) (*portcullisv1.SentryEvent, error) {
	ev := &portcullisv1.SentryEvent{}
	var data []byte
	hasData := false
	for f, readErr := range wireFields(b) {
		// A known field of another type is refused as such, whether its
		// value parses or not.
		known, err := checkEventField(f.num, f.typ)
		if err != nil {
			return nil, err
		}
		if readErr != nil {
			return nil, readErr
		}
		if !known {
			continue
		}
		str := func(name string) (string, error) {
			if !utf8.Valid(f.data) {
				return "", fmt.Errorf("%s: invalid UTF-8", name)
			}
			return string(f.data), nil
		}
		switch f.num {
		case 1:
			ev.Specversion, err = str("specversion")
		case 2:
			ev.Id, err = str("id")
		case 3:
			ev.Source, err = str("source")
		case 4:
			ev.Type, err = str("type")
		case 5:
			ev.Time, err = timestampFromWire(f.data)
		case 6:
			ev.Subject, err = str("subject")
		case 7:
			ev.Sequence = f.bits()
		case 8:
			ev.Datacontenttype, err = str("datacontenttype")
		case 9:
			// A message field sent twice is merged: its bytes joined.
			data, hasData = append(data, f.data...), true
		case 10:
			ev.Signature = bytes.Clone(f.data)
		}
		if err != nil {
			return nil, err
		}
	}
	if hasData {
		out, err := structJSON(make([]byte, 0, min(len(data)+16, sentry.MaxEventBytes)), data, 0)
		if err != nil {
			setPrivate(ev, dataRefuseField, []byte(err.Error()))
		} else {
			setPrivate(ev, dataJSONField, out)
		}
	}
	return ev, nil
}

// checkEventField reports whether a SentryEvent has a field num, and
// refuses it sent as another wire type than its own.
func checkEventField(num protowire.Number, typ protowire.Type) (known bool, err error) {
	want := protowire.BytesType
	switch num {
	case 7:
		want = protowire.VarintType
	case 1, 2, 3, 4, 5, 6, 8, 9, 10:
	default:
		return false, nil
	}
	if typ != want {
		return true, fmt.Errorf("field %d: wire type %d, want %d", num, typ, want)
	}
	return true, nil
}

func timestampFromWire(b []byte) (*timestamppb.Timestamp, error) {
	ts := &timestamppb.Timestamp{}
	if err := proto.Unmarshal(b, ts); err != nil {
		return nil, fmt.Errorf("time: %w", err)
	}
	return ts, nil
}

// setPrivate records v in one of ev's private fields.
func setPrivate(ev *portcullisv1.SentryEvent, num protowire.Number, v []byte) {
	raw := protowire.AppendTag(nil, num, protowire.BytesType)
	ev.ProtoReflect().SetUnknown(protowire.AppendBytes(raw, v))
}

// privateData returns what the codec made of ev's data: its JSON text, or
// why it was refused; neither for an event read by the protobuf runtime.
func privateData(ev *portcullisv1.SentryEvent) (data []byte, refused string) {
	for f, err := range wireFields(ev.ProtoReflect().GetUnknown()) {
		if err != nil || f.typ != protowire.BytesType {
			return nil, ""
		}
		switch f.num {
		case dataJSONField:
			data = f.data
		case dataRefuseField:
			refused = string(f.data)
		}
	}
	return data, refused
}

// wireField is one field of a message in protobuf's binary form: its
// number, its wire type and its value: a length-delimited field's bytes,
// a varint's or a fixed64's encoding (read by bits), nothing for a field
// of another type. (It is kept to 32 bytes, so that the compiler holds it
// in registers rather than copying it through memory.)
type wireField struct {
	num  protowire.Number
	typ  protowire.Type
	data []byte
}

// bits is the value of a varint or fixed64 field.
func (f wireField) bits() uint64 {
	if f.typ == protowire.Fixed64Type {
		v, _ := protowire.ConsumeFixed64(f.data)
		return v
	}
	v, _ := protowire.ConsumeVarint(f.data)
	return v
}

// wireFields yields the fields of the message b in wire order (a field
// of a type with no value here is checked and skipped); the first that
// does not parse ends it, with the error (and the field's number and type
// when its tag parsed).
func wireFields(b []byte) iter.Seq2[wireField, error] {
	return func(yield func(wireField, error) bool) {
		for len(b) > 0 {
			var f wireField
			var n, m int
			if f.num, f.typ, n = protowire.ConsumeTag(b); n < 0 {
				yield(f, protowire.ParseError(n))
				return
			}
			switch f.typ {
			case protowire.BytesType:
				f.data, m = protowire.ConsumeBytes(b[n:])
			case protowire.VarintType:
				_, m = protowire.ConsumeVarint(b[n:])
				f.data = b[n : n+max(m, 0)]
			case protowire.Fixed64Type:
				_, m = protowire.ConsumeFixed64(b[n:])
				f.data = b[n : n+max(m, 0)]
			default:
				m = protowire.ConsumeFieldValue(f.num, f.typ, b[n:])
			}
			if m < 0 {
				yield(f, protowire.ParseError(m))
				return
			}
			b = b[n+m:]
			if !yield(f, nil) {
				return
			}
		}
	}
}

// wireElements yields the elements of field 1 of the message b, a
// repeated message (a request's events, a Struct's members, a ListValue's
// values), skipping b's other fields.
func wireElements(b []byte) iter.Seq2[[]byte, error] {
	return func(yield func([]byte, error) bool) {
		for f, err := range wireFields(b) {
			if err != nil {
				yield(nil, err)
				return
			}
			if f.num == 1 && f.typ == protowire.BytesType && !yield(f.data, nil) {
				return
			}
		}
	}
}

// errDataTooLarge: data's JSON text would pass the size of a whole event.
var errDataTooLarge = fmt.Errorf("event larger than %d bytes", sentry.MaxEventBytes)

// maxDataDepth bounds the nesting of data (the sentry reader's own bound
// is lower; this one only keeps the conversion's stack small).
const maxDataDepth = 64

// structJSON appends the JSON text of the google.protobuf.Struct whose
// wire form is b, as protojson writes it (members in wire order), and
// fails once the text would pass sentry.MaxEventBytes.
func structJSON(out, b []byte, depth int) ([]byte, error) {
	if depth > maxDataDepth {
		return nil, errors.New("data nested too deeply")
	}
	return appendElements(out, b, '{', '}', depth, memberJSON)
}

// memberJSON appends the JSON text of a Struct's member (a map entry:
// its key, field 1, and its value, field 2).
func memberJSON(out, entry []byte, depth int) ([]byte, error) {
	var key, val []byte
	hasVal := false
	for f, err := range wireFields(entry) {
		if err != nil {
			return nil, err
		}
		switch {
		case f.typ != protowire.BytesType:
		case f.num == 1:
			key = f.data
		case f.num == 2:
			val, hasVal = f.data, true
		}
	}
	if !hasVal {
		return nil, fmt.Errorf("data: member %q has no value", clip(string(key)))
	}
	out, err := appendJSONString(out, key)
	if err != nil {
		return nil, err
	}
	return valueJSON(append(out, ':'), val, depth+1)
}

// appendElements appends the JSON text of the elements of field 1 of b,
// a repeated message (a Struct's members, a ListValue's values), each
// written by elem, separated by commas, between open and close; it fails
// once the text would pass sentry.MaxEventBytes.
func appendElements(out, b []byte, open, close byte, depth int, elem func(out, e []byte, depth int) ([]byte, error)) ([]byte, error) {
	out = append(out, open)
	first := true
	for e, err := range wireElements(b) {
		if err != nil {
			return nil, err
		}
		if !first {
			out = append(out, ',')
		}
		first = false
		if out, err = elem(out, e, depth); err != nil {
			return nil, err
		}
		if len(out) > sentry.MaxEventBytes {
			return nil, errDataTooLarge
		}
	}
	return append(out, close), nil
}

// valueJSON appends the JSON text of a google.protobuf.Value.
func valueJSON(out, b []byte, depth int) ([]byte, error) {
	if depth > maxDataDepth {
		return nil, errors.New("data nested too deeply")
	}
	// The kind is a oneof: the last one on the wire wins.
	kind, val, bits := protowire.Number(0), []byte(nil), uint64(0)
	for f, err := range wireFields(b) {
		if err != nil {
			return nil, err
		}
		switch {
		case (f.num == 1 || f.num == 4) && f.typ == protowire.VarintType,
			f.num == 2 && f.typ == protowire.Fixed64Type:
			kind, bits = f.num, f.bits()
		case (f.num == 3 || f.num == 5 || f.num == 6) && f.typ == protowire.BytesType:
			kind, val = f.num, f.data
		}
	}
	switch kind {
	case 1:
		return append(out, "null"...), nil
	case 2:
		return appendJSONNumber(out, math.Float64frombits(bits))
	case 3:
		return appendJSONString(out, val)
	case 4:
		return strconv.AppendBool(out, bits != 0), nil
	case 5:
		return structJSON(out, val, depth)
	case 6:
		return appendElements(out, val, '[', ']', depth+1, valueJSON)
	}
	return nil, errors.New("data: a value with no kind")
}

// appendJSONNumber writes f as encoding/json does (ES6 number form).
func appendJSONNumber(out []byte, f float64) ([]byte, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil, fmt.Errorf("data: %v is not a JSON number", f)
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	out = strconv.AppendFloat(out, f, format, -1, 64)
	if format == 'e' {
		// 1e-07 → 1e-7, as JavaScript writes it.
		if n := len(out); n >= 4 && out[n-4] == 'e' && out[n-3] == '-' && out[n-2] == '0' {
			out[n-2] = out[n-1]
			out = out[:n-1]
		}
	}
	return out, nil
}

// appendJSONString writes s, which must be UTF-8, as a JSON string; it
// fails, before writing anything, if out would pass sentry.MaxEventBytes
// (a string's text is never shorter than s, and up to six times it).
func appendJSONString(out, s []byte) ([]byte, error) {
	if len(out)+len(s)+2 > sentry.MaxEventBytes {
		return nil, errDataTooLarge
	}
	if !utf8.Valid(s) {
		return nil, errors.New("data: a string is not valid UTF-8")
	}
	n := len(s) + 2
	for _, c := range s {
		switch {
		case c == '"' || c == '\\':
			n++
		case c < 0x20:
			n += 5
		}
	}
	if len(out)+n > sentry.MaxEventBytes {
		return nil, errDataTooLarge
	}
	out = slices.Grow(out, n)
	const hex = "0123456789abcdef"
	out = append(out, '"')
	for _, c := range s {
		switch {
		case c == '"' || c == '\\':
			out = append(out, '\\', c)
		case c < 0x20:
			out = append(out, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			out = append(out, c)
		}
	}
	return append(out, '"'), nil
}

// eventsFromJSON reads the events of a request in the protobuf JSON form
// (Connect with application/json): each event's attributes with
// protojson, its data kept as the JSON text sent.
func eventsFromJSON(b []byte) ([]*portcullisv1.SentryEvent, error) {
	top, err := jsonObject(b)
	if err != nil {
		return nil, err
	}
	var raws []json.RawMessage
	for k, v := range top {
		if k != "events" {
			return nil, fmt.Errorf("unknown field %q", k)
		}
		if err := json.Unmarshal(v, &raws); err != nil {
			return nil, fmt.Errorf("events: %w", err)
		}
	}
	if len(raws) > sentry.MaxBatchEvents {
		return nil, errTooManyEvents
	}
	events := make([]*portcullisv1.SentryEvent, 0, len(raws))
	for i, raw := range raws {
		m, err := jsonObject(raw)
		if err != nil {
			return nil, fmt.Errorf("events[%d]: %w", i, err)
		}
		data, hasData := m["data"]
		delete(m, "data")
		rest, err := json.Marshal(m)
		if err != nil {
			return nil, fmt.Errorf("events[%d]: %w", i, err)
		}
		ev := &portcullisv1.SentryEvent{}
		if err := protojson.Unmarshal(rest, ev); err != nil {
			return nil, fmt.Errorf("events[%d]: %w", i, err)
		}
		switch {
		case !hasData || string(data) == "null":
		case len(data) > sentry.MaxEventBytes:
			setPrivate(ev, dataRefuseField, []byte(errDataTooLarge.Error()))
		default:
			setPrivate(ev, dataJSONField, data)
		}
		events = append(events, ev)
	}
	return events, nil
}

// jsonObject returns the members of the JSON object b, refusing a key
// sent twice (encoding/json would keep the last, where protojson and the
// HTTP reader refuse it).
func jsonObject(b []byte) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil {
		return nil, err
	} else if tok != json.Delim('{') {
		return nil, errors.New("not a JSON object")
	}
	m := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, ok := tok.(string)
		if !ok {
			return nil, errors.New("a key is not a string")
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("%s: %w", clip(key), err)
		}
		if _, dup := m[key]; dup {
			return nil, fmt.Errorf("duplicate key %q", clip(key))
		}
		m[key] = v
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the JSON object")
	}
	return m, nil
}
