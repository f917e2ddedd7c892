package approval

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/types"
)

// Limits on the rules.
const (
	// MaxApprovals caps approvals_required: a larger answer is lowered to
	// it (with a note), so a typo cannot make a proposal unapprovable.
	MaxApprovals = 10
	// EvalTimeout bounds one evaluation; past it the decision falls back
	// to one human approval. A decision takes well under a millisecond:
	// the bound is for a module that loops, and is generous so that a
	// busy gateway (it is wall-clock time) does not fall back by chance.
	EvalTimeout = time.Second
	// MaxModuleBytes bounds the Rego source Compile accepts.
	MaxModuleBytes = 64 << 10
)

// Package is the Rego package the module must declare.
const Package = "portcullis.approval"

// ErrInvalidModule is wrapped by every error of Compile: the module is
// refused and the rules in force stay.
var ErrInvalidModule = errors.New("invalid approval rules")

//go:embed default.rego
var defaultModule string

// defaultRules are compiled on first use, not when the package loads.
var defaultRules = sync.OnceValue(func() *Rules {
	r, err := Compile(defaultModule)
	if err != nil {
		panic(err) // the tests compile it
	}
	return r
})

// Rules are a compiled, validated approval module, ready to evaluate. They
// are immutable and safe for concurrent use.
type Rules struct {
	module string
	hash   string
	query  rego.PreparedEvalQuery
}

// Default returns the built-in rules: one human approval for every
// proposal, no auto-approval, no extra refusals.
func Default() *Rules { return defaultRules() }

// Module returns the Rego source.
func (r *Rules) Module() string { return r.module }

// Hash returns the lower-case hex SHA-256 of the Rego source.
func (r *Rules) Hash() string { return r.hash }

// Decision is what a proposal needs to be applied.
type Decision struct {
	// Required is how many distinct humans must approve; at least 1
	// unless AutoApprove is set.
	Required int
	// AutoApprove: the proposal may apply without any human approval.
	// Never set when a finding is blocking or Refusals is not empty.
	AutoApprove bool
	// Refusals are the rules' reasons to refuse approval (their deny
	// set, sorted); while there are any the proposal cannot be approved.
	Refusals []string
	// Notes say why a human is needed or what was overridden, for the
	// approvers (Proposal.approval_notes).
	Notes []string
	// Fallback: the rules failed or answered out of bounds, and the
	// decision is the safe default (one human approval); the notes say
	// why, and the caller should log them.
	Fallback bool
}

// Approved reports whether the distinct, non-empty names in approvers
// are enough to apply the proposal.
func (d Decision) Approved(approvers []string) bool {
	if len(d.Refusals) > 0 {
		return false
	}
	if d.AutoApprove {
		return true
	}
	seen := make(map[string]bool, len(approvers))
	for _, a := range approvers {
		if a != "" {
			seen[a] = true
		}
	}
	return len(seen) >= d.Required
}

// The outputs of the module, under data.portcullis.approval.
var (
	outRequired = ast.MustParseRef("data.portcullis.approval.approvals_required")
	outAuto     = ast.MustParseRef("data.portcullis.approval.auto_approve")
	outDeny     = ast.MustParseRef("data.portcullis.approval.deny")
)

// query collects each output into an array, so that one undefined output
// does not hide the others.
const query = `required := [x | x := data.portcullis.approval.approvals_required]
auto := [x | x := data.portcullis.approval.auto_approve]
deny := [x | x := data.portcullis.approval.deny]`

// capabilities are this OPA's built-ins minus those that reach outside
// the process: the rules must give the same answer on every replica and
// must not make the gateway a network client.
var capabilities = func() *ast.Capabilities {
	c := ast.CapabilitiesForThisVersion()
	keep := c.Builtins[:0]
	for _, b := range c.Builtins {
		switch b.Name {
		case "http.send", "net.lookup_ip_addr", "opa.runtime":
			continue
		}
		keep = append(keep, b)
	}
	c.Builtins = keep
	return c
}()

// Compile parses, compiles and validates a Rego module. The module must
// declare package portcullis.approval and define
//
//	approvals_required  a whole number: distinct human approvals needed
//	auto_approve        a boolean: apply without a human
//	deny                optional, a set of strings: reasons to refuse
//
// over the input document Input describes. It is then evaluated against
// built-in sample proposals; an error, an undefined or ill-typed output,
// or an answer the invariants reject (see the package doc) for any of
// them refuses the module. Built-ins that reach the network or the host
// (http.send, net.lookup_ip_addr, opa.runtime) are unavailable. Every
// error wraps ErrInvalidModule.
func Compile(module string) (*Rules, error) {
	r, err := compile(module)
	if err != nil {
		return nil, err
	}
	for _, s := range samples {
		if d := r.Decide(context.Background(), s.in); d.Fallback {
			for i, n := range d.Notes {
				d.Notes[i] = strings.TrimPrefix(n, humanNeeded)
			}
			return nil, fmt.Errorf("%w: sample %q: %s", ErrInvalidModule, s.name, strings.Join(d.Notes, "; "))
		}
	}
	return r, nil
}

// compile is Compile without the samples.
func compile(module string) (*Rules, error) {
	if len(module) > MaxModuleBytes {
		return nil, fmt.Errorf("%w: module is %d bytes, at most %d", ErrInvalidModule, len(module), MaxModuleBytes)
	}
	mod, err := ast.ParseModuleWithOpts("approval.rego", module, ast.ParserOptions{
		RegoVersion: ast.RegoV1, Capabilities: capabilities,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidModule, err)
	}
	if mod == nil {
		return nil, fmt.Errorf("%w: empty module", ErrInvalidModule)
	}
	if got := mod.Package.Path.String(); got != "data."+Package {
		return nil, fmt.Errorf("%w: package is %s, want %s", ErrInvalidModule, packageName(mod), Package)
	}
	defined := map[string]bool{}
	for _, rule := range mod.Rules {
		defined[rule.Head.Ref()[0].Value.String()] = true
	}
	for _, name := range []string{"approvals_required", "auto_approve"} {
		if !defined[name] {
			return nil, fmt.Errorf("%w: %s is not defined", ErrInvalidModule, name)
		}
	}
	c := ast.NewCompiler().WithCapabilities(capabilities)
	if c.Compile(map[string]*ast.Module{"approval.rego": mod}); c.Failed() {
		return nil, fmt.Errorf("%w: %v", ErrInvalidModule, c.Errors)
	}
	if err := checkTypes(c.TypeEnv); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidModule, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	q, err := rego.New(rego.Compiler(c), rego.Query(query), rego.StrictBuiltinErrors(true)).PrepareForEval(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidModule, err)
	}
	sum := sha256.Sum256([]byte(module))
	return &Rules{module: module, hash: hex.EncodeToString(sum[:]), query: q}, nil
}

func packageName(m *ast.Module) string {
	p := m.Package.Path
	if len(p) > 1 {
		p = p[1:] // drop data.
	}
	return p.String()
}

// checkTypes refuses outputs whose inferred type can never be the right
// one, e.g. approvals_required := "two". Outputs whose type depends on the
// input are left to the samples and, at run time, to the fallback.
func checkTypes(env *ast.TypeEnv) error {
	for _, o := range []struct {
		ref  ast.Ref
		want types.Type
		what string
	}{
		{outRequired, types.N, "a number"},
		{outAuto, types.B, "a boolean"},
		{outDeny, types.NewSet(types.S), "a set of strings"},
	} {
		if t := env.GetByRef(o.ref); t != nil && !compatible(t, o.want) {
			return fmt.Errorf("%s is %v, want %s", o.ref[3:], t, o.what)
		}
	}
	return nil
}

// compatible reports whether a value of type t may be of type want: a
// union is compatible when one of its members is (any: always), a set
// when its elements are.
func compatible(t, want types.Type) bool {
	if n, ok := t.(*types.NamedType); ok {
		t = n.Type
	}
	switch t := t.(type) {
	case types.Any:
		if len(t) == 0 {
			return true
		}
		for _, m := range t {
			if compatible(m, want) {
				return true
			}
		}
		return false
	case *types.Set:
		w, ok := want.(*types.Set)
		return ok && compatible(t.Of(), w.Of())
	}
	return types.Compare(t, want) == 0
}

// humanNeeded starts the note of a fallback.
const humanNeeded = "a human must approve: "

// Decide evaluates the rules on in and applies the invariants of the
// package doc. It never fails: a failing rule is a Fallback decision.
// Evaluation stops after EvalTimeout, or earlier if ctx ends.
func (r *Rules) Decide(ctx context.Context, in Input) Decision {
	var d Decision
	fallback := func(format string, args ...any) {
		d.Fallback = true
		d.Notes = append(d.Notes, humanNeeded+fmt.Sprintf(format, args...))
	}
	required, auto, deny, err := r.eval(ctx, in)
	if err != nil {
		fallback("the approval rules failed: %v", err)
	} else {
		var n int
		if n, err = wholeNumber(required); err != nil {
			fallback("approvals_required %v", err)
			n = 1
		}
		if n > MaxApprovals {
			d.Notes = append(d.Notes, fmt.Sprintf("approvals_required %s lowered to %d", describe(required[0]), MaxApprovals))
			n = MaxApprovals
		}
		d.Required = n
		if d.AutoApprove, err = boolean(auto); err != nil {
			fallback("auto_approve %v", err)
		}
		if d.Refusals, err = reasons(deny); err != nil {
			fallback("deny %v", err)
		}
	}
	if d.Required < 1 && !d.Fallback {
		switch {
		case len(in.Findings) > 0:
			fallback("approvals_required is %s for a proposal with findings", describe(required[0]))
		case !d.AutoApprove:
			fallback("approvals_required is %s but auto_approve is false", describe(required[0]))
		}
	}
	if d.Fallback {
		d.AutoApprove = false
	}
	if d.AutoApprove {
		for _, f := range in.Findings {
			if Blocking(f.Kind) {
				d.AutoApprove = false
				d.Notes = append(d.Notes, fmt.Sprintf("no auto-approval: the prover found %s, which always needs a human", f.Kind))
				break
			}
		}
	}
	if in.Kind == KindCall {
		d.callInvariants(in)
	}
	if d.AutoApprove && len(d.Refusals) > 0 {
		d.AutoApprove = false
		d.Notes = append(d.Notes, "no auto-approval: the rules refuse approval")
	}
	if !d.AutoApprove && d.Required < 1 {
		d.Required = 1
	}
	return d
}

// callInvariants bound a decision on a held call: a person decides it
// (no auto-approval), and only with an operator or admin token, whatever
// the rules say.
func (d *Decision) callInvariants(in Input) {
	if d.AutoApprove {
		d.AutoApprove = false
		d.Notes = append(d.Notes, "no auto-approval: a person decides a held call")
	}
	if r := in.Decider.Role; r != "operator" && r != "admin" {
		why := "a held call is decided by an operator or an admin"
		if !slices.Contains(d.Refusals, why) {
			d.Refusals = append(d.Refusals, why)
			slices.Sort(d.Refusals)
		}
	}
}

// eval runs the prepared query and returns the collected outputs.
func (r *Rules) eval(ctx context.Context, in Input) (required, auto, deny []any, err error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, nil, fmt.Errorf("not evaluated: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, EvalTimeout)
	defer cancel()
	v, err := ast.InterfaceToValue(in.value())
	if err != nil {
		return nil, nil, nil, fmt.Errorf("input: %w", err)
	}
	rs, err := r.query.Eval(ctx, rego.EvalParsedInput(v))
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, nil, fmt.Errorf("evaluation stopped after %v: %w", EvalTimeout, ctx.Err())
		}
		return nil, nil, nil, err
	}
	if len(rs) != 1 {
		return nil, nil, nil, fmt.Errorf("query gave %d results", len(rs))
	}
	b := rs[0].Bindings
	required, _ = b["required"].([]any)
	auto, _ = b["auto"].([]any)
	deny, _ = b["deny"].([]any)
	return required, auto, deny, nil
}

func wholeNumber(vs []any) (int, error) {
	if len(vs) == 0 {
		return 0, errors.New("is undefined")
	}
	n, ok := vs[0].(json.Number)
	if !ok {
		return 0, fmt.Errorf("is %s, not a number", describe(vs[0]))
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil || f != math.Trunc(f) {
		return 0, fmt.Errorf("is %s, not a whole number", n)
	}
	// Clamp before converting: far out of range is as wrong as just out.
	return int(max(min(f, MaxApprovals+1), -1)), nil
}

func boolean(vs []any) (bool, error) {
	if len(vs) == 0 {
		return false, errors.New("is undefined")
	}
	b, ok := vs[0].(bool)
	if !ok {
		return false, fmt.Errorf("is %s, not a boolean", describe(vs[0]))
	}
	return b, nil
}

// reasons reads the deny set (a JSON array); an undefined deny is none.
func reasons(vs []any) ([]string, error) {
	if len(vs) == 0 {
		return nil, nil
	}
	set, ok := vs[0].([]any)
	if !ok {
		return nil, fmt.Errorf("is %s, not a set of strings", describe(vs[0]))
	}
	var out []string
	for _, e := range set {
		s, ok := e.(string)
		if !ok {
			return nil, fmt.Errorf("holds %s, not a string", describe(e))
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out, nil
}

// describe shows a rule's value in an error, briefly.
func describe(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%T", v)
	}
	if len(b) > 80 {
		return string(b[:77]) + "..."
	}
	return string(b)
}
