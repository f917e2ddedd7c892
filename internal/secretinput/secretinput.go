// Package secretinput reads a credential provider's secret the way
// `portcullis provider create` and `rotate` take it: from a file (or
// standard input) and from environment variables, never from the command
// line, where other users of the machine and shell history would see it.
//
// A type whose secret is one field (bearer: token, header: value, basic:
// password) takes the whole file, less one trailing line break, or one
// variable's value. A type with several fields (aws, oauth2-client-
// credentials, token-exchange) takes FIELD=VALUE lines from the file
// (blank lines and lines starting with # skipped) and FIELD=VAR pairs
// for variables. A field name must be one of the type's fields: a line
// that is not FIELD=VALUE may be a secret itself (a raw base64 value with
// padding holds an "="), so an error names the file and line, never what
// the line holds. What the values must be is package provider's to check.
package secretinput

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/portcullis-dev/portcullis/provider"
)

// Source is where the secret comes from: the file's content (nil when no
// file was given), what --secret-env named, and the environment.
type Source struct {
	File     []byte
	FileName string
	Env      []string
	Getenv   func(string) (string, bool)
}

// Flags are the command line's --secret-file and --secret-env.
type Flags struct {
	File string
	Env  []string
}

// Read reads the secret the flags name for provider type typ: the file
// through readFile (which reads "-" as standard input), the variables
// through getenv.
func (f Flags) Read(typ string, readFile func(string) ([]byte, error), getenv func(string) string) (map[string][]byte, error) {
	src := Source{Env: f.Env, FileName: f.File, Getenv: func(k string) (string, bool) {
		v := getenv(k)
		return v, v != ""
	}}
	if f.File != "" {
		b, err := readFile(f.File)
		if err != nil {
			return nil, err
		}
		src.File = b
	}
	return Read(typ, src)
}

// Read returns the secret's fields for provider type typ (an error for
// an unknown type, naming the types).
func Read(typ string, src Source) (map[string][]byte, error) {
	if src.File == nil && len(src.Env) == 0 {
		return nil, errors.New("give the secret with --secret-file FILE (- for standard input) or --secret-env VAR; it is never taken on the command line")
	}
	required, optional := provider.SecretFields(typ)
	if len(required) == 0 {
		return nil, fmt.Errorf("type %q is not a provider type (one of: %s)", typ, strings.Join(provider.Types, ", "))
	}
	fields := append(slices.Clone(required), optional...)
	single := ""
	if len(fields) == 1 {
		single = required[0]
	}
	out := map[string][]byte{}
	// put takes field's value; from names where it came from (FILE:LINE,
	// or --secret-env and what the command line said, which is no secret).
	// A field the type does not take is refused without its name: from a
	// file, it may be the secret.
	put := func(field string, v []byte, from string) error {
		if !slices.Contains(fields, field) {
			return fmt.Errorf("%s: not a field of type %s (it takes: %s)", from, typ, strings.Join(fields, ", "))
		}
		if _, dup := out[field]; dup {
			return fmt.Errorf("%s: the secret's field %s is given twice", from, field)
		}
		out[field] = v
		return nil
	}
	if src.File != nil {
		if single != "" {
			if err := put(single, trimLineBreak(src.File), src.FileName); err != nil {
				return nil, err
			}
		} else if err := readFields(src.File, src.FileName, put); err != nil {
			return nil, err
		}
	}
	for _, spec := range src.Env {
		field, name, pair := strings.Cut(spec, "=")
		if !pair {
			if single == "" {
				return nil, fmt.Errorf("--secret-env %s: type %s has several secret fields (%s): write FIELD=VAR", spec, typ, strings.Join(fields, ", "))
			}
			field, name = single, spec
		}
		v, ok := src.Getenv(name)
		if !ok || v == "" {
			return nil, fmt.Errorf("--secret-env %s: the environment variable %s is not set or empty", spec, name)
		}
		if err := put(field, []byte(v), "--secret-env "+spec); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// readFields reads FIELD=VALUE lines.
func readFields(b []byte, name string, put func(string, []byte, string) error) error {
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), provider.MaxSecretBytes+256)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimRight(sc.Text(), "\r")
		if strings.TrimSpace(line) == "" || strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		field, value, ok := strings.Cut(line, "=")
		if !ok {
			// The line itself may be a secret: never quote it.
			return fmt.Errorf("%s:%d: want FIELD=VALUE", name, n)
		}
		if err := put(strings.TrimSpace(field), []byte(value), fmt.Sprintf("%s:%d", name, n)); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s: %v", name, err)
	}
	return nil
}

// trimLineBreak drops one trailing "\n" or "\r\n", as a file written by an
// editor or echo ends.
func trimLineBreak(b []byte) []byte {
	b = bytes.TrimSuffix(b, []byte("\n"))
	return bytes.TrimSuffix(b, []byte("\r"))
}
