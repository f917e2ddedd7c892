package deploy

import (
	"fmt"
	"regexp"
	"strings"
)

// get walks decoded YAML by keys; nil where a key is missing.
func get(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// str is the scalar at keys as text ("" where missing).
func str(v any, keys ...string) string {
	switch s := get(v, keys...).(type) {
	case nil:
		return ""
	case string:
		return s
	default:
		return fmt.Sprint(s)
	}
}

// num is like str, for numbers.
func num(v any, keys ...string) string { return str(v, keys...) }

// list is a YAML sequence (nil if v is none).
func list(v any) []any {
	l, _ := v.([]any)
	return l
}

// strs is a list of scalars as text.
func strs(v any) []string {
	out := []string{}
	for _, e := range list(v) {
		out = append(out, fmt.Sprint(e))
	}
	return out
}

// flagValue is the value of --name in args ("" if absent).
func flagValue(args []string, name string) string {
	for i, a := range args {
		if a == "--"+name && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

var shellSeparators = regexp.MustCompile(`\|\||&&|;|\|`)

// portcullisLines are the portcullis commands of a shell script, each as
// its arguments (the word portcullis dropped), cut at pipes, lists and
// redirections.
func portcullisLines(script string) [][]string {
	var out [][]string
	for _, line := range strings.Split(script, "\n") {
		for _, part := range shellSeparators.Split(line, -1) {
			f := strings.Fields(part)
			if len(f) == 0 || f[0] != "portcullis" {
				continue
			}
			args := f[1:]
			for i, a := range args {
				if strings.HasPrefix(a, ">") || strings.HasPrefix(a, "#") {
					args = args[:i]
					break
				}
			}
			out = append(out, args)
		}
	}
	return out
}
