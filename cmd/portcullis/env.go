package main

import (
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/portcullis-dev/portcullis/dataplane/gatewayclient"
	"github.com/portcullis-dev/portcullis/internal/apiclient"
	"github.com/portcullis-dev/portcullis/internal/cliconfig"
)

// Environment variables read by the client commands, and the defaults they
// override. A flag beats its variable; the variable beats the default.
const (
	envGateway     = "PORTCULLIS_GATEWAY"
	envToken       = "PORTCULLIS_TOKEN"
	envDatabaseURL = "PORTCULLIS_DATABASE_URL"        // the gateway's and the store commands'
	envSentryDBURL = "PORTCULLIS_SENTRY_DATABASE_URL" // the gateway's

	defaultGateway = "http://127.0.0.1:7070"
	defaultTimeout = 30 * time.Second
)

// configFile is what --config FILE sets: gateway's and proxy's own flags, the global ones named, and no flag whose variable is set.
var configFile = cliconfig.Spec{Commands: map[string][]string{"gateway": nil, "proxy": {"gateway", "token-file"}},
	Env: map[string]string{"gateway": envGateway, "database-url": envDatabaseURL, "sentry-database-url": envSentryDBURL, "otlp-endpoint": envOTLPEndpoint}}

// Values of -o/--output.
const (
	outputText = "text"
	outputJSON = "json"
	outputYAML = "yaml" // policy get only: the document alone
)

// annotationYAML marks a command that accepts -o yaml.
const annotationYAML = "portcullis/output-yaml"

// environment is what every command may touch: the process's streams and
// environment, the global flags, and the API clients built from them on
// first use (offline commands never build them, so they need no gateway and
// no token).
type environment struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string

	// Global flags, as given on the command line ("" when absent).
	gatewayFlag   []string // each may hold several, comma-separated
	tokenFlag     string
	tokenFileFlag string
	output        string
	timeout       time.Duration

	// interactive: stdin is a terminal, so a command may ask (sandbox
	// delete's confirmation).
	interactive bool

	// started is set when a command's own code begins to run: an error
	// before that is cobra refusing the command line (exit 2).
	started bool
	// exit is the status of a command that succeeded (portcullis run's: its CMD's).
	exit int
	// commandPath is the command that ran ("portcullis policy set"), for hints.
	commandPath string

	// api is the gateway's API, once a command asked for it.
	api *apiclient.Client
	// gateway is the replica client commands talk to, once picked.
	gateway *url.URL
}

func newEnvironment(stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) *environment {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	return &environment{stdin: stdin, stdout: stdout, stderr: stderr, getenv: getenv, interactive: isTerminal(stdin)}
}

// isTerminal reports whether r is a terminal (a character device).
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// addGlobalFlags registers the flags every command accepts.
func (e *environment) addGlobalFlags(cmd *cobra.Command) {
	f := cmd.PersistentFlags()
	f.StringArrayVar(&e.gatewayFlag, "gateway", nil, "gateway API `URL` (env "+envGateway+", default "+defaultGateway+"); several replicas: repeat it or separate with commas")
	f.StringVar(&e.tokenFlag, "token", "", "API `TOKEN` (env "+envToken+"; prefer --token-file, command lines are visible to other users)")
	f.StringVar(&e.tokenFileFlag, "token-file", "", "read the API token from `FILE` (surrounding white space is ignored)")
	f.StringVarP(&e.output, "output", "o", outputText, "output `FORMAT`: text or json (policy get also yaml)")
	f.DurationVar(&e.timeout, "timeout", defaultTimeout, "give up on a gateway call after `DURATION` (0: never; logs --tail is never cut)")
}

// checkOutput refuses an -o value the command cannot print.
func (e *environment) checkOutput(cmd *cobra.Command) error {
	switch e.output {
	case outputText, outputJSON:
		return nil
	case outputYAML:
		if cmd.Annotations[annotationYAML] != "" {
			return nil
		}
		return usagef("%s cannot print yaml; use -o text or -o json", cmd.CommandPath())
	default:
		return usagef("unknown output format %q; use text or json", e.output)
	}
}

func (e *environment) jsonOutput() bool { return e.output == outputJSON }

// gatewayURLs resolves --gateway (repeated or comma-separated: the
// replicas of one gateway), then PORTCULLIS_GATEWAY (comma-separated),
// then the default, and checks that each is an http(s) URL.
func (e *environment) gatewayURLs() ([]*url.URL, error) {
	raw, from := strings.Join(e.gatewayFlag, ","), "--gateway"
	if raw == "" {
		raw, from = e.getenv(envGateway), envGateway
	}
	if raw == "" {
		raw, from = defaultGateway, "default gateway"
	}
	urls, err := apiclient.ParseURLs(raw)
	if err != nil {
		return nil, usagef("%s: %v", from, err)
	}
	return urls, nil
}

// gatewayURL is the gateway client commands talk to: the one given, or
// the replica apiclient.Pick picks of several, once.
func (e *environment) gatewayURL() (*url.URL, error) {
	if e.gateway != nil {
		return e.gateway, nil
	}
	urls, err := e.gatewayURLs()
	if err != nil {
		return nil, err
	}
	e.gateway = apiclient.Pick(urls)
	return e.gateway, nil
}

// token resolves --token or --token-file, then PORTCULLIS_TOKEN. An empty
// result is allowed: the gateway then answers Unauthenticated.
func (e *environment) token() (string, error) {
	switch {
	case e.tokenFlag != "" && e.tokenFileFlag != "":
		return "", usagef("give --token or --token-file, not both")
	case e.tokenFlag != "":
		return strings.TrimSpace(e.tokenFlag), nil
	case e.tokenFileFlag != "":
		data, err := os.ReadFile(e.tokenFileFlag)
		if err != nil {
			return "", inputErr(fmt.Errorf("read token file: %w", err))
		}
		tok := strings.TrimSpace(string(data))
		if tok == "" {
			return "", inputErr(fmt.Errorf("token file %s is empty", e.tokenFileFlag))
		}
		return tok, nil
	default:
		return strings.TrimSpace(e.getenv(envToken)), nil
	}
}

// hasToken reports whether a token was given in any way, for error hints.
func (e *environment) hasToken() bool {
	return e.tokenFlag != "" || e.tokenFileFlag != "" || e.getenv(envToken) != ""
}

// gatewayForMessages is the gateway URL as error messages may show it.
func (e *environment) gatewayForMessages() string {
	u, err := e.gatewayURL()
	if err != nil {
		return "(invalid gateway URL)"
	}
	return u.Redacted()
}

// client returns the gateway's API, built on first use.
func (e *environment) client() (*apiclient.Client, error) {
	if e.api != nil {
		return e.api, nil
	}
	u, err := e.gatewayURL()
	if err != nil {
		return nil, err
	}
	tok, err := e.token()
	if err != nil {
		return nil, err
	}
	if u.Scheme == "http" && tok != "" && !gatewayclient.LoopbackHost(u.Hostname()) {
		fmt.Fprintf(e.stderr, "warning: sending the token in plaintext to %s; use https:// beyond this host\n", u.Redacted())
	}
	e.api = apiclient.New(apiclient.Config{URL: u, Token: tok, Timeout: e.timeout})
	return e.api, nil
}

// close releases the API client's idle connections.
func (e *environment) close() {
	if e.api != nil {
		e.api.CloseIdleConnections()
	}
}

// notGateway is the answer of something other than a Portcullis gateway,
// if the API client met one (nil otherwise): run reports it instead of the
// call's error.
func (e *environment) notGateway() error {
	if e.api == nil {
		return nil
	}
	if ng := e.api.NotGateway(); ng != nil {
		return fmt.Errorf("%w (check --gateway or %s)", ng, envGateway)
	}
	return nil
}
