package ocsf

import (
	"fmt"
	"strings"

	"github.com/portcullis-dev/portcullis/decision"
	"github.com/portcullis-dev/portcullis/internal/telemetry/otlp"
)

// Sinks names where a process's OCSF events go: any of an OTLP
// collector, a Splunk HEC and a JSON-lines file. The zero Sinks has none.
// The gateway's process and the proxy's open theirs with Open; the CLI
// fills it from its --ocsf-* flags.
type Sinks struct {
	// OTLP, if its Endpoint is set, is an OpenTelemetry collector
	// (NewOTLP).
	OTLP OTLPConfig
	// HECURL, if set, is a Splunk HTTP Event Collector's event endpoint,
	// sent HECToken (NewHEC).
	HECURL, HECToken string
	// File, if set, is a JSON-lines file rotated when it would pass
	// FileMaxSize bytes, keeping FileKeep old files (OpenFile).
	File        string
	FileMaxSize int64
	FileKeep    int
	// Emitter configures each sink's emitter: its queue, the product
	// named in its drop reports, its logger.
	Emitter Config
}

// Describe names the sinks s names, for a start-up banner: the file,
// "HEC URL", "OTLP URL" ("" for none).
func (s Sinks) Describe() string {
	var out []string
	if s.File != "" {
		out = append(out, s.File)
	}
	if s.HECURL != "" {
		out = append(out, "HEC "+s.HECURL)
	}
	if s.OTLP.Endpoint != "" {
		out = append(out, "OTLP "+s.OTLP.Endpoint)
	}
	return strings.Join(out, ", ")
}

// Open returns an emitter for each sink s names, in the order OTLP, HEC,
// file (none: nil). Nothing is dialled until the first write. On an
// error every sink already opened is closed again.
func Open(s Sinks) (Emitters, error) {
	var out Emitters
	if s.OTLP.Endpoint != "" {
		sink, err := NewOTLP(s.OTLP)
		if err != nil {
			return nil, err
		}
		out = append(out, NewEmitter(sink, s.Emitter))
	}
	if s.HECURL != "" {
		if !otlp.HTTPURL(s.HECURL) {
			out.Close()
			return nil, fmt.Errorf("HEC URL %q: want an http:// or https:// URL", s.HECURL)
		}
		out = append(out, NewEmitter(NewHEC(s.HECURL, s.HECToken, nil), s.Emitter))
	}
	if s.File != "" {
		fs, err := OpenFile(s.File, s.FileMaxSize, s.FileKeep)
		if err != nil {
			out.Close()
			return nil, err
		}
		out = append(out, NewEmitter(fs, s.Emitter))
	}
	return out, nil
}

// Close closes the sinks of emitters that never ran.
func (es Emitters) Close() {
	for _, e := range es {
		e.Close()
	}
}

// Records are emitters as a proxy's sink of decision records (its
// dataplane.RecordSink): each record offered is mapped (FromDecision,
// product Proxy) on the emitter's goroutine and emitted to every sink.
type Records struct{ Emitters }

// Offer queues r on every emitter; it never blocks.
func (rs Records) Offer(r decision.Record) {
	rs.Emit(func() Event { return FromDecision(r, Proxy) })
}

// Close closes the sinks of emitters that never ran.
func (rs Records) Close() error {
	rs.Emitters.Close()
	return nil
}
