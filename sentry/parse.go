package sentry

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/portcullis-dev/portcullis/internal/strictjson"
)

// The media types the reader takes.
const (
	ContentTypeEvent = "application/cloudevents+json"
	ContentTypeBatch = "application/cloudevents-batch+json"
)

// Bounds of the reader. They keep one sender from holding the gateway's
// memory: a full batch is at most MaxBatchBytes.
const (
	MaxBatchEvents = 1000
	MaxEventBytes  = 64 << 10
	MaxBatchBytes  = 16 << 20
	// maxText bounds free text (titles, executables); ids are shorter.
	maxText = 1024
	maxID   = 256
	maxList = 64
)

// FieldError says why an event was refused, naming the field by its path
// ("data.tool_call.arguments"); Field is empty for the event as a whole.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string {
	if e.Field == "" {
		return e.Reason
	}
	return e.Field + ": " + e.Reason
}

// Refusal is one event of a batch that was not read: its index in the
// batch (from 0), its id when one could be read, and why.
type Refusal struct {
	Index int
	ID    string
	Err   *FieldError
}

func (r Refusal) Error() string { return fmt.Sprintf("event %d: %v", r.Index, r.Err) }

// Batch is what ParseBatch read: the valid events in batch order, and one
// refusal per invalid event.
type Batch struct {
	Events  []Event
	Refused []Refusal
}

// ErrBatch is wrapped by ParseBatch's error when the body as a whole
// cannot be read (not a JSON array, too many events, too large): then no
// event can be told from another.
var ErrBatch = errors.New("unreadable batch")

// ParseCloudEvent reads one event in the CloudEvents JSON format
// (application/cloudevents+json). Its error is a *FieldError. The event's
// Raw, Data and Extensions are slices of body, which must not change
// afterwards.
func ParseCloudEvent(body []byte) (Event, error) {
	ev, ferr := newReader().parseEvent(body)
	if ferr != nil {
		return Event{}, ferr
	}
	return ev, nil
}

// ParseBatch reads a CloudEvents JSON batch
// (application/cloudevents-batch+json). An invalid event is refused alone;
// the others are still returned. The error, wrapping ErrBatch, is only for
// a body that is not a readable batch at all.
//
// The events' Raw, Data and Extensions are slices of body, which must not
// change afterwards: a batch's bytes are not copied.
func ParseBatch(body []byte) (Batch, error) {
	if len(body) > MaxBatchBytes {
		return Batch{}, fmt.Errorf("%w: larger than %d bytes", ErrBatch, MaxBatchBytes)
	}
	if t := bytes.TrimLeft(body, " \t\r\n"); len(t) == 0 || t[0] != '[' {
		return Batch{}, fmt.Errorf("%w: not a JSON array", ErrBatch)
	}
	if b, ok := newReader().batch(body); ok {
		return b, nil
	}
	// The one-pass read met something it cannot judge alone (bad syntax,
	// too many events, an event the strict reader refuses): split the body
	// with encoding/json, whose verdict on the batch as a whole is the
	// rule, and read each event on its own.
	var raws []json.RawMessage
	if err := json.Unmarshal(body, &raws); err != nil {
		return Batch{}, fmt.Errorf("%w: %v", ErrBatch, err)
	}
	if len(raws) > MaxBatchEvents {
		return Batch{}, fmt.Errorf("%w: %d events, at most %d", ErrBatch, len(raws), MaxBatchEvents)
	}
	var b Batch
	r := newReader()
	for i, raw := range raws {
		r.add(&b, i, raw)
	}
	return b, nil
}

// batch reads body in one pass, reading each event once and its fields
// from what the tree recorded. It gives up (false) at the first event the
// strict reader refuses, leaving the verdict to ParseBatch's slow path.
func (r *reader) batch(body []byte) (Batch, bool) {
	j := &r.json
	j.Reset(body, batchLimits)
	// Room for the events of a batch like the benchmark's (about 500 bytes
	// an event), so that the slice seldom grows.
	b := Batch{Events: make([]Event, 0, min(MaxBatchEvents, len(body)/400+1))}
	if !j.Open() {
		return Batch{}, false
	}
	for n := 0; j.Element(); n++ {
		if n == MaxBatchEvents {
			return Batch{}, false
		}
		start := j.Pos()
		r.tree.reset()
		// The reader sees at most an event's size: an event larger
		// cannot end within it (its object is not closed), and is
		// refused by the slow path without being read, so a huge event
		// never fills the tree.
		j.Window(min(len(body), start+MaxEventBytes))
		r.tree.read(j, body, 0)
		j.Window(len(body))
		if j.Err() != nil {
			return Batch{}, false
		}
		r.addRead(&b, n, body[start:j.Pos():j.Pos()])
	}
	return b, j.End() == nil
}

// add reads raw, the event at index i of a batch, into b.
func (r *reader) add(b *Batch, i int, raw []byte) {
	ev, ferr := r.parseEvent(raw)
	r.put(b, i, raw, ev, ferr)
}

// addRead is add for an event whose bytes the reader has just read into
// r.tree.
func (r *reader) addRead(b *Batch, i int, raw []byte) {
	ev, ferr := r.event(raw)
	r.put(b, i, raw, ev, ferr)
}

func (r *reader) put(b *Batch, i int, raw []byte, ev Event, ferr *FieldError) {
	if ferr != nil {
		b.Refused = append(b.Refused, Refusal{Index: i, ID: peekID(raw), Err: ferr})
		return
	}
	b.Events = append(b.Events, ev)
}

// peekID returns the id of an event that was refused, when it has a
// readable one, so the sender can tell which event it was.
func peekID(raw []byte) string {
	var v struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(raw, &v) != nil || !validText(v.ID, maxID) {
		return ""
	}
	return v.ID
}

// envelope lists the CloudEvents attributes this schema defines; any other
// is an extension, kept and flagged.
var envelope = []string{"specversion", "id", "source", "type", "time", "subject", "sequence", "datacontenttype", "data", "signature"}

// reader reads typed fields from what the tree recorded of one event,
// keeping the first error and the paths of the fields it did not know.
// One reader serves the events of a batch in turn.
type reader struct {
	// json reads an event, or a batch; items an array inside an event
	// (elements) while json is still in the batch.
	json, items strictjson.Reader
	tree        *tree
	err         *FieldError
	unknown     []string
	// names holds one copy of each short value read by name, by its JSON
	// text: a batch repeats its sources, types, sandboxes and tools.
	names map[string]string
}

func newReader() *reader { return &reader{tree: &tree{}, names: map[string]string{}} }

func (r *reader) fail(field, reason string) {
	if r.err == nil {
		r.err = &FieldError{Field: field, Reason: reason}
	}
}

// parseEvent reads raw, an event on its own.
func (r *reader) parseEvent(raw []byte) (Event, *FieldError) {
	if len(raw) > MaxEventBytes {
		return Event{}, &FieldError{Reason: fmt.Sprintf("event larger than %d bytes", MaxEventBytes)}
	}
	r.tree.reset()
	r.json.Reset(raw, limits)
	r.tree.read(&r.json, raw, 0)
	if err := r.json.End(); err != nil {
		return Event{}, fieldError(err, raw)
	}
	return r.event(raw)
}

// event reads the event raw, which the strict reader has checked and
// r.tree recorded. The event's byte slices are slices of raw.
func (r *reader) event(raw []byte) (Event, *FieldError) {
	if len(raw) > MaxEventBytes {
		return Event{}, &FieldError{Reason: fmt.Sprintf("event larger than %d bytes", MaxEventBytes)}
	}
	r.err, r.unknown = nil, nil
	if t := bytes.TrimLeft(raw, " \t\r\n"); t[0] != '{' {
		return Event{}, &FieldError{Reason: "an event must be a JSON object"}
	}
	m := fields(r.tree.members(len(r.tree.objects) - 1))
	var ev Event
	ev.SpecVersion = r.name(m, "specversion", "specversion", maxID, true)
	if r.err == nil && ev.SpecVersion != "1.0" {
		r.fail("specversion", `must be "1.0"`)
	}
	ev.ID = r.str(m, "id", "id", maxID, true)
	ev.Source = r.name(m, "source", "source", 512, true)
	ev.Type = r.name(m, "type", "type", maxID, true)
	ev.Class = classOf(ev.Type)
	if ev.Time = r.time(m, "time"); ev.Time.IsZero() && r.err == nil {
		ev.Flags |= FlagTimeDefaulted
	}
	ev.Subject = r.name(m, "subject", "subject", 253, ev.Class != "" && ev.Class != ClassHeartbeat)
	ev.Sequence = r.sequence(m)
	ev.DataContentType = r.name(m, "datacontenttype", "datacontenttype", maxID, false)
	if r.err == nil && ev.DataContentType != "" && !IsJSONMedia(ev.DataContentType) {
		r.fail("datacontenttype", `must be a JSON media type ("application/json", "application/json; charset=utf-8", "application/*+json") or absent`)
	}
	if _, ok := m.get("data_base64"); ok {
		r.fail("data_base64", "binary data is refused; send data as a JSON object")
	}
	ev.Signature = r.signature(m)
	data, ok := m.field("data")
	if !ok {
		r.fail("data", "is required")
	}
	if r.err != nil {
		return Event{}, r.err
	}
	ev.Data, ev.Raw = json.RawMessage(data.val), json.RawMessage(raw)
	if ev.Class == "" {
		ev.Flags |= FlagUnknownType
		ev.Unknown = append(ev.Unknown, "type")
		if data.val[0] != '{' {
			return Event{}, &FieldError{Field: "data", Reason: "must be a JSON object"}
		}
	} else {
		ev.Payload = r.payload(data, ev.Class)
		if r.err != nil {
			return Event{}, r.err
		}
		if len(r.unknown) > 0 {
			ev.Flags |= FlagUnknownField
			ev.Unknown = append(ev.Unknown, r.unknown...)
		}
	}
	for _, f := range m.extensions().sorted() {
		k := string(f.key)
		if !isExtensionName(k) {
			return Event{}, &FieldError{Field: k, Reason: "a CloudEvents attribute name is 1-20 lower-case letters or digits"}
		}
		if reason := extensionValue(f.val); reason != "" {
			return Event{}, &FieldError{Field: k, Reason: reason}
		}
		if ev.Extensions == nil {
			ev.Extensions = map[string]json.RawMessage{}
		}
		ev.Extensions[k] = json.RawMessage(f.val)
		ev.Flags |= FlagExtension
		ev.Unknown = append(ev.Unknown, k)
	}
	return ev, nil
}

// isExtensionName: a CloudEvents attribute name, 1-20 of [a-z0-9].
func isExtensionName(k string) bool {
	if k == "" || len(k) > 20 {
		return false
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// fields are the members of one object, in document order.
type fields []field

// extensions returns the members of an event that are not envelope
// attributes (nor data_base64, which is refused): nil for most events.
func (fs fields) extensions() fields {
	var ext fields
	for _, f := range fs {
		if k := string(f.key); !slices.Contains(envelope, k) && k != "data_base64" {
			ext = append(ext, f)
		}
	}
	return ext
}

// field returns the member named key.
func (fs fields) field(key string) (field, bool) {
	for _, f := range fs {
		if string(f.key) == key {
			return f, true
		}
	}
	return field{}, false
}

// get returns the value of the member named key.
func (fs fields) get(key string) ([]byte, bool) {
	f, ok := fs.field(key)
	return f.val, ok
}

// sorted returns the members ordered by key, so that what the reader
// reports about an object (unknown fields, extensions) does not depend on
// the sender's order. Only a few objects have members the reader does not
// know, so the copy is rarely made.
func (fs fields) sorted() fields {
	out := slices.Clone(fs)
	slices.SortFunc(out, func(a, b field) int { return bytes.Compare(a.key, b.key) })
	return out
}

// object returns the members of f, which must be an object; known lists
// its fields, any other is recorded as unknown under path.
func (r *reader) object(f field, path string, known ...string) (fields, bool) {
	if f.obj < 0 {
		r.fail(path, "must be a JSON object")
		return nil, false
	}
	m := fields(r.tree.members(f.obj))
	var unknown []string
	for _, g := range m {
		if !slices.Contains(known, string(g.key)) {
			unknown = append(unknown, join(path, string(g.key)))
		}
	}
	slices.Sort(unknown)
	r.unknown = append(r.unknown, unknown...)
	return m, true
}

// validText reports whether s is 1-max bytes with no control characters:
// ids and names end up in logs, terminals and the signed byte string,
// where a newline would forge a line.
func validText(s string, max int) bool {
	if s == "" || len(s) > max {
		return false
	}
	for _, c := range s {
		if c < 0x20 || c == 0x7f || (c >= 0x80 && c < 0xa0) {
			return false
		}
	}
	return true
}

func (r *reader) str(m fields, key, path string, max int, required bool) string {
	raw, ok := m.get(key)
	if !ok {
		if required {
			r.fail(path, "is required")
		}
		return ""
	}
	return r.text(raw, path, max)
}

// text reads raw, which must be a JSON string of 1-max bytes without
// control characters.
func (r *reader) text(raw []byte, path string, max int) string {
	if raw[0] != '"' {
		r.fail(path, "must be a string")
		return ""
	}
	// Syntax is already checked: without a backslash, the bytes between
	// the quotes are the value.
	s := string(raw[1 : len(raw)-1])
	if bytes.IndexByte(raw, '\\') >= 0 {
		_ = json.Unmarshal(raw, &s)
	}
	if !validText(s, max) {
		r.fail(path, fmt.Sprintf("must be 1-%d bytes without control characters", max))
	}
	return s
}

// Bounds of the names cache: values it holds are at most minName bytes,
// the least bound of any field read by name, so that a value valid for one
// field is valid for every other that meets the same text.
const (
	minName  = 253
	maxNames = 256
)

// name is str for a value that repeats across a batch's events (a source,
// a type, a sandbox, a tool): the reader keeps one copy of each. max must
// be at least minName.
func (r *reader) name(m fields, key, path string, max int, required bool) string {
	raw, ok := m.get(key)
	if !ok || len(raw) > minName+2 {
		return r.str(m, key, path, max, required)
	}
	if s, ok := r.names[string(raw)]; ok {
		return s
	}
	failed := r.err != nil
	s := r.text(raw, path, max)
	if !failed && r.err == nil && len(r.names) < maxNames {
		r.names[string(raw)] = s
	}
	return s
}

func (r *reader) match(m fields, key, path string, valid func(string) bool, want string, required bool) string {
	s := r.str(m, key, path, maxID, required)
	if s != "" && r.err == nil && !valid(s) {
		r.fail(path, "must be "+want)
	}
	return s
}

// time reads the event time, which CloudEvents makes optional: zero when
// it is absent.
func (r *reader) time(m fields, key string) time.Time {
	s := r.str(m, key, key, 64, false)
	if s == "" || r.err != nil {
		return time.Time{}
	}
	t, ok := ParseTime(s)
	if !ok {
		r.fail(key, "must be an RFC 3339 timestamp")
	}
	return t
}

// ParseTime reads an RFC 3339 timestamp as RFC 3339 allows it (section
// 5.6): a lower-case "t" and "z" as well, and a leap second (second 60,
// at the last minute of an hour in the given offset), read as the first
// instant of the next minute since Go's time has no leap seconds.
func ParseTime(s string) (time.Time, bool) {
	if len(s) < 20 {
		return time.Time{}, false
	}
	b := []byte(s)
	if b[10] == 't' {
		b[10] = 'T'
	}
	if b[len(b)-1] == 'z' {
		b[len(b)-1] = 'Z'
	}
	leap := false
	if b[13] == ':' && b[16] == ':' && b[17] == '6' && b[18] == '0' {
		b[17], b[18] = '5', '9'
		leap = true
	}
	t, err := time.Parse(time.RFC3339Nano, string(b))
	if err != nil {
		return time.Time{}, false
	}
	if leap {
		// A leap second is inserted at the end of a UTC day (RFC 3339
		// §5.7): 23:59:60Z, or the same instant in another offset
		// (05:29:60+05:30). Any other :60 is no time.
		if u := t.UTC(); u.Hour() != 23 || u.Minute() != 59 {
			return time.Time{}, false
		}
		// 23:59:60.5 is half a second into the leap second: the next
		// minute's first instant is as close as Go can say.
		t = t.Truncate(time.Second).Add(time.Second)
	}
	return t, true
}

// IsJSONMedia reports whether a datacontenttype says JSON: the media type
// application/json or any +json suffix type (RFC 6839), with at most a
// charset of UTF-8.
func IsJSONMedia(v string) bool {
	media, params, err := mime.ParseMediaType(v)
	if err != nil || media != "application/json" && !strings.HasSuffix(media, "+json") {
		return false
	}
	for k, p := range params {
		if k != "charset" || !strings.EqualFold(p, "utf-8") {
			return false
		}
	}
	return true
}

// extensionValue says why the JSON value v cannot be a CloudEvents
// extension attribute's ("" when it can): the CloudEvents types in JSON
// are a string (every other type has a string form), an integer (32
// bits signed) and a boolean.
func extensionValue(v []byte) string {
	switch c := v[0]; {
	case c == '"' || c == 't' || c == 'f':
		return ""
	case c == '{':
		return "an extension attribute must be a string, an integer or a boolean, not an object"
	case c == '[':
		return "an extension attribute must be a string, an integer or a boolean, not an array"
	case c == 'n':
		return "an extension attribute must be a string, an integer or a boolean, not null"
	}
	n, err := strconv.ParseInt(string(v), 10, 32)
	if err != nil || strconv.FormatInt(n, 10) != string(v) {
		return "an extension attribute's number must be an integer from -2147483648 to 2147483647"
	}
	return ""
}

// sequence reads the CloudEvents sequence extension. The extension defines
// it as a string; senders also write a JSON integer, which is taken too.
// It is 1 to 10^18-1: at most 18 digits, so it fits a Postgres bigint and
// JSON Schema can bound the string form with a pattern.
func (r *reader) sequence(m fields) uint64 {
	raw, ok := m.get("sequence")
	if !ok {
		r.fail("sequence", "is required")
		return 0
	}
	text := raw
	if raw[0] == '"' {
		text = raw[1 : len(raw)-1]
		if bytes.IndexByte(text, '\\') >= 0 {
			var s string
			_ = json.Unmarshal(raw, &s)
			text = []byte(s)
		}
	}
	n, ok := decimal(text)
	if !ok {
		r.fail("sequence", "must be an integer from 1 to 999999999999999999 (a JSON integer or a decimal string)")
		return 0
	}
	return n
}

// decimal reads 1 to 999999999999999999: at most 18 digits, no leading
// zero.
func decimal(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 18 || b[0] == '0' {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	return n, true
}

func (r *reader) signature(m fields) []byte {
	s := r.str(m, "signature", "signature", maxID, false)
	if s == "" || r.err != nil {
		return nil
	}
	sig, err := base64.StdEncoding.Strict().DecodeString(s)
	if err != nil || len(sig) != 64 {
		r.fail("signature", "must be a 64-byte Ed25519 signature in padded base64")
		return nil
	}
	return sig
}
