package exetrim

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// Release drops this process's mappings of its executable's read-only
// pages (code, constant data, the runtime's tables) that hold nothing but
// the file's content. A mapping holding a page of its own (a copy written
// before it was made read-only, such as the relocated data of a
// position-independent executable) is left alone: dropping it would bring
// back the file's unrelocated bytes. Release returns how many bytes of
// address space it released, and an error when /proc/self cannot be read
// or the kernel refuses the advice.
func Release() (int64, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, fmt.Errorf("exetrim: %w", err)
	}
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return 0, fmt.Errorf("exetrim: %w", err)
	}
	var released int64
	for _, m := range fileOnlyMappings(smaps, exe) {
		if _, _, errno := syscall.Syscall(syscall.SYS_MADVISE, m.start, m.end-m.start, syscall.MADV_DONTNEED); errno != 0 {
			return released, fmt.Errorf("exetrim: madvise %#x-%#x: %w", m.start, m.end, errno)
		}
		released += int64(m.end - m.start)
	}
	return released, nil
}

type mapping struct{ start, end uintptr }

// fileOnlyMappings returns the mappings in smaps (the text of
// /proc/self/smaps) of the file at path that are readable, not writable
// and private ("r-xp" and "r--p"), and hold no page of their own
// (Anonymous and Swap 0 kB): dropping them loses nothing.
func fileOnlyMappings(smaps []byte, path string) []mapping {
	var out []mapping
	var cur mapping
	candidate := false
	end := func() {
		if candidate {
			out = append(out, cur)
		}
		candidate = false
	}
	sc := bufio.NewScanner(bytes.NewReader(smaps))
	for sc.Scan() {
		line := sc.Bytes()
		if m, ok := readOnlyMapping(line, path); ok {
			end()
			cur, candidate = m, true
			continue
		}
		if isMappingHeader(line) {
			end() // another mapping
			continue
		}
		// A field of the current mapping: "Anonymous:   4 kB".
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok || !candidate {
			continue
		}
		if n := string(name); n == "Anonymous" || n == "Swap" {
			if v := bytes.TrimSuffix(bytes.TrimSpace(value), []byte(" kB")); string(v) != "0" {
				candidate = false // a page of its own
			}
		}
	}
	end()
	return out
}

// isMappingHeader reports a line starting a mapping: "start-end perms …".
func isMappingHeader(line []byte) bool {
	f, _, _ := bytes.Cut(line, []byte(" "))
	lo, hi, ok := bytes.Cut(f, []byte("-"))
	return ok && len(lo) > 0 && len(hi) > 0 && isHex(lo) && isHex(hi)
}

func isHex(b []byte) bool {
	for _, c := range b {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// readOnlyMapping parses a mapping's line (address perms offset dev inode
// pathname, the pathname after the spaces that pad the inode; it may hold
// spaces itself) and reports whether it maps the file at path readable,
// not writable and private.
func readOnlyMapping(line []byte, path string) (mapping, bool) {
	var f [5][]byte
	rest := line
	for i := range f {
		rest = bytes.TrimLeft(rest, " ")
		end := bytes.IndexByte(rest, ' ')
		if end < 0 {
			end = len(rest)
		}
		f[i], rest = rest[:end], rest[end:]
	}
	if perms := string(f[1]); perms != "r-xp" && perms != "r--p" {
		return mapping{}, false
	}
	if string(bytes.TrimLeft(rest, " ")) != path {
		return mapping{}, false
	}
	lo, hi, ok := bytes.Cut(f[0], []byte("-"))
	if !ok {
		return mapping{}, false
	}
	start, err1 := strconv.ParseUint(string(lo), 16, 64)
	end, err2 := strconv.ParseUint(string(hi), 16, 64)
	if err1 != nil || err2 != nil || end <= start {
		return mapping{}, false
	}
	return mapping{uintptr(start), uintptr(end)}, true
}
