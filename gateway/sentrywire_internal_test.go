package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connecthttp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
	"github.com/portcullis-dev/portcullis/sentry"
	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/sqlite"
)

// TestStructJSON: the wire-to-JSON conversion of data says what
// protojson says of the same Struct.
func TestStructJSON(t *testing.T) {
	for _, v := range []map[string]any{
		{},
		{"severity": "low", "n": 1.0, "big": 1e21, "small": 1e-7, "neg": -0.5, "zero": 0.0, "t": true, "f": false, "null": nil},
		{"esc": "a\"b\\c\n\x01\u2028é", "": "empty key"},
		{"nested": map[string]any{"list": []any{1.0, "x", nil, []any{}, map[string]any{"deep": []any{true}}}}},
	} {
		st, err := structpb.NewStruct(v)
		if err != nil {
			t.Fatal(err)
		}
		wire, err := proto.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		got, err := structJSON(nil, wire, 0)
		if err != nil {
			t.Fatalf("%v: %v", v, err)
		}
		want, err := protojson.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		var g, w any
		if err := json.Unmarshal(got, &g); err != nil {
			t.Fatalf("%s is not JSON: %v", got, err)
		}
		json.Unmarshal(want, &w)
		if !reflect.DeepEqual(g, w) {
			t.Errorf("structJSON = %s, protojson = %s", got, want)
		}
	}
	// Not JSON numbers; too large.
	nan, _ := proto.Marshal(&structpb.Struct{Fields: map[string]*structpb.Value{"x": structpb.NewNumberValue(math.NaN())}})
	if _, err := structJSON(nil, nan, 0); err == nil {
		t.Error("NaN accepted")
	}
	big, _ := proto.Marshal(&structpb.Struct{Fields: map[string]*structpb.Value{"x": structpb.NewStringValue(strings.Repeat("a", sentry.MaxEventBytes))}})
	if _, err := structJSON(nil, big, 0); err != errDataTooLarge {
		t.Errorf("data past an event's size: %v", err)
	}
}

// TestStructJSONClipsKey: a member with no value is refused naming its
// key clipped, not the whole key the client sent.
func TestStructJSONClipsKey(t *testing.T) {
	key := strings.Repeat("k", 1<<20)
	entry := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte(key))
	wire := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), entry)
	_, err := structJSON(nil, wire, 0)
	if err == nil || !strings.Contains(err.Error(), "has no value") {
		t.Fatalf("a member with no value: %v", err)
	}
	if len(err.Error()) > 2*maxProblemText {
		t.Fatalf("the refusal of a member with no value is %d bytes long", len(err.Error()))
	}
}

// TestEventsFromJSONDuplicateKeys: a request in the JSON form that names
// a member twice (events, an event's attribute, its data) is refused
// whole, naming the key, as protojson and the HTTP reader refuse it,
// rather than the last one winning.
func TestEventsFromJSONDuplicateKeys(t *testing.T) {
	ok := `{"specversion":"1.0","id":"a","source":"sentry://n","type":"portcullis.sentry.v1.tool_access","subject":"support","data":{"k":1}}`
	if events, err := eventsFromJSON([]byte(`{"events":[` + ok + `]}`)); err != nil || len(events) != 1 {
		t.Fatalf("one event: %d, %v", len(events), err)
	}
	for _, body := range []string{
		`{"events":[` + ok + `],"events":[]}`,
		`{"events":[{"id":"a","subject":"x","subject":"support"}]}`,
		`{"events":[{"id":"a","data":{"k":1},"data":{"k":2}}]}`,
		`{"events":[{"id":"a","id":"b"}]}`,
	} {
		events, err := eventsFromJSON([]byte(body))
		if err == nil || !strings.Contains(err.Error(), "duplicate key") || events != nil {
			t.Errorf("%s: %d events, %v", body, len(events), err)
		}
	}
}

// largeRequest is a PublishEventsRequest of n events whose data carry
// many small values (the costliest Struct to decode), about size bytes.
func largeRequest(t testing.TB, n, size int) []byte {
	req := &portcullisv1.PublishEventsRequest{}
	for i := range n {
		fields := map[string]any{"severity": "low", "tool_call": map[string]any{"server": "orders", "tool": "refund"}}
		var list []any
		for j := 0; j < size/n/12; j++ {
			list = append(list, float64(j))
		}
		fields["values"] = list
		st, err := structpb.NewStruct(fields)
		if err != nil {
			t.Fatal(err)
		}
		req.Events = append(req.Events, &portcullisv1.SentryEvent{
			Specversion: "1.0", Id: fmt.Sprint("e", i), Source: "sentry://node-3", Type: "portcullis.sentry.v1.tool_access",
			Time: timestamppb.New(time.Date(2026, 12, 1, 19, 0, 0, 0, time.UTC)), Subject: "support", Sequence: uint64(i + 1), Data: st,
		})
	}
	b, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// allocated returns the bytes f allocates.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestSentryWireMemory: reading a PublishEvents message into the events
// the intake stores allocates a small multiple of its size (at most 8×);
// decoding its data as a protobuf Struct used to cost tens of times it.
func TestSentryWireMemory(t *testing.T) {
	msg := largeRequest(t, 200, 3<<20)
	var batch sentry.Batch
	n := allocated(func() {
		events, err := eventsFromWire(msg)
		if err != nil {
			t.Fatal(err)
		}
		if batch, err = batchFromProto(events); err != nil {
			t.Fatal(err)
		}
	})
	if len(batch.Events) != 200 || len(batch.Refused) != 0 {
		t.Fatalf("%d events read, %d refused: %v", len(batch.Events), len(batch.Refused), batch.Refused)
	}
	old := allocated(func() {
		var req portcullisv1.PublishEventsRequest
		if err := proto.Unmarshal(msg, &req); err != nil {
			t.Fatal(err)
		}
		if _, err := batchFromProto(req.GetEvents()); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("message %d bytes: read by hand %d bytes allocated (%.1f×), by the protobuf runtime %d (%.1f×)",
		len(msg), n, float64(n)/float64(len(msg)), old, float64(old)/float64(len(msg)))
	if n > 8*uint64(len(msg)) {
		t.Fatalf("reading a %d-byte message allocated %d bytes, more than 8×", len(msg), n)
	}
}

// TestSentryWireControlBytes: data whose string is all control bytes
// (each written as six in JSON) is refused as too large without its
// JSON text being built: reading it allocates a small multiple (at most
// 8×) of the message's size.
func TestSentryWireControlBytes(t *testing.T) {
	st, err := structpb.NewStruct(map[string]any{"k": strings.Repeat("\x01", 4<<20)})
	if err != nil {
		t.Fatal(err)
	}
	msg, err := proto.Marshal(&portcullisv1.PublishEventsRequest{Events: []*portcullisv1.SentryEvent{{Id: "x", Data: st}}})
	if err != nil {
		t.Fatal(err)
	}
	var events []*portcullisv1.SentryEvent
	n := allocated(func() {
		if events, err = eventsFromWire(msg); err != nil {
			t.Fatal(err)
		}
	})
	if _, refused := privateData(events[0]); refused != errDataTooLarge.Error() {
		t.Fatalf("4 MiB of control bytes: refused %q", refused)
	}
	t.Logf("message %d bytes: %d bytes allocated (%.1f×)", len(msg), n, float64(n)/float64(len(msg)))
	if n > 8*uint64(len(msg)) {
		t.Fatalf("reading a %d-byte message allocated %d bytes, more than 8×", len(msg), n)
	}
}

// TestEventsFromWireBounds: a message of more than MaxBatchEvents events
// is refused before its events are read; an event whose data would pass
// an event's size is refused alone, naming data.
func TestEventsFromWireBounds(t *testing.T) {
	var req portcullisv1.PublishEventsRequest
	for range sentry.MaxBatchEvents + 1 {
		req.Events = append(req.Events, &portcullisv1.SentryEvent{Id: "x"})
	}
	b, _ := proto.Marshal(&req)
	if _, err := eventsFromWire(b); err != errTooManyEvents {
		t.Fatalf("1001 events: %v", err)
	}
	one := largeRequest(t, 1, 200<<10)
	events, err := eventsFromWire(one)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := batchFromProto(events)
	if err != nil {
		t.Fatal(err)
	}
	if len(batch.Refused) != 1 || batch.Refused[0].Err.Field != "data" || !strings.Contains(batch.Refused[0].Err.Reason, "larger than") {
		t.Fatalf("an event of 200 KiB: %+v", batch)
	}
}

// TestPublishEventsWaitsForAPlace: a PublishEvents message is read only
// once it has a place: with the one shared place held, the call waits
// (its bytes read, its events not), and goes through when it is freed.
func TestPublishEventsWaitsForAPlace(t *testing.T) {
	lite, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "p.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	st := store.New(lite)
	defer st.Close()
	const source = "sentry://node-3"
	token, hash, err := newToken()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateToken(t.Context(), store.Token{Name: source, Role: store.RoleSentry, Hash: hash, CreatedBy: "test"}, "test"); err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Listen: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler), ShutdownTimeout: time.Second, SentryBatchBodies: 1}, st)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := s.Listen()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, ln) }()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()

	free, err := s.batchBodies.shared(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	c := portcullisv1connect.NewSentryServiceClient(connect.NewClient(connecthttp.NewTransport(http.DefaultClient, "http://"+ln.Addr().String())))
	type result struct {
		res *portcullisv1.PublishEventsResponse
		err error
	}
	var req portcullisv1.PublishEventsRequest
	if err := proto.Unmarshal(largeRequest(t, 2, 4<<10), &req); err != nil {
		t.Fatal(err)
	}
	done := make(chan result, 1)
	go func() {
		cctx, info := connect.NewClientContext(t.Context())
		info.RequestHeader().Set("Authorization", "Bearer "+token)
		res, err := c.PublishEvents(cctx, &req)
		done <- result{res, err}
	}()
	// The call is at its place: its source's taken, the shared one awaited.
	deadline := time.Now().Add(15 * time.Second)
	for {
		s.batchBodies.mu.Lock()
		sp := s.batchBodies.source[source]
		at := sp != nil && len(sp.held) == 1
		s.batchBodies.mu.Unlock()
		if at {
			break
		}
		select {
		case r := <-done:
			t.Fatalf("PublishEvents answered (%v, %v) while the only place was held", r.res, r.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("PublishEvents never waited for a place")
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case r := <-done:
		t.Fatalf("PublishEvents answered (%v, %v) while the only place was held", r.res, r.err)
	default:
	}
	free()
	r := <-done
	if r.err != nil || r.res.GetStored() != 2 {
		t.Fatalf("PublishEvents once the place was free: %v, %v", r.res, r.err)
	}
}

// readSignal is a request body that says when it is first read.
type readSignal struct {
	io.ReadCloser
	once *sync.Once
	read chan struct{}
}

func (r readSignal) Read(p []byte) (int, error) {
	r.once.Do(func() { close(r.read) })
	return r.ReadCloser.Read(p)
}

// TestPublishEventsUnreadWithoutAPlace: with a source's places held, a
// further PublishEvents of that source is refused once SentryBodyTimeout
// passes without a byte of its message read (it buffers nothing while it
// waits); another source is served meanwhile.
func TestPublishEventsUnreadWithoutAPlace(t *testing.T) {
	lite, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "p.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	st := store.New(lite)
	defer st.Close()
	tokens := map[string]string{}
	for _, source := range []string{"sentry://node-3", "sentry://node-4"} {
		token, hash, err := newToken()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.CreateToken(t.Context(), store.Token{Name: source, Role: store.RoleSentry, Hash: hash, CreatedBy: "test"}, "test"); err != nil {
			t.Fatal(err)
		}
		tokens[source] = token
	}
	s, err := New(Config{Listen: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler), ShutdownTimeout: time.Second,
		SentryBatchBodies: 4, SentryBatchesPerSource: 1, SentryBodyTimeout: 200 * time.Millisecond}, st)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	read := map[string]chan struct{}{} // by token
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		ch := read[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")]
		mu.Unlock()
		if ch != nil {
			r.Body = readSignal{ReadCloser: r.Body, once: new(sync.Once), read: ch}
		}
		s.Handler().ServeHTTP(w, r)
	}))
	defer srv.Close()
	held := make(chan struct{})
	mu.Lock()
	read[tokens["sentry://node-3"]] = held
	mu.Unlock()

	leave, err := s.batchBodies.enter(t.Context(), "sentry://node-3")
	if err != nil {
		t.Fatal(err)
	}
	defer leave()
	c := portcullisv1connect.NewSentryServiceClient(connect.NewClient(connecthttp.NewTransport(srv.Client(), srv.URL)))
	publish := func(source string) (*portcullisv1.PublishEventsResponse, error) {
		var req portcullisv1.PublishEventsRequest
		if err := proto.Unmarshal(largeRequest(t, 2, 4<<10), &req); err != nil {
			t.Fatal(err)
		}
		for _, ev := range req.Events {
			ev.Source = source
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		cctx, info := connect.NewClientContext(ctx)
		info.RequestHeader().Set("Authorization", "Bearer "+tokens[source])
		return c.PublishEvents(cctx, &req)
	}
	if res, err := publish("sentry://node-4"); err != nil || res.GetStored() != 2 {
		t.Fatalf("another source while node-3's place is held: %v, %v", res, err)
	}
	_, err = publish("sentry://node-3")
	if connect.CodeOf(err) != connect.CodeDeadlineExceeded || !strings.Contains(err.Error(), "did not arrive within") {
		t.Errorf("PublishEvents with its source's places held: %v", err)
	}
	select {
	case <-held:
		t.Error("the message of a source with no place free was read")
	default:
	}
}

// FuzzStructJSON: whatever structJSON writes is JSON; and for every
// Struct the protobuf runtime reads and protojson can write, structJSON
// writes the same JSON value from its wire form (or refuses it as larger
// than an event). On raw wire bytes the two differ only where the wire is
// no Struct an encoder writes: a key sent twice (kept twice here, for the
// sentry reader to refuse) or a member without a value (refused here).
func FuzzStructJSON(f *testing.F) {
	for _, v := range []map[string]any{
		{"a": 1.0, "b": "x\n", "c": []any{nil, true, map[string]any{"d": -2.5e-9}}},
		{},
	} {
		st, _ := structpb.NewStruct(v)
		b, _ := proto.Marshal(st)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, err := structJSON(nil, b, 0); err == nil && !json.Valid(got) {
			t.Fatalf("structJSON wrote %q, not JSON", got)
		}
		var st structpb.Struct
		if proto.Unmarshal(b, &st) != nil {
			return
		}
		want, err := protojson.Marshal(&st)
		if err != nil {
			return
		}
		wire, err := proto.MarshalOptions{Deterministic: true}.Marshal(&st)
		if err != nil {
			t.Fatal(err)
		}
		got, err := structJSON(nil, wire, 0)
		if err == errDataTooLarge {
			return
		}
		if err != nil {
			t.Fatalf("protojson writes %s, structJSON refused: %v", want, err)
		}
		var g, w any
		json.Unmarshal(got, &g)
		json.Unmarshal(want, &w)
		if !reflect.DeepEqual(g, w) {
			t.Fatalf("structJSON %s, protojson %s", got, want)
		}
	})
}
