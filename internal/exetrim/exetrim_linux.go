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
// pages (code, constant data, the runtime's tables). It returns how many
// bytes of address space it released, and an error when /proc/self
// cannot be read or the kernel refuses the advice.
func Release() (int64, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, fmt.Errorf("exetrim: %w", err)
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return 0, fmt.Errorf("exetrim: %w", err)
	}
	var released int64
	for _, m := range readOnlyMappings(maps, exe) {
		if _, _, errno := syscall.Syscall(syscall.SYS_MADVISE, m.start, m.end-m.start, syscall.MADV_DONTNEED); errno != 0 {
			return released, fmt.Errorf("exetrim: madvise %#x-%#x: %w", m.start, m.end, errno)
		}
		released += int64(m.end - m.start)
	}
	return released, nil
}

type mapping struct{ start, end uintptr }

// readOnlyMappings returns the mappings in maps (the text of
// /proc/self/maps) of the file at path that are readable, not writable
// and private: "r-xp" and "r--p".
func readOnlyMappings(maps []byte, path string) []mapping {
	var out []mapping
	sc := bufio.NewScanner(bytes.NewReader(maps))
	for sc.Scan() {
		// address perms offset dev inode pathname, the pathname after
		// the spaces that pad the inode (it may hold spaces itself).
		line := sc.Bytes()
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
			continue
		}
		if string(bytes.TrimLeft(rest, " ")) != path {
			continue
		}
		lo, hi, ok := bytes.Cut(f[0], []byte("-"))
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(string(lo), 16, 64)
		end, err2 := strconv.ParseUint(string(hi), 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			continue
		}
		out = append(out, mapping{uintptr(start), uintptr(end)})
	}
	return out
}
