package sentry

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"time"
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
// (application/cloudevents+json). Its error is a *FieldError.
func ParseCloudEvent(body []byte) (Event, error) {
	ev, ferr := parseEvent(body)
	if ferr != nil {
		return Event{}, ferr
	}
	return ev, nil
}

// ParseBatch reads a CloudEvents JSON batch
// (application/cloudevents-batch+json). An invalid event is refused alone;
// the others are still returned. The error, wrapping ErrBatch, is only for
// a body that is not a readable batch at all.
func ParseBatch(body []byte) (Batch, error) {
	if len(body) > MaxBatchBytes {
		return Batch{}, fmt.Errorf("%w: larger than %d bytes", ErrBatch, MaxBatchBytes)
	}
	var raws []json.RawMessage
	if t := bytes.TrimLeft(body, " \t\r\n"); len(t) == 0 || t[0] != '[' {
		return Batch{}, fmt.Errorf("%w: not a JSON array", ErrBatch)
	}
	if err := json.Unmarshal(body, &raws); err != nil {
		return Batch{}, fmt.Errorf("%w: %v", ErrBatch, err)
	}
	if len(raws) > MaxBatchEvents {
		return Batch{}, fmt.Errorf("%w: %d events, at most %d", ErrBatch, len(raws), MaxBatchEvents)
	}
	var b Batch
	for i, raw := range raws {
		ev, ferr := parseEvent(raw)
		if ferr != nil {
			b.Refused = append(b.Refused, Refusal{Index: i, ID: peekID(raw), Err: ferr})
			continue
		}
		b.Events = append(b.Events, ev)
	}
	return b, nil
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

var extensionName = regexp.MustCompile(`^[a-z0-9]{1,20}$`)

func parseEvent(raw []byte) (Event, *FieldError) {
	if len(raw) > MaxEventBytes {
		return Event{}, &FieldError{Reason: fmt.Sprintf("event larger than %d bytes", MaxEventBytes)}
	}
	if err := checkSyntax(raw); err != nil {
		return Event{}, err
	}
	r := reader{}
	m := r.object(raw, "")
	if r.err != nil {
		return Event{}, &FieldError{Reason: "an event must be a JSON object"}
	}
	var ev Event
	ev.SpecVersion = r.str(m, "specversion", "specversion", maxID, true)
	if r.err == nil && ev.SpecVersion != "1.0" {
		r.fail("specversion", `must be "1.0"`)
	}
	ev.ID = r.str(m, "id", "id", maxID, true)
	ev.Source = r.str(m, "source", "source", 512, true)
	ev.Type = r.str(m, "type", "type", maxID, true)
	ev.Class = classOf(ev.Type)
	ev.Time = r.time(m, "time")
	ev.Subject = r.str(m, "subject", "subject", 253, ev.Class != "" && ev.Class != ClassHeartbeat)
	ev.Sequence = r.sequence(m)
	ev.DataContentType = r.str(m, "datacontenttype", "datacontenttype", maxID, false)
	if r.err == nil && ev.DataContentType != "" && ev.DataContentType != "application/json" {
		r.fail("datacontenttype", `must be "application/json" or absent`)
	}
	if _, ok := m["data_base64"]; ok {
		r.fail("data_base64", "binary data is refused; send data as a JSON object")
	}
	ev.Signature = r.signature(m)
	data, ok := m["data"]
	if !ok {
		r.fail("data", "is required")
	}
	if r.err != nil {
		return Event{}, r.err
	}
	ev.Data = slices.Clone(data)
	ev.Raw = slices.Clone(raw)
	if ev.Class == "" {
		ev.Flags |= FlagUnknownType
		ev.Unknown = append(ev.Unknown, "type")
		if t := bytes.TrimLeft(data, " \t\r\n"); t[0] != '{' {
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
	for _, k := range sortedKeys(m) {
		if slices.Contains(envelope, k) || k == "data_base64" {
			continue
		}
		if !extensionName.MatchString(k) {
			return Event{}, &FieldError{Field: k, Reason: "a CloudEvents attribute name is 1-20 lower-case letters or digits"}
		}
		if ev.Extensions == nil {
			ev.Extensions = map[string]json.RawMessage{}
		}
		ev.Extensions[k] = slices.Clone(m[k])
		ev.Flags |= FlagExtension
		ev.Unknown = append(ev.Unknown, k)
	}
	return ev, nil
}

// sortedKeys orders what the reader reports about an object (unknown
// fields, extensions) so that it does not depend on map order.
func sortedKeys(m map[string]json.RawMessage) []string { return slices.Sorted(maps.Keys(m)) }

// reader reads typed fields, keeping the first error and the paths of the
// fields it did not know.
type reader struct {
	err     *FieldError
	unknown []string
}

func (r *reader) fail(field, reason string) {
	if r.err == nil {
		r.err = &FieldError{Field: field, Reason: reason}
	}
}

// object decodes raw as a JSON object; known lists its fields, any other
// is recorded as unknown under path (nil known: record nothing).
func (r *reader) object(raw []byte, path string, known ...string) map[string]json.RawMessage {
	m, ok := members(raw)
	if !ok {
		r.fail(path, "must be a JSON object")
		return nil
	}
	if known != nil {
		for _, k := range sortedKeys(m) {
			if !slices.Contains(known, k) {
				r.unknown = append(r.unknown, join(path, k))
			}
		}
	}
	return m
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

func (r *reader) str(m map[string]json.RawMessage, key, path string, max int, required bool) string {
	raw, ok := m[key]
	if !ok {
		if required {
			r.fail(path, "is required")
		}
		return ""
	}
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

func (r *reader) match(m map[string]json.RawMessage, key, path string, re *regexp.Regexp, want string, required bool) string {
	s := r.str(m, key, path, maxID, required)
	if s != "" && r.err == nil && !re.MatchString(s) {
		r.fail(path, "must be "+want)
	}
	return s
}

func (r *reader) time(m map[string]json.RawMessage, key string) time.Time {
	s := r.str(m, key, key, 64, true)
	if r.err != nil {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		r.fail(key, "must be an RFC 3339 timestamp")
	}
	return t
}

var decimal = regexp.MustCompile(`^[1-9][0-9]{0,17}$`)

// sequence reads the CloudEvents sequence extension. The extension defines
// it as a string; senders also write a JSON integer, which is taken too.
// It is 1 to 10^18-1: at most 18 digits, so it fits a Postgres bigint and
// JSON Schema can bound the string form with a pattern.
func (r *reader) sequence(m map[string]json.RawMessage) uint64 {
	raw, ok := m["sequence"]
	if !ok {
		r.fail("sequence", "is required")
		return 0
	}
	text := string(raw)
	if raw[0] == '"' {
		_ = json.Unmarshal(raw, &text)
	}
	n, err := strconv.ParseUint(text, 10, 64)
	if !decimal.MatchString(text) || err != nil {
		r.fail("sequence", "must be an integer from 1 to 999999999999999999 (a JSON integer or a decimal string)")
		return 0
	}
	return n
}

func (r *reader) signature(m map[string]json.RawMessage) []byte {
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
