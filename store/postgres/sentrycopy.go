package postgres

import (
	"bytes"
	"context"
	"encoding/binary"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/internal/sentrysql"
)

// Sentry events are COPYed in PostgreSQL's binary COPY format, written
// here rather than by pgx's CopyFrom: pgx looks up an encoder for every
// value of every row (fourteen map lookups and interface calls an event),
// which was a tenth of the gateway's CPU at full ingest, and the columns'
// types are fixed by the migrations (text, bigint, timestamptz, jsonb,
// json). The format: a signature and two zero words, then per row the
// field count and each field as its length and bytes, then -1.
// https://www.postgresql.org/docs/current/sql-copy.html#id-1.9.3.55.9.4

// copySignature starts a binary COPY stream (with its flags and header
// extension length, both 0).
const copySignature = "PGCOPY\n\xff\r\n\x00" + "\x00\x00\x00\x00" + "\x00\x00\x00\x00"

// pgEpoch is where timestamptz counts microseconds from.
var pgEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// copyBuffer writes one binary COPY stream.
type copyBuffer struct{ bytes.Buffer }

// copyBuffers holds the streams between appends: a batch's is about a
// megabyte.
var copyBuffers = sync.Pool{New: func() any { return new(copyBuffer) }}

// newCopyBuffer returns a stream of size bytes at most, from the pool;
// the caller puts it back.
func newCopyBuffer(size int) *copyBuffer {
	b := copyBuffers.Get().(*copyBuffer)
	b.Reset()
	b.Grow(len(copySignature) + size + 2)
	b.WriteString(copySignature)
	return b
}

func (b *copyBuffer) row(fields int) {
	b.Write(binary.BigEndian.AppendUint16(b.AvailableBuffer(), uint16(fields)))
}

func (b *copyBuffer) text(s string) {
	b.Write(binary.BigEndian.AppendUint32(b.AvailableBuffer(), uint32(len(s))))
	b.WriteString(s)
}

func (b *copyBuffer) bytes(p []byte) {
	b.Write(binary.BigEndian.AppendUint32(b.AvailableBuffer(), uint32(len(p))))
	b.Write(p)
}

func (b *copyBuffer) int8(n int64) {
	b.Write(binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint32(b.AvailableBuffer(), 8), uint64(n)))
}

// timestamptz writes t to the microsecond (the store truncates to it).
func (b *copyBuffer) timestamptz(t time.Time) {
	b.int8(t.Sub(pgEpoch).Microseconds())
}

// jsonb writes a JSON text as jsonb's binary form: version 1, then the text.
func (b *copyBuffer) jsonb(s string) {
	b.Write(binary.BigEndian.AppendUint32(b.AvailableBuffer(), uint32(len(s)+1)))
	b.WriteByte(1)
	b.WriteString(s)
}

// copyIn runs COPY table (columns) FROM STDIN with the stream b.
//
// b goes back to the pool only after a COPY that succeeded: when pgconn's
// CopyFrom fails on the server's side or its connection it can return
// while its goroutine still reads the stream, which must then not be
// reset for another append (the race detector found it).
func copyIn(ctx context.Context, tx pgx.Tx, table string, columns []string, b *copyBuffer) error {
	b.Write([]byte{0xff, 0xff}) // the trailer: -1
	_, err := tx.Conn().PgConn().CopyFrom(ctx, &b.Buffer,
		`COPY `+pgx.Identifier{table}.Sanitize()+` (`+strings.Join(columns, ", ")+`) FROM STDIN (FORMAT binary)`)
	if err == nil {
		copyBuffers.Put(b)
	}
	return err
}

// copyKeys COPYs the keys of batch's events at rows into sentry_event_keys.
func copyKeys(ctx context.Context, tx pgx.Tx, batch []store.SentryEvent, rows []int32) error {
	size := 0
	for _, i := range rows {
		size += 2 + 3*4 + len(batch[i].Source) + len(batch[i].ID) + 8
	}
	b := newCopyBuffer(size)
	for _, i := range rows {
		ev := &batch[i]
		b.row(3)
		b.text(ev.Source)
		b.text(ev.ID)
		b.timestamptz(ev.ReceivedAt)
	}
	return copyIn(ctx, tx, "sentry_event_keys", []string{"source", "id", "received_at"}, b)
}

// copyEvents COPYs batch's events at rows into sentry_events, in
// sentrysql.Columns' order.
func copyEvents(ctx context.Context, tx pgx.Tx, batch []store.SentryEvent, rows []int32) error {
	size := 0
	for _, i := range rows {
		ev := &batch[i]
		size += 2 + len(sentrysql.Columns)*4 + 3*8 + 1 + len(ev.Source) + len(ev.ID) + len(ev.Type) + len(ev.Subject) +
			len(ev.Severity) + len(ev.Processing) + len(ev.PolicyHash) + len(ev.DenialID) + len(ev.TraceID) +
			len(sentrysql.FlagsJSON(ev.Flags)) + len(ev.Document)
	}
	b := newCopyBuffer(size)
	for _, i := range rows {
		ev := &batch[i]
		b.row(len(sentrysql.Columns))
		b.text(ev.Source)
		b.text(ev.ID)
		b.int8(int64(ev.Sequence))
		b.text(ev.Type)
		b.text(ev.Subject)
		b.timestamptz(ev.Time)
		b.timestamptz(ev.ReceivedAt)
		b.text(ev.Severity)
		b.text(ev.Processing)
		b.text(ev.PolicyHash)
		b.text(ev.DenialID)
		b.text(ev.TraceID)
		b.jsonb(sentrysql.FlagsJSON(ev.Flags))
		b.bytes(ev.Document)
	}
	return copyIn(ctx, tx, "sentry_events", sentrysql.Columns, b)
}
