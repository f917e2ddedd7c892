package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// This file holds Validate, how the validator records problems, the checks
// on the document's top level (version, filesystem, process, network policy
// entries, binaries), and the glob-spelling warnings the rule checks share.

// Limits from OpenShell's schema, and a few of our own where OpenShell sets
// none but a document could otherwise make the proxy allocate without bound.
const (
	maxFilesystemPaths   = 256
	maxFilesystemPathLen = 4096
	maxMiddlewares       = 10
	maxSelectorPatterns  = 32
	maxBodyBytesLimit    = 64 << 20
	maxNameLen           = 256
)

// knownMCPVersions are the MCP protocol revisions mcp.versions may list.
var knownMCPVersions = map[string]bool{
	"2024-11-05": true,
	"2025-03-26": true,
	"2025-06-18": true,
	"2025-11-25": true,
	"2026-07-28": true,
}

var (
	mcpVersionFmt = regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2}$`)
	httpToken     = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
)

// Validate checks a policy built in Go against every rule Parse applies
// after decoding. It returns the warnings (documents that are valid but that
// Portcullis reads differently from OpenShell, or that do nothing) and, when
// the policy is invalid, a *ValidationError listing every problem. Validate
// does not modify p; the paths refer to p as given, not to its canonical
// form.
func Validate(p *Policy) (warnings []Problem, err error) {
	if p == nil {
		return nil, &ValidationError{Problems: []Problem{{Message: "policy is nil"}}}
	}
	v := &validator{}
	v.policy(p)
	if len(v.errs) > 0 {
		return v.warns, &ValidationError{Problems: v.errs}
	}
	return v.warns, nil
}

type validator struct {
	errs, warns []Problem
	// privateNoted: the private-resolution divergence was noted once.
	privateNoted bool
}

func (v *validator) errorf(path, format string, args ...any) {
	v.errs = appendProblem(v.errs, Problem{Path: path, Message: fmt.Sprintf(format, args...)})
}

// metadata records a problem naming a cloud metadata address.
func (v *validator) metadata(path, msg string) {
	v.errs = appendProblem(v.errs, Problem{Path: path, Message: msg, Code: CodeCloudMetadata})
}

func (v *validator) warnf(path, format string, args ...any) {
	v.warns = appendProblem(v.warns, Problem{Path: path, Message: fmt.Sprintf(format, args...)})
}

// sortedKeys lists m's keys in order, so that validation, decisions and
// the arguments walk visit maps deterministically.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func (v *validator) policy(p *Policy) {
	if p.Version != 1 {
		if p.Version == 0 {
			v.errorf("version", "is required and must be 1")
		} else {
			v.errorf("version", "must be 1")
		}
	}
	if p.FilesystemPolicy != nil {
		v.filesystem(p.FilesystemPolicy)
	}
	if p.Landlock != nil {
		switch p.Landlock.Compatibility {
		case "", "best_effort", "hard_requirement":
		default:
			v.errorf("landlock.compatibility", "must be best_effort or hard_requirement")
		}
	}
	if p.Process != nil {
		v.processID("process.run_as_user", p.Process.RunAsUser)
		v.processID("process.run_as_group", p.Process.RunAsGroup)
	}
	for _, name := range sortedKeys(p.NetworkPolicies) {
		v.networkPolicy(keyPath("network_policies", name), name, p.NetworkPolicies[name])
	}
	v.middlewares(p.NetworkMiddlewares)
	eps := documentEndpoints(p)
	if pairs, ok := samePortPairs(eps); ok {
		v.sharedMCPDestinations(eps, pairs)
		v.uninspectedAliases(eps, pairs)
		v.ambiguousEndpoints(eps, pairs)
	} else {
		v.errorf("network_policies", "more than %d pairs of endpoints share a port under a wildcard, hostless or repeated host (or address); too many to check against each other: split the policy", maxPortPairs)
	}
	v.middlewaresOverSkippedTLS(p.NetworkMiddlewares, eps)
}

func (v *validator) filesystem(fs *FilesystemPolicy) {
	if n := len(fs.ReadOnly) + len(fs.ReadWrite); n > maxFilesystemPaths {
		v.errorf("filesystem_policy", "lists %d paths; at most %d are allowed", n, maxFilesystemPaths)
	}
	check := func(field string, paths []string, rw bool) {
		for i, p := range paths {
			fp := indexPath("filesystem_policy."+field, i)
			switch {
			case len(p) > maxFilesystemPathLen:
				v.errorf(fp, "is longer than %d characters", maxFilesystemPathLen)
			case !strings.HasPrefix(p, "/"):
				v.errorf(fp, "must be an absolute path")
			case hasDotDot(p):
				v.errorf(fp, "must not contain .. components")
			case strings.ContainsRune(p, 0):
				v.errorf(fp, "must not contain NUL")
			case rw && path.Clean(p) == "/":
				v.errorf(fp, "read_write must not be / (too broad)")
			}
		}
	}
	check("read_only", fs.ReadOnly, false)
	check("read_write", fs.ReadWrite, true)
}

func hasDotDot(p string) bool {
	for _, seg := range strings.Split(p, "/") {
		if seg == ".." {
			return true
		}
	}
	return false
}

// processID checks run_as_user / run_as_group: "sandbox" or a numeric id in
// 1..4294967294 (0 is root; 4294967295 is (uid_t)-1, "no change").
func (v *validator) processID(path, id string) {
	if id == "" || id == "sandbox" {
		return
	}
	n, err := strconv.ParseUint(id, 10, 64)
	switch {
	case id == "root" || (err == nil && n == 0):
		v.errorf(path, "must not be root")
	case err != nil:
		v.errorf(path, "must be sandbox or a numeric id in 1..4294967294")
	case n > 4294967294:
		v.errorf(path, "must be a numeric id in 1..4294967294")
	}
}

func (v *validator) networkPolicy(path, key string, np *NetworkPolicy) {
	if key == "" {
		v.errorf(path, "name must not be empty")
	}
	if np == nil {
		v.errorf(path, "must be a mapping with endpoints and binaries")
		return
	}
	if len(key) > maxNameLen || len(np.Name) > maxNameLen {
		v.errorf(path, "name is longer than %d characters", maxNameLen)
	}
	if len(np.Endpoints) == 0 {
		v.warnf(keyPath(path, "endpoints"), "no endpoints: this entry allows nothing")
	}
	for i, ep := range np.Endpoints {
		ep1 := indexPath(keyPath(path, "endpoints"), i)
		if ep == nil {
			v.errorf(ep1, "must be an endpoint mapping")
			continue
		}
		v.endpoint(ep1, ep)
	}
	if len(np.Binaries) == 0 {
		v.warnf(keyPath(path, "binaries"), "no binaries: any program in the sandbox may use these endpoints")
	}
	for i, b := range np.Binaries {
		v.binary(indexPath(keyPath(path, "binaries"), i), b)
	}
}

func (v *validator) binary(path string, b Binary) {
	p := keyPath(path, "path")
	switch {
	case b.Path == "":
		v.errorf(p, "is required")
		return
	case !strings.HasPrefix(b.Path, "/") && !strings.HasPrefix(b.Path, "*"):
		v.errorf(p, "must be an absolute path or a glob")
		return
	case hasDotDot(b.Path):
		v.errorf(p, "must not contain .. components")
		return
	}
	if err := ValidGlob(b.Path); err != nil {
		v.errorf(p, "%v", err)
		return
	}
	v.singleStar(p, b.Path)
	if b.Harness != nil {
		v.warnf(keyPath(path, "harness"), "is deprecated and ignored")
	}
}

// singleStar warns about a glob whose lone `*` OpenShell would let match
// across `/`; in Portcullis it stays within one segment.
func (v *validator) singleStar(path, glob string) {
	for i := 0; i < len(glob); i++ {
		switch glob[i] {
		case '\\':
			i++
		case '*':
			if i+1 < len(glob) && glob[i+1] == '*' {
				i++
				continue
			}
			v.warnf(path, "%q: `*` matches within one path segment in Portcullis (OpenShell lets it cross `/`); use `**` to match across segments", glob)
			return
		}
	}
}

// pathSpelling warns about path globs that read differently from how
// they look: a raw `;` never matches (CanonicalPath strips `;`
// parameters, as OpenShell does), and an encoded one is `%3B` here (data,
// which OpenShell strips after decoding); a deny glob with upper-case
// letters also denies every other case (MatchDenyPath; OpenShell compares
// exactly).
func (v *validator) pathSpelling(path, glob string, allow bool) {
	if strings.Contains(glob, ";") {
		v.warnf(path, "%q: paths are matched with `;` parameters stripped, so a `;` in a glob never matches (an encoded semicolon in a path is %%3B)", glob)
	}
	if strings.Contains(strings.ToUpper(glob), "%3B") {
		v.warnf(path, "%q: Portcullis keeps an encoded `;` (%%3B) in a path as data; OpenShell decodes it and strips what follows, so this glob matches nothing there", glob)
	}
	if !allow && strings.ToLower(glob) != glob {
		v.warnf(path, "%q: deny rules match paths ignoring case in Portcullis (OpenShell compares exactly), so this also denies %q", glob, strings.ToLower(glob))
	}
}

// allowBraces warns about `{a,b}` in an allow path glob (or an
// endpoint's path scope): OpenShell reads them as alternatives, Portcullis
// reads allow globs literally (a canonical path spells `{` as %7B, so the
// glob allows nothing there), failing closed. Deny path globs expand them
// (MatchDenyPath).
func (v *validator) allowBraces(path, glob string) {
	if HasBraceAlternatives(glob) {
		v.warnf(path, "%q: Portcullis reads `{a,b}` literally in allow path globs (OpenShell reads alternatives), so this matches no request path; write one rule per alternative", glob)
	}
}

// checkJSONValue reports a free-form value (built in Go) that has no JSON
// form or nests too deeply.
func checkJSONValue(x any, depth int) error {
	if depth > maxNesting {
		return fmt.Errorf("nested more than %d levels deep", maxNesting)
	}
	switch t := x.(type) {
	case nil, string, bool, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, json.Number:
		return nil
	case float32:
		return checkJSONValue(float64(t), depth)
	case float64:
		if math.IsNaN(t) || math.IsInf(t, 0) {
			return errors.New("numbers must be finite")
		}
		return nil
	case map[string]any:
		for _, k := range sortedKeys(t) {
			if err := checkJSONValue(t[k], depth+1); err != nil {
				return err
			}
		}
		return nil
	case []any:
		for _, e := range t {
			if err := checkJSONValue(e, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	rv := reflect.ValueOf(x)
	switch rv.Kind() {
	case reflect.Func, reflect.Chan, reflect.Complex64, reflect.Complex128, reflect.UnsafePointer:
		return fmt.Errorf("value of type %T has no JSON form", x)
	}
	if _, err := json.Marshal(x); err != nil {
		return fmt.Errorf("value of type %T has no JSON form: %v", x, err)
	}
	return nil
}
