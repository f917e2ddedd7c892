// Package cliconfig owns --config FILE: a YAML file whose keys are the
// flags of the command it is given to (portcullis gateway, portcullis
// proxy), read before the command runs. A key sets its flag only where
// neither the command line nor the flag's environment variable did, so
// flags beat the environment, which beats the file, which beats the
// defaults.
//
// The file is strict: a key that is not one of the command's flags is
// refused by name (with the nearest flag when one is close, or the other
// command whose flag it is), a value of the wrong type is refused naming
// the type the flag wants, and a key given twice is refused. A repeatable
// flag (--gateway) takes a list. Tokens never go in the file (token is
// refused; token-file names a file holding one).
package cliconfig

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/portcullis-dev/portcullis/internal/spelling"
)

// Flag is the name of the flag that names the file.
const Flag = "config"

// Spec says which commands take --config and what their files may set.
type Spec struct {
	// Commands are the root's subcommands that take --config, by name,
	// each with the global flags (the root's persistent ones) its file
	// may set; the command's own flags always are keys.
	Commands map[string][]string
	// Env is the environment variable each flag falls back to when the
	// command line does not give it. A variable that is set beats the
	// file: the file does not set that flag.
	Env map[string]string
}

// refused are keys that name a flag but may not be in a file, and why.
var refused = map[string]string{
	"token": "tokens never go in a config file (nor on a command line, where other users can read them): put the token in a file of its own and name it with token-file",
	Flag:    "a config file cannot name another config file",
	"help":  "help is not a setting",
}

// Add registers --config FILE on each of root's subcommands spec names
// and makes each, before it runs, set from FILE the flags its command
// line did not set (Apply), reading the environment with getenv. Call it
// once the subcommands are added.
func Add(root *cobra.Command, spec Spec, getenv func(string) string) {
	for _, c := range root.Commands() {
		if _, ok := spec.Commands[c.Name()]; !ok {
			continue
		}
		c.Flags().String(Flag, "", "read flags from this YAML `FILE` (keys named as the flags); the command line and the environment win over it (docs/configuration.md)")
		prev := c.PreRunE
		c.PreRunE = func(cmd *cobra.Command, args []string) error {
			if err := spec.apply(cmd, getenv); err != nil {
				return err
			}
			if prev != nil {
				return prev(cmd, args)
			}
			return nil
		}
	}
}

// apply reads the file cmd's --config names, if any, into cmd's flags.
func (s Spec) apply(cmd *cobra.Command, getenv func(string) string) error {
	path, _ := cmd.Flags().GetString(Flag)
	if path == "" {
		return nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	others := map[string][]string{}
	for _, c := range cmd.Root().Commands() {
		if _, ok := s.Commands[c.Name()]; ok && c != cmd {
			others[c.CommandPath()] = s.keys(c)
		}
	}
	return Apply(path, data, Target{
		Command: cmd.CommandPath(),
		Flags:   cmd.Flags(),
		Keys:    s.keys(cmd),
		Others:  others,
		Env:     s.Env,
		Getenv:  getenv,
	})
}

// keys are the flags a file of cmd may set: its own and the global ones
// spec gives it.
func (s Spec) keys(cmd *cobra.Command) []string {
	var keys []string
	cmd.LocalFlags().VisitAll(func(f *pflag.Flag) { keys = append(keys, f.Name) })
	keys = append(keys, s.Commands[cmd.Name()]...)
	return keys
}

// Target is what Apply sets and what it checks the file against.
type Target struct {
	// Command names the command in errors ("portcullis proxy").
	Command string
	// Flags are the command's parsed flags; Keys, the names of those a
	// file may set.
	Flags *pflag.FlagSet
	Keys  []string
	// Others are the keys of the other commands that take a config file,
	// by command: a key of one of them is refused naming it.
	Others map[string][]string
	// Env and Getenv: a flag whose variable is set is left to it.
	Env    map[string]string
	Getenv func(string) string
}

// Apply sets, from the YAML mapping data (read from file, which errors
// name), each flag of t whose key the mapping has and that neither the
// command line (the flag is Changed) nor its environment variable set.
// Nothing is set unless the whole file is valid; the error names every
// key that is not, with its line.
func Apply(file string, data []byte, t Target) error {
	pairs, err := parse(file, data)
	if err != nil {
		return err
	}
	var problems []error
	type set struct {
		name   string
		values []string
	}
	var sets []set
	for _, p := range pairs {
		values, err := t.check(p.key, p.value)
		if err != nil {
			problems = append(problems, fmt.Errorf("%s:%d: %w", file, p.key.Line, err))
			continue
		}
		sets = append(sets, set{p.key.Value, values})
	}
	if len(problems) > 0 {
		return errors.Join(problems...)
	}
	for _, s := range sets {
		f := t.Flags.Lookup(s.name)
		if f.Changed {
			continue // the command line wins
		}
		if v := t.Env[s.name]; v != "" && t.Getenv != nil && t.Getenv(v) != "" {
			continue // so does the environment
		}
		for _, v := range s.values {
			if err := t.Flags.Set(s.name, v); err != nil {
				return fmt.Errorf("%s: key %q: %w", file, s.name, err)
			}
		}
	}
	return nil
}

type pair struct{ key, value *yaml.Node }

// parse reads data's one document: a mapping (or nothing), whose keys are
// unique.
func parse(file string, data []byte) ([]pair, error) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
		return nil, nil // an empty file sets nothing
	} else if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, fmt.Errorf("%s:%d: a second document; the file holds one mapping of flag names to values", file, extra.Line)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return nil, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s:%d: want a mapping of flag names to values (listen: 127.0.0.1:7070)", file, root.Line)
	}
	seen := map[string]int{}
	var pairs []pair
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], deref(root.Content[i+1])
		if k.Kind != yaml.ScalarNode {
			return nil, fmt.Errorf("%s:%d: a key must be a flag's name", file, k.Line)
		}
		if line, dup := seen[k.Value]; dup {
			return nil, fmt.Errorf("%s:%d: key %q given twice (first on line %d)", file, k.Line, k.Value, line)
		}
		seen[k.Value] = k.Line
		pairs = append(pairs, pair{k, v})
	}
	return pairs, nil
}

func deref(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// check refuses a key that is not one of t's, or a value its flag cannot
// take, and returns the texts to Set the flag with.
func (t Target) check(key, value *yaml.Node) ([]string, error) {
	name := key.Value
	if why, ok := refused[name]; ok {
		return nil, fmt.Errorf("key %q refused: %s", name, why)
	}
	if !slices.Contains(t.Keys, name) || t.Flags.Lookup(name) == nil {
		return nil, t.unknown(name)
	}
	f := t.Flags.Lookup(name)
	kind := f.Value.Type()
	if value.Kind == yaml.SequenceNode {
		if !repeatable(kind) {
			return nil, fmt.Errorf("key %q: want %s, got a list", name, want(kind))
		}
		var values []string
		for _, item := range value.Content {
			item = deref(item)
			if item.Kind != yaml.ScalarNode || item.Tag == "!!null" {
				return nil, fmt.Errorf("key %q: want a list of strings", name)
			}
			values = append(values, item.Value)
		}
		return values, nil
	}
	if value.Kind != yaml.ScalarNode || value.Tag == "!!null" {
		return nil, fmt.Errorf("key %q: want %s, got %s", name, want(kind), describe(value))
	}
	if !fits(kind, value.Tag) {
		return nil, fmt.Errorf("key %q: want %s, got %q", name, want(kind), value.Value)
	}
	// The flag's own parser has the last word (a range, a duration's
	// syntax); try it on a scratch copy so nothing is set yet.
	if err := tryParse(f, value.Value); err != nil {
		return nil, fmt.Errorf("key %q: want %s, got %q", name, want(kind), value.Value)
	}
	return []string{value.Value}, nil
}

// unknown is the error for a key that is not one of t's.
func (t Target) unknown(name string) error {
	cmds := make([]string, 0, len(t.Others))
	for c := range t.Others {
		cmds = append(cmds, c)
	}
	sort.Strings(cmds)
	for _, c := range cmds {
		if slices.Contains(t.Others[c], name) {
			return fmt.Errorf("key %q is a flag of %s, not of %s", name, c, t.Command)
		}
	}
	msg := fmt.Sprintf("unknown key %q: %s has no flag --%s", name, t.Command, name)
	if near := nearest(strings.TrimLeft(name, "-"), t.Keys); near != "" {
		msg += fmt.Sprintf("; did you mean %q?", near)
	}
	return errors.New(msg)
}

// repeatable reports whether a flag of this type may be given several
// times, each adding a value.
func repeatable(kind string) bool {
	return strings.HasSuffix(kind, "Array") || strings.HasSuffix(kind, "Slice")
}

// fits reports whether a YAML scalar of tag may set a flag of kind.
func fits(kind, tag string) bool {
	switch kind {
	case "bool":
		return tag == "!!bool"
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64", "count":
		return tag == "!!int"
	case "float32", "float64":
		return tag == "!!int" || tag == "!!float"
	case "duration":
		return tag == "!!str" || tag == "!!int"
	default: // strings, and lists given one value
		return tag == "!!str" || tag == "!!int" || tag == "!!float"
	}
}

// want names the type a flag of kind takes, for errors.
func want(kind string) string {
	switch {
	case kind == "bool":
		return "a boolean (true or false)"
	case strings.HasPrefix(kind, "int") || strings.HasPrefix(kind, "uint") || kind == "count":
		return "an integer"
	case strings.HasPrefix(kind, "float"):
		return "a number"
	case kind == "duration":
		return "a duration (30s, 5m, 168h)"
	case repeatable(kind):
		return "a string or a list of strings"
	default:
		return "a string"
	}
}

func describe(n *yaml.Node) string {
	switch {
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	default:
		return "no value"
	}
}

// tryParse parses s as pflag parses a flag of f's type, without setting
// f (nothing is set until the whole file is valid).
func tryParse(f *pflag.Flag, s string) error {
	kind := f.Value.Type()
	var err error
	switch {
	case kind == "bool":
		_, err = strconv.ParseBool(s)
	case kind == "duration":
		_, err = time.ParseDuration(s)
	case strings.HasPrefix(kind, "float"):
		_, err = strconv.ParseFloat(s, 64)
	case strings.HasPrefix(kind, "uint"):
		_, err = strconv.ParseUint(s, 0, bits(kind))
	case strings.HasPrefix(kind, "int"):
		_, err = strconv.ParseInt(s, 0, bits(kind))
	}
	return err // strings, and types only the flag parses (its Set reports those)
}

// bits is the size of an integer flag's type ("int32": 32; "int": 64).
func bits(kind string) int {
	n, err := strconv.Atoi(strings.TrimLeft(kind, "uint"))
	if err != nil {
		return 64
	}
	return n
}

// nearest is the key closest to name, if one is a near miss, else ""
// (keys a file may not hold are never offered).
func nearest(name string, keys []string) string {
	return spelling.Nearest(name, keys, func(k string) bool { _, ok := refused[k]; return ok })
}
