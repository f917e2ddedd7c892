package h1

import (
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestReadUpTo(t *testing.T) {
	body := strings.Repeat("x", 10000)
	for _, tc := range []struct {
		name      string
		r         io.Reader
		announced int64
		limit     int
		want      int // bytes returned
		err       bool
	}{
		{"whole, announced", strings.NewReader(body), 10000, 10000, 10000, false},
		{"whole, one byte at a time", iotest.OneByteReader(strings.NewReader(body)), 10000, 20000, 10000, false},
		{"unannounced", strings.NewReader(body), -1, 20000, 10000, false},
		{"over the limit: one byte past it", strings.NewReader(body), 10000, 9999, 10000, false},
		{"far over the limit", strings.NewReader(body), -1, 100, 101, false},
		{"empty", strings.NewReader(""), 0, 100, 0, false},
		{"a read error", iotest.TimeoutReader(strings.NewReader(body)), 10000, 20000, 10000, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReadUpTo(tc.r, tc.announced, tc.limit)
			if (err != nil) != tc.err {
				t.Fatalf("err %v, want error %v", err, tc.err)
			}
			if !tc.err && (len(got) != tc.want || strings.Count(string(got), "x") != len(got)) {
				t.Errorf("read %d bytes, want %d", len(got), tc.want)
			}
		})
	}
	// A body announced huge and never sent holds no more than the initial
	// buffer: the buffer grows with what arrives, not with what is
	// announced.
	got, err := ReadUpTo(strings.NewReader("{}"), 1<<30, 1<<30)
	if err != nil || string(got) != "{}" || cap(got) > InitialBodyBuffer+512 {
		t.Errorf("announced 1 GiB, sent 2 bytes: %q, cap %d, %v", got, cap(got), err)
	}
	// A body sent as announced fits the first buffer: one byte of room
	// sees its end, and the buffer is not doubled for it.
	got, err = ReadUpTo(strings.NewReader(body[:300]), 300, 1000)
	if err != nil || len(got) != 300 || cap(got) > 320 {
		t.Errorf("announced and sent 300 bytes: %d read, cap %d, %v", len(got), cap(got), err)
	}
}
