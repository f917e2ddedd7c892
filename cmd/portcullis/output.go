package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/portcullis-dev/portcullis/internal/apiclient"
	"github.com/portcullis-dev/portcullis/internal/apitext"
	"github.com/portcullis-dev/portcullis/policy"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// jsonOptions print API messages as the contract promises: proto field
// names (snake_case), unset fields left out.
var jsonOptions = protojson.MarshalOptions{
	UseProtoNames:   true,
	EmitUnpopulated: false,
	Multiline:       true,
	Indent:          "  ",
}

// printJSON writes m to stdout as protojson.
func (e *environment) printJSON(m proto.Message) error {
	return e.printJSONWith(jsonOptions, m)
}

// unary makes one call to the gateway with the environment's client and
// prints the answer: as JSON with -o json, otherwise through text. It is
// the shape of most commands; what a command prints besides the answer
// (warnings on stderr, which go out whatever the format) it prints in
// call.
func unary[R proto.Message](env *environment, call func(api *apiclient.Client) (R, error), text func(R) error) error {
	return unaryWith(env, jsonOptions, call, text)
}

// unaryTable is unary for a call that answers a list: the text is
// table (an apitext table) of the answer's items.
func unaryTable[R proto.Message, T any](env *environment, call func(api *apiclient.Client) (R, error), items func(R) []T, table func(io.Writer, []T) error) error {
	return unary(env, call, func(res R) error { return table(env.stdout, items(res)) })
}

// callGateway makes call with the API clients of the command's gateway,
// which it returns too (for calls that follow).
func callGateway[R any](env *environment, call func(api *apiclient.Client) (R, error)) (*apiclient.Client, R, error) {
	api, err := env.client()
	if err != nil {
		var zero R
		return nil, zero, err
	}
	res, err := call(api)
	return api, res, err
}

// unaryWith is unary with other marshal options for -o json.
func unaryWith[R proto.Message](env *environment, opts protojson.MarshalOptions, call func(api *apiclient.Client) (R, error), text func(R) error) error {
	_, res, err := callGateway(env, call)
	return answer(env, opts, text)(res, err)
}

// answer prints an answer: JSON with -o json, else text.
func answer[R proto.Message](env *environment, opts protojson.MarshalOptions, text func(R) error) func(R, error) error {
	return func(res R, err error) error {
		if err != nil {
			return err
		}
		if env.jsonOutput() {
			return env.printJSONWith(opts, res)
		}
		return text(res)
	}
}

// printJSONWith is printJSON with other marshal options (indented all the
// same).
func (e *environment) printJSONWith(opts protojson.MarshalOptions, m proto.Message) error {
	b, err := apiclient.MarshalJSON(opts, m)
	if err != nil {
		return err
	}
	return e.writeJSON(b)
}

// printValueJSON writes v, a Go value rather than an API message, to
// stdout as indented JSON.
func (e *environment) printValueJSON(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode result as JSON: %w", err)
	}
	return e.writeJSON(b)
}

// writeJSON writes compact JSON to stdout, indented.
func (e *environment) writeJSON(b []byte) error {
	// protojson varies its white space on purpose; re-indent so the same
	// answer always prints the same bytes.
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", jsonOptions.Indent); err != nil {
		return fmt.Errorf("indent JSON: %w", err)
	}
	out.WriteByte('\n')
	_, err := e.stdout.Write(out.Bytes())
	return err
}

// printJSONLine writes m to stdout as protojson on one line (JSON Lines,
// for streams).
func (e *environment) printJSONLine(m proto.Message) error {
	b, err := apiclient.MarshalJSON(jsonOptions, m)
	if err != nil {
		return err
	}
	_, err = e.stdout.Write(append(b, '\n'))
	return err
}

// confirm asks question on stderr and reports whether the line typed on
// stdin is want.
func (e *environment) confirm(question, want string) bool {
	fmt.Fprint(e.stderr, question)
	answer, _ := bufio.NewReader(e.stdin).ReadString('\n')
	return strings.TrimSpace(answer) == want
}

// The cells of every table and field list: apitext renders them, for
// every command alike.
var (
	dash        = apitext.Dash
	clip        = apitext.Clip
	hashLabel   = apitext.HashLabel
	versionCell = apitext.VersionCell
)

// printWarnings writes the validator's warnings to stderr.
func (e *environment) printWarnings(warnings []*portcullisv1.Problem) {
	for _, w := range warnings {
		fmt.Fprintf(e.stderr, "warning: %s\n", formatProblem(w.GetPath(), w.GetMessage()))
	}
}

// maxInput bounds what a command reads from a file or stdin: the largest
// document the gateway accepts, so an oversized one fails here, as invalid
// input, before anything is sent.
const maxInput = policy.MaxDocumentBytes

// readInput reads a document from a file, or from stdin for "-".
func (e *environment) readInput(path string) ([]byte, error) {
	var (
		r    io.Reader
		name = path
	)
	if path == "-" {
		r, name = e.stdin, "stdin"
	} else {
		f, err := os.Open(path)
		if err != nil {
			return nil, inputErr(err)
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, maxInput+1))
	if err != nil {
		return nil, inputErr(fmt.Errorf("read %s: %w", name, err))
	}
	if len(data) > maxInput {
		return nil, inputErr(fmt.Errorf("read %s: larger than %d bytes", name, maxInput))
	}
	return data, nil
}
