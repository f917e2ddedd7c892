package dataplane

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/portcullis-dev/portcullis/dataplane/decision"
	"github.com/portcullis-dev/portcullis/dataplane/gatewayclient"
	"github.com/portcullis-dev/portcullis/internal/ca"
	"github.com/portcullis-dev/portcullis/internal/exetrim"
	"github.com/portcullis-dev/portcullis/internal/rotate"
)

// DecisionLogName is the decision log's file in Process.DataDir.
const DecisionLogName = "decisions.jsonl"

// Process is what a proxy process adds around its Agent (portcullis
// proxy sets all of it; tests and benchmarks usually none): its data
// directory, OCSF events of its decisions, and the release of memory it
// no longer uses. The zero value adds nothing.
type Process struct {
	// DataDir, if set, is the proxy's directory, created (0700) by New:
	// the decision log (DecisionLogName, when Config.DecisionLog is nil),
	// a standalone proxy's CA (ca.LoadOrCreate, when Config.CA is nil),
	// and in gateway mode Gateway.DataDir when that is unset, and the
	// proxy id when Gateway.ProxyID is unset (generated once, then kept
	// in the file proxy-id).
	DataDir string
	// DecisionLogMaxSize rotates the decision log in DataDir when it
	// would pass this many bytes, keeping DecisionLogKeep older files
	// (decisions.jsonl.1 newest; 0 keeps none). Default
	// rotate.DefaultMaxSize.
	DecisionLogMaxSize int64
	DecisionLogKeep    int
	// OCSF, if set, receives every decision record, to write it as an
	// OCSF event off the request path; Run runs it until the proxy has
	// stopped (its last decisions are queued by then), and the Agent
	// owns it from New on. Its drops travel with the shipped decision
	// records (Shipper.OCSFDropped, when unset): the proxy has no
	// /metrics.
	OCSF RecordSink
	// TrimMemory releases the process's memory while Run runs
	// (trimSchedule): its mappings of the executable's read-only pages a
	// second after the first policy version, and again, with the free
	// heap, after each spell of traffic followed by a minute without a
	// decision. Like AdaptProcs it acts on the whole process. Default
	// false.
	TrimMemory bool
}

// RecordSink takes decision records off the request path and writes
// them on its own goroutine: the OCSF emitters, which portcullis proxy
// gives with the mapping of a record to an OCSF event (the edge converts
// records; internal/ocsf links the store's types).
type RecordSink interface {
	Offer(decision.Record)   // queues the record; never blocks
	Run(ctx context.Context) // writes until ctx ends, then what is queued, and closes
	Close() error            // closes a sink that never ran
	Dropped() uint64         // records lost: the queue was full or the sink failed
}

// prepare makes cfg's data dir and fills what it provides (the decision
// log, a standalone proxy's CA, the subscription's directory and proxy
// id). The returned closer closes the decision log it opened (nil: none).
func (c *Config) prepare() (io.Closer, error) {
	if c.DataDir == "" {
		return nil, nil
	}
	if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	if c.CA == nil && c.Gateway == nil {
		// Standalone: the proxy's own CA. In gateway mode the sandbox's
		// CA comes with the first version.
		proxyCA, err := ca.LoadOrCreate(c.DataDir)
		if err != nil {
			return nil, err
		}
		c.CA = proxyCA
	}
	if c.Gateway != nil {
		gw := *c.Gateway
		if gw.DataDir == "" {
			gw.DataDir = c.DataDir
		}
		if gw.ProxyID == "" {
			id, err := gatewayclient.KeptProxyID(c.DataDir)
			if err != nil {
				return nil, err
			}
			gw.ProxyID = id
		}
		c.Gateway = &gw
	}
	if c.DecisionLog != nil {
		return nil, nil
	}
	path := filepath.Join(c.DataDir, DecisionLogName)
	maxSize := c.DecisionLogMaxSize
	if maxSize <= 0 {
		maxSize = rotate.DefaultMaxSize
	}
	out, err := rotate.Open(path, maxSize, c.DecisionLogKeep)
	if err != nil {
		// A full or read-only data dir must not keep the proxy from
		// enforcing: it runs, and the log is opened at the first write
		// that can (decision.Log says when it can't).
		c.Logger.Error("decision log cannot be opened; enforcing anyway, decisions stay in memory until it can be written", "err", err)
		out = rotate.Later(path, maxSize, c.DecisionLogKeep)
	}
	c.DecisionLog = out
	return out, nil
}

// trimSchedule is when the proxy releases memory (Process.TrimMemory).
// Linux maps an executable's code in 64 KiB windows around each page a
// fault touches, and Go runs every linked package's init before main, so
// by the time the proxy serves most of its binary is mapped (17 of the
// image's 22 MiB) though an idle proxy runs about 3 MiB of it. A second
// after its first policy version, and again whenever it has decided
// nothing for a minute after deciding something, the proxy drops its
// mappings of its executable's read-only pages (internal/exetrim; what it
// runs comes back at its next touch, from the page cache) and, after
// traffic, returns the heap it no longer uses to the system.
func trimSchedule(p *Proxy, log *slog.Logger) exetrim.Schedule {
	return exetrim.Schedule{
		Ready:    p.Enforcing(),
		Activity: p.Decided,
		// The work of the first version (compiling it, the ACK) is done
		// a second after it.
		Settle: time.Second,
		// A minute without a decision ends a spell of traffic.
		Idle:   time.Minute,
		Logger: log,
	}
}
