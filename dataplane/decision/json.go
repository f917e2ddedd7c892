package decision

import (
	"strconv"
	"unicode/utf8"
)

// appendJSON appends r as encoding/json encodes it, byte for byte (HTML
// characters escaped, invalid UTF-8 replaced, omitempty as tagged), with
// no reflection and no allocation: the decision log's writer encodes every
// record, and encoding/json was most of its CPU. TestAppendJSON and
// FuzzAppendJSON hold it to encoding/json's output, every field included.
// It fails only where encoding/json fails: a Time whose year is outside
// 0–9999.
func appendJSON(b []byte, r *Record) ([]byte, error) {
	b = append(b, `{"time":"`...)
	b, err := r.Time.AppendText(b)
	if err != nil {
		return b, err
	}
	b = append(b, '"')
	b = appendField(b, "sandbox", r.Sandbox, true)
	b = appendField(b, "binary", r.Binary, true)
	b = appendField(b, "host", r.Host, false)
	b = append(b, `,"port":`...)
	b = strconv.AppendInt(b, int64(r.Port), 10)
	b = appendField(b, "addr", r.Addr, true)
	b = appendField(b, "http_method", r.HTTPMethod, true)
	b = appendField(b, "path", r.Path, true)
	b = appendField(b, "mcp_method", r.MCPMethod, true)
	b = appendField(b, "tool", r.Tool, true)
	b = appendField(b, "decision", r.Decision, false)
	b = appendField(b, "entry", r.Entry, true)
	b = appendField(b, "rule", r.Rule, true)
	b = appendField(b, "reason", r.Reason, true)
	b = appendField(b, "policy_version", r.PolicyVersion, true)
	b = appendField(b, "denial_id", r.DenialID, true)
	if r.VersionProbe {
		b = append(b, `,"version_probe":true`...)
	}
	b = appendField(b, "arguments_digest", r.ArgumentsDigest, true)
	b = appendField(b, "reason_code", r.ReasonCode, true)
	b = appendField(b, "tool_definition", r.ToolDefinition, true)
	b = appendField(b, "trace_id", r.TraceID, true)
	if len(r.Cuts) > 0 {
		b = append(b, `,"cuts":[`...)
		for i, c := range r.Cuts {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"field":`...)
			b = appendString(b, c.Field)
			b = append(b, `,"length":`...)
			b = strconv.AppendInt(b, int64(c.Length), 10)
			b = appendField(b, "sha256", c.SHA256, false)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if s := r.Summary; s != nil {
		b = append(b, `,"summary":{"count":`...)
		b = strconv.AppendInt(b, s.Count, 10)
		b = append(b, `,"last":"`...)
		if b, err = s.Last.AppendText(b); err != nil {
			return b, err
		}
		b = append(b, '"')
		b = appendField(b, "first_denial_id", s.FirstDenialID, true)
		b = appendField(b, "last_denial_id", s.LastDenialID, true)
		b = append(b, '}')
	}
	return append(b, '}'), nil
}

// appendField appends ,"name":"value" (nothing for an empty value when
// omitEmpty).
func appendField(b []byte, name, value string, omitEmpty bool) []byte {
	if omitEmpty && value == "" {
		return b
	}
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return appendString(b, value)
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string the way encoding/json does
// with HTML escaping on (its default).
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default: // other control bytes, and <, >, &
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
