package ocsf

import (
	"context"
	"fmt"
	"os"
	"sync"
)

// File is a JSON-lines sink that rotates by size: when the next write
// would take the file past MaxSize it is renamed PATH.1 (PATH.1 to
// PATH.2, and so on), keeping Keep old files, and a new one is started.
type File struct {
	path    string
	maxSize int64
	keep    int

	mu   sync.Mutex
	f    *os.File
	size int64
}

// Defaults of the file sink.
const (
	DefaultFileMaxSize = 100 << 20
	DefaultFileKeep    = 5
)

// OpenFile opens (appends to) the file at path; maxSize <= 0 means
// DefaultFileMaxSize, keep < 0 DefaultFileKeep (0 keeps no old file).
func OpenFile(path string, maxSize int64, keep int) (*File, error) {
	if maxSize <= 0 {
		maxSize = DefaultFileMaxSize
	}
	if keep < 0 {
		keep = DefaultFileKeep
	}
	fs := &File{path: path, maxSize: maxSize, keep: keep}
	if err := fs.open(); err != nil {
		return nil, err
	}
	return fs, nil
}

func (fs *File) open() error {
	f, err := os.OpenFile(fs.path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("open OCSF file: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("open OCSF file: %w", err)
	}
	fs.f, fs.size = f, st.Size()
	return nil
}

// Name returns the file's path.
func (fs *File) Name() string { return "file:" + fs.path }

// Write appends events, one a line, rotating first if they would take
// the file past its size (a batch larger than the size gets a file of
// its own).
func (fs *File) Write(_ context.Context, events [][]byte) error {
	var buf []byte
	for _, ev := range events {
		buf = append(append(buf, ev...), '\n')
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.f == nil {
		if err := fs.open(); err != nil {
			return err
		}
	}
	if fs.size > 0 && fs.size+int64(len(buf)) > fs.maxSize {
		if err := fs.rotate(); err != nil {
			return err
		}
	}
	n, err := fs.f.Write(buf)
	fs.size += int64(n)
	if err != nil {
		return fmt.Errorf("write OCSF file: %w", err)
	}
	return nil
}

func (fs *File) rotate() error {
	if err := fs.f.Close(); err != nil {
		return fmt.Errorf("rotate OCSF file: %w", err)
	}
	fs.f = nil
	if fs.keep == 0 {
		if err := os.Remove(fs.path); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("rotate OCSF file: %w", err)
		}
	} else {
		os.Remove(fmt.Sprintf("%s.%d", fs.path, fs.keep))
		for i := fs.keep - 1; i >= 1; i-- {
			if err := os.Rename(fmt.Sprintf("%s.%d", fs.path, i), fmt.Sprintf("%s.%d", fs.path, i+1)); err != nil && !os.IsNotExist(err) {
				return fmt.Errorf("rotate OCSF file: %w", err)
			}
		}
		if err := os.Rename(fs.path, fs.path+".1"); err != nil {
			return fmt.Errorf("rotate OCSF file: %w", err)
		}
	}
	return fs.open()
}

// Close closes the file.
func (fs *File) Close() error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.f == nil {
		return nil
	}
	err := fs.f.Close()
	fs.f = nil
	return err
}
