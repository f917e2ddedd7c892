package rotate_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/internal/rotate"
)

// Written line by line past its size, the file rotates: the live file and
// the kept ones stay within the size, no line is split, and the newest
// lines are the ones kept.
func TestRotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "log.jsonl")
	f, err := rotate.Open(path, 1000, 2)
	if err != nil {
		t.Fatal(err)
	}
	const n = 100
	for i := range n {
		if _, err := fmt.Fprintf(f, "{\"line\":%03d,\"pad\":\"%s\"}\n", i, strings.Repeat("x", 40)); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "log.jsonl log.jsonl.1 log.jsonl.2" {
		t.Fatalf("files %v; want the live file and two kept", names)
	}
	var all []byte
	for _, name := range []string{"log.jsonl.2", "log.jsonl.1", "log.jsonl"} {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		if len(b) > 1000 || len(b) == 0 || b[len(b)-1] != '\n' {
			t.Errorf("%s: %d bytes, ending %q; want at most 1000, whole lines", name, len(b), b[max(0, len(b)-1):])
		}
		all = append(all, b...)
	}
	lines := bytes.Split(bytes.TrimSuffix(all, []byte("\n")), []byte("\n"))
	last := fmt.Sprintf("{\"line\":%03d,", n-1)
	if !bytes.HasPrefix(lines[len(lines)-1], []byte(last)) {
		t.Errorf("the newest line is %q; want line %d", lines[len(lines)-1], n-1)
	}
	for i := 1; i < len(lines); i++ {
		if bytes.Compare(lines[i-1][:12], lines[i][:12]) >= 0 {
			t.Fatalf("lines out of order or split: %q then %q", lines[i-1], lines[i])
		}
	}
}

// keep 0 keeps no old file; reopening appends.
func TestKeepNoneAndReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	f, err := rotate.Open(path, 10, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("12345678\n"))
	f.Write([]byte("abcdefgh\n")) // past 10: rotated away, nothing kept
	f.Close()
	f, err = rotate.Open(path, 100, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("z\n"))
	f.Close()
	if b, _ := os.ReadFile(path); string(b) != "abcdefgh\nz\n" {
		t.Fatalf("file %q", b)
	}
	if _, err := os.Stat(path + ".1"); !os.IsNotExist(err) {
		t.Fatalf("keep 0 kept %s.1", path)
	}
}

// A write that fails (the directory gone, as a full or read-only disk
// fails it) returns the error; once the path works again, writes resume.
func TestWriteAfterFailure(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "d")
	os.Mkdir(dir, 0o700)
	path := filepath.Join(dir, "log")
	f, err := rotate.Open(path, 20, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.Write([]byte("0123456789\n"))
	os.RemoveAll(dir)
	if _, err := f.Write([]byte("0123456789abc\n")); err == nil { // must rotate: the rename fails
		t.Fatal("a write into a removed directory succeeded")
	}
	os.Mkdir(dir, 0o700)
	if _, err := f.Write([]byte("again\n")); err != nil {
		t.Fatalf("write after the directory came back: %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "again\n" {
		t.Fatalf("file %q", b)
	}
}

// One write of many lines past the size is split between lines across
// files; a line longer than the size gets a file of its own.
func TestSplitBetweenLines(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "log")
	f, err := rotate.Open(path, 25, 3)
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("L", 40) + "\n"
	if _, err := f.Write([]byte("aaaaaaaaa\nbbbbbbbbb\nccccccccc\n" + long + "ddd\n")); err != nil {
		t.Fatal(err)
	}
	f.Close()
	want := map[string]string{"log.3": "aaaaaaaaa\nbbbbbbbbb\n", "log.2": "ccccccccc\n", "log.1": long, "log": "ddd\n"}
	for name, content := range want {
		if b, _ := os.ReadFile(filepath.Join(dir, name)); string(b) != content {
			t.Errorf("%s = %q; want %q", name, b, content)
		}
	}
}

// A file that cannot be opened yet (here: its directory is missing, as
// a full or read-only disk would refuse it) fails each Write until it
// can be opened, then is written to.
func TestLater(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "not-yet")
	path := filepath.Join(dir, "log.jsonl")
	if _, err := rotate.Open(path, 1000, 1); err == nil || strings.Count(err.Error(), path) != 1 {
		t.Fatalf("Open of a missing directory: %v; want an error naming the file once", err)
	}
	f := rotate.Later(path, 1000, 1)
	defer f.Close()
	if _, err := f.Write([]byte("lost\n")); err == nil {
		t.Fatal("a write with no directory succeeded")
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("kept\n")); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); string(got) != "kept\n" {
		t.Fatalf("file holds %q", got)
	}
}
