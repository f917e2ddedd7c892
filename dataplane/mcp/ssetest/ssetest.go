// Package ssetest reads event streams as clients other than the proxy
// read them, for tests that check every client reads what the proxy
// judged.
package ssetest

import "bytes"

// LFOnlyData is the data of each finished event of stream as the MCP Go
// SDK's client reads it: lines end only at LF (a lone CR stays inside its
// line), and each data line's value is trimmed.
func LFOnlyData(stream []byte) [][]byte {
	var all [][]byte
	var data []byte
	has := false
	for len(stream) > 0 {
		i := bytes.IndexByte(stream, '\n')
		if i < 0 {
			break // unfinished
		}
		line := bytes.TrimRight(stream[:i], "\r\n")
		stream = stream[i+1:]
		if len(line) == 0 {
			if has {
				all = append(all, data)
			}
			data, has = nil, false
			continue
		}
		if name, value, _ := bytes.Cut(line, []byte(":")); string(name) == "data" {
			if has {
				data = append(data, '\n')
			}
			data = append(data, bytes.TrimSpace(value)...)
			has = true
		}
	}
	return all
}

// TrimLines is data with each line trimmed, as LFOnlyData trims it.
func TrimLines(data []byte) []byte {
	lines := bytes.Split(data, []byte("\n"))
	for i := range lines {
		lines[i] = bytes.TrimSpace(lines[i])
	}
	return bytes.Join(lines, []byte("\n"))
}
