package ocsf

import (
	"context"

	"github.com/portcullis-dev/portcullis/internal/rotate"
)

// File is a JSON-lines sink that rotates by size (internal/rotate): when
// the next batch would take the file past its size it is renamed PATH.1
// (PATH.1 to PATH.2, and so on), keeping a number of old files, and a
// new one is started. A batch is one write, never split across files.
type File struct {
	f *rotate.File
}

// Defaults of the file sink.
const (
	DefaultFileMaxSize = rotate.DefaultMaxSize
	DefaultFileKeep    = rotate.DefaultKeep
)

// OpenFile opens (appends to) the file at path; maxSize <= 0 means
// DefaultFileMaxSize, keep < 0 DefaultFileKeep (0 keeps no old file).
func OpenFile(path string, maxSize int64, keep int) (*File, error) {
	f, err := rotate.Open(path, maxSize, keep)
	if err != nil {
		return nil, err
	}
	return &File{f: f}, nil
}

// Name returns the file's path.
func (fs *File) Name() string { return "file:" + fs.f.Path() }

// Write appends events, one a line.
func (fs *File) Write(_ context.Context, events [][]byte) error {
	var buf []byte
	for _, ev := range events {
		buf = append(append(buf, ev...), '\n')
	}
	_, err := fs.f.Write(buf)
	return err
}

// Close closes the file.
func (fs *File) Close() error { return fs.f.Close() }
