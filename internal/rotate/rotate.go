// Package rotate is a file that rotates by size: the JSON-lines logs the
// gateway and the proxy write (the proxy's decision log, OCSF events)
// stay within a size and a count of kept files, however long they run.
package rotate

import (
	"bytes"
	"fmt"
	"os"
	"sync"
)

// File is an append-only file of lines that rotates by size: when a
// write would take it past MaxSize, PATH is renamed PATH.1 (PATH.1 to
// PATH.2, and so on, keeping Keep old files) and a new PATH is started. A
// write is split across files only between lines, so a writer of whole
// lines keeps its lines whole; a single line longer than MaxSize gets a
// file of its own. It is safe for concurrent use.
type File struct {
	path    string
	maxSize int64
	keep    int

	mu   sync.Mutex
	f    *os.File
	size int64
}

// Defaults.
const (
	DefaultMaxSize = 100 << 20
	DefaultKeep    = 5
)

// Open opens (appends to) the file at path, creating it with mode 0600.
// maxSize <= 0 means DefaultMaxSize; keep < 0 means DefaultKeep (0 keeps
// no old file).
func Open(path string, maxSize int64, keep int) (*File, error) {
	if maxSize <= 0 {
		maxSize = DefaultMaxSize
	}
	if keep < 0 {
		keep = DefaultKeep
	}
	f := &File{path: path, maxSize: maxSize, keep: keep}
	if err := f.open(); err != nil {
		return nil, err
	}
	return f, nil
}

// Later is Open for a path that cannot be opened now (a full or
// read-only disk): the file is opened at the first Write, and again at
// each Write while that fails, as after a failed write.
func Later(path string, maxSize int64, keep int) *File {
	if maxSize <= 0 {
		maxSize = DefaultMaxSize
	}
	if keep < 0 {
		keep = DefaultKeep
	}
	return &File{path: path, maxSize: maxSize, keep: keep}
}

// Path returns the live file's path.
func (f *File) Path() string { return f.path }

func (f *File) open() error {
	// The errors are *os.PathError: they name the file already.
	file, err := os.OpenFile(f.path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	st, err := file.Stat()
	if err != nil {
		file.Close()
		return err
	}
	f.f, f.size = file, st.Size()
	return nil
}

// Write appends p, rotating whenever the next lines would take the file
// past its size. After a failed write or rotation the next Write opens
// the file again, so a disk that filled up and was freed is written to
// again.
func (f *File) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	written := 0
	for len(p) > 0 {
		if f.f == nil {
			if err := f.open(); err != nil {
				return written, err
			}
		}
		chunk := p
		if f.size+int64(len(p)) > f.maxSize {
			// The lines that fit; none fit: rotate, or (an empty file)
			// take the first line whole.
			room := max(f.maxSize-f.size, 0)
			end := bytes.LastIndexByte(p[:min(int64(len(p)), room)], '\n') + 1
			switch {
			case end > 0:
				chunk = p[:end]
			case f.size > 0:
				if err := f.rotate(); err != nil {
					return written, err
				}
				continue
			default:
				if i := bytes.IndexByte(p, '\n'); i >= 0 {
					chunk = p[:i+1]
				}
			}
		}
		n, err := f.f.Write(chunk)
		f.size += int64(n)
		written += n
		if err != nil {
			f.f.Close()
			f.f = nil
			return written, fmt.Errorf("write %s: %w", f.path, err)
		}
		p = p[n:]
	}
	return written, nil
}

func (f *File) rotate() error {
	err := f.f.Close()
	f.f = nil
	if err != nil {
		return fmt.Errorf("rotate %s: %w", f.path, err)
	}
	if f.keep == 0 {
		if err := os.Remove(f.path); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("rotate %s: %w", f.path, err)
		}
	} else {
		os.Remove(fmt.Sprintf("%s.%d", f.path, f.keep))
		for i := f.keep - 1; i >= 1; i-- {
			if err := os.Rename(fmt.Sprintf("%s.%d", f.path, i), fmt.Sprintf("%s.%d", f.path, i+1)); err != nil && !os.IsNotExist(err) {
				return fmt.Errorf("rotate %s: %w", f.path, err)
			}
		}
		if err := os.Rename(f.path, f.path+".1"); err != nil {
			return fmt.Errorf("rotate %s: %w", f.path, err)
		}
	}
	return f.open()
}

// Close closes the file.
func (f *File) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.f == nil {
		return nil
	}
	err := f.f.Close()
	f.f = nil
	return err
}
