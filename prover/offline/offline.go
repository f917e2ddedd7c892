// Package offline is the prover on policy files, as `portcullis prove`
// runs it in CI: which inputs must be valid policies (an invalid one is
// an InputError with its problems), a proposed policy that names a cloud
// metadata address reported as a finding rather than refused, and the
// Result that -o json prints, findings always present. Reading the files
// is the caller's.
package offline

import (
	"context"
	"errors"
	"fmt"

	"github.com/portcullis-dev/portcullis/internal/apitext"
	"github.com/portcullis-dev/portcullis/policy"
	"github.com/portcullis-dev/portcullis/prover"
)

// Result is prove -o json: the findings (never null), and, when the
// inputs could not be proven, the error and each file's problems.
type Result struct {
	Findings []apitext.ProvedFinding `json:"findings"`
	Error    string                  `json:"error,omitempty"`
	Problems []FileProblems          `json:"problems,omitempty"`
}

// FileProblems are the problems of one input file.
type FileProblems struct {
	File     string           `json:"file"`
	Problems []policy.Problem `json:"problems"`
}

// Failed is r with err recorded as -o json prints it: its message, and an
// InputError's problems.
func (r Result) Failed(err error) Result {
	r.Error = err.Error()
	if pe, ok := errors.AsType[*InputError](err); ok {
		r.Problems = pe.Problems
	}
	return r
}

// Err is a FindingsError when the prover found something, else nil.
func (r Result) Err() error {
	if n := len(r.Findings); n > 0 {
		return &FindingsError{Count: n}
	}
	return nil
}

// FindingsError: the prover found something (portcullis prove exits 1).
type FindingsError struct{ Count int }

func (e *FindingsError) Error() string {
	if e.Count == 1 {
		return "the proposed policy adds 1 finding"
	}
	return fmt.Sprintf("the proposed policy adds %d findings", e.Count)
}

// InputError: an input is not a valid policy.
type InputError struct {
	Msg      string
	Problems []FileProblems
}

func (e *InputError) Error() string { return e.Msg }

// Document is one input as read: its policy (nil when it did not parse)
// and its problems, under the name messages give it (its flag and file).
type Document struct {
	Flag, File string
	Policy     *policy.Policy
	Problems   []policy.Problem
}

// valid returns d's policy, or an InputError naming its problems.
func (d Document) valid() (*policy.Policy, error) {
	return d.Policy, d.invalid(d.Problems, d.Problems)
}

// invalid is the InputError of shown problems (nil with none), listing
// all of them as the file's.
func (d Document) invalid(shown, all []policy.Problem) error {
	if len(shown) == 0 {
		return nil
	}
	return &InputError{Msg: fmt.Sprintf("%s %s is not a valid policy: %s", d.Flag, d.File, summarize(shown)), Problems: []FileProblems{{d.File, all}}}
}

// Prove proves what proposed adds to current (within boundary, when it
// has a policy or problems). An invalid input is an InputError; the
// proposed policy's cloud metadata problems are findings. The error of a
// proof refused past its budget is prover.ErrTooComplex.
func Prove(ctx context.Context, current, proposed Document, boundary *Document, opts prover.Options) (Result, error) {
	res := Result{Findings: []apitext.ProvedFinding{}}
	cur, err := current.valid()
	if err != nil {
		return res, err
	}
	if boundary != nil {
		if opts.Boundary, err = boundary.valid(); err != nil {
			return res, err
		}
	}
	if len(proposed.Problems) > 0 {
		// A proposed policy naming a cloud metadata address is invalid
		// (the gateway refuses it), and that is a finding, not an error.
		var metadata, other []policy.Problem
		for _, p := range proposed.Problems {
			if p.Code == policy.CodeCloudMetadata {
				metadata = append(metadata, p)
			} else {
				other = append(other, p)
			}
		}
		if err := proposed.invalid(other, proposed.Problems); err != nil {
			return res, err
		}
		for _, p := range metadata {
			res.Findings = append(res.Findings, apitext.ProvedFinding{Kind: prover.CloudMetadata, Rule: p.Path, Detail: p.Message})
		}
		return res, nil
	}
	report, err := prover.Prove(ctx, cur, proposed.Policy, opts)
	if err != nil {
		return res, err
	}
	for _, f := range report.Findings {
		res.Findings = append(res.Findings, apitext.FindingOf(f))
	}
	return res, nil
}

// summarize is the first problem and how many more there are.
func summarize(ps []policy.Problem) string {
	if len(ps) == 1 {
		return ps[0].String()
	}
	return fmt.Sprintf("%s (and %d more)", ps[0].String(), len(ps)-1)
}
