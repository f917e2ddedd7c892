package main

import (
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"

	"github.com/portcullis-dev/portcullis/bench/internal/benchenv"
)

// memSample is one process's memory at a quiet moment, after a GC.
type memSample struct {
	// HeapInuse and StackInuse are runtime.MemStats' (bytes).
	HeapInuse  uint64 `json:"heap_inuse"`
	StackInuse uint64 `json:"stack_inuse"`
	Goroutines int    `json:"goroutines"`
	// RSS is /proc/self/status VmRSS (bytes), 0 if unknown.
	RSS uint64 `json:"rss"`
	// StackStart is the size new goroutines' stacks start at: the runtime
	// sizes it from the average stack use it saw at the last GC.
	StackStart uint64 `json:"stack_start"`
}

func (m memSample) heapStack() uint64 { return m.HeapInuse + m.StackInuse }

// sampleMem collects garbage (twice: finalizers of the first free more)
// and reads the runtime's and the kernel's view of this process.
func sampleMem() memSample {
	ms := benchenv.SettledMemStats()
	return memSample{
		HeapInuse:  ms.HeapInuse,
		StackInuse: ms.StackInuse,
		Goroutines: runtime.NumGoroutine(),
		RSS:        vmRSS(),
		StackStart: stackStart(),
	}
}

// stackStart reads /gc/stack/starting-size:bytes.
func stackStart() uint64 {
	s := []metrics.Sample{{Name: "/gc/stack/starting-size:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// vmRSS is this process's resident set size from /proc/self/status.
func vmRSS() uint64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v) // "12345 kB"
			if len(f) >= 1 {
				kb, _ := strconv.ParseUint(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

// perStream is the growth from before to after, per stream.
type perStream struct {
	HeapStackBytes float64 `json:"heap_stack_bytes"`
	HeapBytes      float64 `json:"heap_bytes"`
	StackBytes     float64 `json:"stack_bytes"`
	RSSBytes       float64 `json:"rss_bytes"`
	Goroutines     float64 `json:"goroutines"`
}

func growth(before, after memSample, n int) perStream {
	d := func(a, b uint64) float64 { return (float64(a) - float64(b)) / float64(n) }
	return perStream{
		HeapStackBytes: d(after.heapStack(), before.heapStack()),
		HeapBytes:      d(after.HeapInuse, before.HeapInuse),
		StackBytes:     d(after.StackInuse, before.StackInuse),
		RSSBytes:       d(after.RSS, before.RSS),
		Goroutines:     (float64(after.Goroutines) - float64(before.Goroutines)) / float64(n),
	}
}
