package apitext

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf16"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// A proposal that re-pins a tool shows the definition its rules pin now
// and the one they would pin: each as a proxy of the sandbox saw it, and
// the difference of the two JSON documents as a unified line diff, so an
// approver sees what the server changed (a description that now asks the
// agent for something else, a new argument).

// DefinitionChanges writes p's definition changes, if any.
func DefinitionChanges(w io.Writer, p *portcullisv1.Proposal) {
	changes := p.GetDefinitionChanges()
	if len(changes) == 0 {
		return
	}
	fmt.Fprintf(w, "definition changes (%d):\n", len(changes))
	for _, c := range changes {
		fmt.Fprintf(w, "  tools/call %s at %s\n", Field(c.GetTool()), Field(c.GetEndpoint()))
		fmt.Fprintf(w, "    pinned:   %s\n", definitionLabel(c.GetPinned()))
		fmt.Fprintf(w, "    proposed: %s\n", definitionLabel(c.GetProposed()))
		before, after := definitionLines(c.GetPinned()), definitionLines(c.GetProposed())
		if before == nil || after == nil {
			for _, d := range []struct {
				name  string
				lines []string
			}{{"pinned", before}, {"proposed", after}} {
				if d.lines != nil {
					fmt.Fprintf(w, "    %s definition:\n", d.name)
					for _, l := range d.lines {
						fmt.Fprintf(w, "      %s\n", l)
					}
				}
			}
			continue
		}
		fmt.Fprintln(w, "    --- pinned")
		fmt.Fprintln(w, "    +++ proposed")
		for _, l := range lineDiff(before, after) {
			fmt.Fprintf(w, "    %s\n", l)
		}
	}
}

// definitionLabel is the fingerprint and when it was seen, or why there
// is no definition to show.
func definitionLabel(d *portcullisv1.ToolDefinition) string {
	switch {
	case d.GetFirstSeen() == nil:
		return d.GetFingerprint() + " (not seen by the gateway)"
	case d.GetDefinition() == "":
		return fmt.Sprintf("%s (seen %s to %s by %s; over 64 KiB, not kept)", d.GetFingerprint(), When(d.GetFirstSeen()), When(d.GetLastSeen()), Field(d.GetProxyId()))
	}
	return fmt.Sprintf("%s (seen %s to %s by %s)", d.GetFingerprint(), When(d.GetFirstSeen()), When(d.GetLastSeen()), Field(d.GetProxyId()))
}

// definitionLines is the definition's JSON indented, one line each, with
// anything unprintable escaped (an MCP server wrote it); nil when there is
// none.
func definitionLines(d *portcullisv1.ToolDefinition) []string {
	if d.GetDefinition() == "" {
		return nil
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, []byte(d.GetDefinition()), "", "  "); err != nil {
		buf.Reset()
		buf.WriteString(d.GetDefinition())
	}
	lines := strings.Split(buf.String(), "\n")
	for i, l := range lines {
		lines[i] = escapeUnprintable(l)
	}
	return lines
}

// escapeUnprintable escapes every rune a terminal could act on (controls, bidi
// overrides, other invisible format characters) as \uXXXX, one beyond the
// Basic Multilingual Plane as its UTF-16 pair (as JSON writes it).
func escapeUnprintable(s string) string {
	var b strings.Builder
	for _, r := range s {
		if unicode.IsPrint(r) || r == ' ' {
			b.WriteRune(r)
			continue
		}
		for _, u := range utf16.Encode([]rune{r}) {
			fmt.Fprintf(&b, `\u%04x`, u)
		}
	}
	return b.String()
}

// maxDiffCells bounds lineDiff's table; past it both documents are shown
// whole, one removed and one added.
const maxDiffCells = 4 << 20

// lineDiff is a unified diff of a and b without hunks: every line, " "
// kept, "-" only in a, "+" only in b (a longest common subsequence).
func lineDiff(a, b []string) []string {
	if (len(a)+1)*(len(b)+1) > maxDiffCells {
		out := make([]string, 0, len(a)+len(b))
		for _, l := range a {
			out = append(out, "-"+l)
		}
		for _, l := range b {
			out = append(out, "+"+l)
		}
		return out
	}
	// lcs[i][j]: the longest common subsequence of a[i:] and b[j:].
	lcs := make([][]int, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out []string
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch {
		case a[i] == b[j]:
			out = append(out, " "+a[i])
			i, j = i+1, j+1
		case lcs[i+1][j] >= lcs[i][j+1]:
			out = append(out, "-"+a[i])
			i++
		default:
			out = append(out, "+"+b[j])
			j++
		}
	}
	for ; i < len(a); i++ {
		out = append(out, "-"+a[i])
	}
	for ; j < len(b); j++ {
		out = append(out, "+"+b[j])
	}
	return out
}
