package exetrim

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func TestFileOnlyMappings(t *testing.T) {
	// Each mapping's fields abridged; Anonymous and Swap are what count.
	smaps := `00400000-00d67000 r-xp 00000000 08:01 1234                               /opt/my app/portcullis
Size:               9612 kB
Rss:                8000 kB
Anonymous:             0 kB
Swap:                  0 kB
VmFlags: rd ex mr mw me dw
00d67000-01855000 r--p 00967000 08:01 1234                               /opt/my app/portcullis
Size:              11212 kB
Anonymous:             0 kB
Swap:                  0 kB
01855000-01860000 r--p 01455000 08:01 1234                               /opt/my app/portcullis
Size:                 44 kB
Anonymous:            44 kB
Swap:                  0 kB
01860000-01870000 r--p 01460000 08:01 1234                               /opt/my app/portcullis
Anonymous:             0 kB
Swap:                  8 kB
01870000-018ee000 rw-p 01470000 08:01 1234                               /opt/my app/portcullis
Anonymous:           100 kB
018ee000-01940000 rw-p 00000000 00:00 0
Anonymous:            20 kB
7f0000000000-7f0000001000 r--p 00000000 08:01 99                         /usr/lib/locale/C.utf8/LC_CTYPE
Anonymous:             0 kB
7f0000001000-7f0000002000 r-xp 00000000 08:01 1234                       /opt/my app/portcullis (deleted)
Anonymous:             0 kB
7f0000002000-7f0000003000 r--s 00000000 08:01 1234                       /opt/my app/portcullis
Anonymous:             0 kB
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]
Anonymous:           132 kB
`
	got := fileOnlyMappings([]byte(smaps), "/opt/my app/portcullis")
	want := []mapping{{0x400000, 0xd67000}, {0xd67000, 0x1855000}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("fileOnlyMappings = %x, want %x (the code and constant data; never a mapping with pages of its own, data, shared mappings, other files)", got, want)
	}
	if got := fileOnlyMappings([]byte(smaps), "/opt/my app/portcullis (deleted)"); !reflect.DeepEqual(got, []mapping{{0x7f0000001000, 0x7f0000002000}}) {
		t.Errorf("a replaced executable: %x", got)
	}
}

// A position-independent executable's relocated data is read-only once
// the loader has written it: Release must leave it alone. Without the
// check on pages of its own, this program crashed on its first print.
func TestReleaseInPositionIndependentExecutable(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "pie")
	out, err := exec.Command("go", "build", "-buildmode=pie", "-o", bin, "./testdata/pie").CombinedOutput()
	if err != nil {
		t.Fatalf("go build -buildmode=pie: %v\n%s", err, out)
	}
	out, err = exec.Command(bin).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ok after releasing") {
		t.Fatalf("the PIE program: %v\n%s", err, out)
	}
}

// Release leaves this process with fewer pages of its executable
// resident, and running.
func TestReleaseDropsResidentFilePages(t *testing.T) {
	before := rssFile(t)
	released, err := Release()
	if err != nil {
		t.Fatal(err)
	}
	after := rssFile(t)
	if released <= 0 {
		t.Fatalf("released %d bytes", released)
	}
	if after >= before {
		t.Errorf("RssFile %d kB before, %d kB after releasing %d bytes; want fewer", before, after, released)
	}
	// The code the process runs comes back.
	if s := strings.Repeat(strconv.Itoa(42), 3); s != "424242" {
		t.Fatal(s)
	}
	t.Logf("RssFile %d kB → %d kB (released %d MiB of mappings)", before, after, released>>20)
}

func rssFile(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "RssFile:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no RssFile in /proc/self/status")
	return 0
}
