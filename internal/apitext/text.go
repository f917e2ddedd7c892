// Package apitext renders the gateway's API messages as text a person reads
// in a terminal: one line per decision record, a proposal (its changes, a
// re-pinned tool's definitions and their line diff, its findings with a
// request each), its approvals and where it stands, a held call (its
// arguments indented with the numbers as written), where a committed
// version stands with the proxies, and the cells of a table (times,
// hashes, values a proxy or an agent chose, quoted or put on one line so
// they cannot forge lines or send escape sequences). The CLI prints through it; what it prints is
// part of the CLI's contract, so a change here is a change of output.
package apitext

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"google.golang.org/protobuf/types/known/timestamppb"
)

// When formats a timestamp in UTC, "-" when unset.
func When(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return "-"
	}
	return ts.AsTime().UTC().Format(time.RFC3339)
}

// Dash stands in for an empty cell.
func Dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// ShortHash is the start of a hex hash, enough to tell versions apart.
func ShortHash(h string) string {
	if len(h) > 12 {
		return h[:12] + "…"
	}
	return h
}

// Field is s as is when it is one printable word, else Go-quoted.
func Field(s string) string {
	for _, c := range s {
		if c == '"' || c == '\\' || unicode.IsSpace(c) || !unicode.IsPrint(c) {
			return strconv.Quote(s)
		}
	}
	return s
}

// Clip puts s on one line (control characters and runs of white space
// become one space: a proxy's error text must not break the table) and cuts
// it to n runes, marking the cut with "…".
func Clip(s string, n int) string {
	s = strings.Join(strings.FieldsFunc(s, func(r rune) bool {
		return unicode.IsSpace(r) || unicode.IsControl(r)
	}), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// YesNo is "yes" or "no".
func YesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// Plural is one for n == 1, else many.
func Plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// Fields writes "key: value" lines to w, values aligned.
func Fields(w io.Writer, kv ...string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	for i := 0; i+1 < len(kv); i += 2 {
		fmt.Fprintf(tw, "%s:\t%s\n", kv[i], kv[i+1])
	}
	return tw.Flush()
}

// OneLine puts a value the gateway sent on one line (white space and
// control characters become one space), uncut.
func OneLine(s string) string {
	return Clip(s, math.MaxInt)
}

// Problem is "path: message", or the message alone for a problem of the
// whole document.
func Problem(path, message string) string {
	if path == "" {
		return message
	}
	return path + ": " + message
}
