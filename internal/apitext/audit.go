package apitext

import (
	"slices"
	"strconv"
	"strings"
	"unicode"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// AuditDetail is an entry's details and hashes as key=value words, keys
// sorted ("-" when there are none).
func AuditDetail(e *portcullisv1.AuditEntry) string {
	var parts []string
	keys := make([]string, 0, len(e.GetDetail()))
	for k := range e.GetDetail() {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		parts = append(parts, Field(k)+"="+Field(e.GetDetail()[k]))
	}
	if h := e.GetBeforeHash(); h != "" {
		parts = append(parts, "before="+Field(ShortHash(h)))
	}
	if h := e.GetAfterHash(); h != "" {
		parts = append(parts, "after="+Field(ShortHash(h)))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

// Printable is s as is when every character is printable (spaces
// included), else Go-quoted.
func Printable(s string) string {
	for _, c := range s {
		if c != ' ' && !unicode.IsPrint(c) {
			return strconv.Quote(s)
		}
	}
	return s
}
