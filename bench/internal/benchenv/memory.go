package benchenv

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Memory is a process's resident memory as /proc/PID/status and
// /proc/PID/smaps_rollup report it, in KiB: RSS (VmRSS) is Anon (RssAnon:
// heap, stacks) plus File (RssFile: the executable's and libraries' pages
// mapped in) plus RssShmem; Peak is VmHWM, the peak RSS. PSS (Pss) counts
// each resident page divided by the number of processes mapping it, so
// copies of one binary share their File part. On the kernel the figures
// come from (6.18, ext4) File follows the size of the binary more than
// the code a process runs: it maps the page cache's large folios whole.
type Memory struct {
	RSS   int `json:"rss_kib"`
	Anon  int `json:"rss_anon_kib"`
	File  int `json:"rss_file_kib"`
	PSS   int `json:"pss_kib,omitempty"`
	Peak  int `json:"peak_rss_kib"`
	Procs int `json:"processes"`
}

// ReadMemory reads process pid's memory (zero when the process is gone;
// PSS zero where smaps_rollup cannot be read).
func ReadMemory(pid int) Memory {
	dir := "/proc/" + strconv.Itoa(pid) + "/"
	data, err := os.ReadFile(dir + "status")
	if err != nil {
		return Memory{}
	}
	m := Memory{Procs: 1}
	kib := func(line string) (string, int, bool) {
		k, v, ok := strings.Cut(line, ":")
		f := strings.Fields(v)
		if !ok || len(f) == 0 {
			return "", 0, false
		}
		n, err := strconv.Atoi(f[0])
		return k, n, err == nil
	}
	for line := range strings.Lines(string(data)) {
		k, n, ok := kib(line)
		if !ok {
			continue
		}
		switch k {
		case "VmRSS":
			m.RSS = n
		case "RssAnon":
			m.Anon = n
		case "RssFile":
			m.File = n
		case "VmHWM":
			m.Peak = n
		}
	}
	if rollup, err := os.ReadFile(dir + "smaps_rollup"); err == nil {
		for line := range strings.Lines(string(rollup)) {
			if k, n, ok := kib(line); ok && k == "Pss" {
				m.PSS = n
			}
		}
	}
	return m
}

// Add adds o's figures to m's: the memory of a group of processes (nginx's
// master and workers).
func (m *Memory) Add(o Memory) {
	m.RSS += o.RSS
	m.Anon += o.Anon
	m.File += o.File
	m.PSS += o.PSS
	m.Peak += o.Peak
	m.Procs += o.Procs
}

// String is the figures in MiB, as the programs print them.
func (m *Memory) String() string {
	mib := func(kib int) string { return fmt.Sprintf("%.1f MiB", float64(kib)/1024) }
	s := fmt.Sprintf("RSS %s (anon %s, file %s), peak %s", mib(m.RSS), mib(m.Anon), mib(m.File), mib(m.Peak))
	if m.PSS > 0 {
		s += ", PSS " + mib(m.PSS)
	}
	if m.Procs > 1 {
		s += fmt.Sprintf(", %d processes", m.Procs)
	}
	return s
}
