package main

import (
	"context"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	"github.com/portcullis-dev/portcullis/internal/apiclient"
	"github.com/portcullis-dev/portcullis/internal/apitext"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// --wait: the commands that commit a policy version (proposals approve,
// policy set, policy rollback, sandbox freeze and unfreeze) can follow
// the version to the sandbox's proxies (apiclient.AwaitEnforcement) and
// return once every one ACKed it (exit 0), or at the first NACK or when
// --wait-timeout passes (exit 1, naming the proxies). With -o json the
// answer gains "enforcement".

// defaultWaitTimeout is --wait-timeout's default.
const defaultWaitTimeout = 30 * time.Second

// waitHelp is the paragraph the help of every command with --wait shares.
const waitHelp = `With --wait the command then follows the version it committed to the
sandbox's proxies: those connected to this gateway, then those the fleet
knows (connected to another replica, or seen in the last minute, as one
failing over from a replica that died is): it returns once every one has
ACKed it (exit 0), and exits 1 naming the proxies at the first NACK (with
its error) or when --wait-timeout (default 30s) passes with some still
pending. With no proxy to wait for it says so on stderr and exits 0. With
-o json the answer gains "enforcement": {version, acked, nacked, pending,
total, ms, proxies}.`

// waitFlags are --wait and --wait-timeout.
type waitFlags struct {
	wait    bool
	timeout time.Duration
}

func addWaitFlags(cmd *cobra.Command, w *waitFlags) {
	cmd.Flags().BoolVar(&w.wait, "wait", false, "then wait until every proxy of the sandbox ACKed the version")
	cmd.Flags().DurationVar(&w.timeout, "wait-timeout", defaultWaitTimeout, "with --wait, give up (exit 1) after `DURATION`")
}

// check refuses --wait-timeout without --wait, or not positive.
func (w *waitFlags) check(cmd *cobra.Command) error {
	if cmd.Flags().Changed("wait-timeout") && !w.wait {
		return usagef("--wait-timeout needs --wait")
	}
	if w.timeout <= 0 {
		return usagef("--wait-timeout must be positive, got %s", w.timeout)
	}
	return nil
}

// unaryWait is unary for a command that commits a version: with --wait it
// then follows the version (named by version) to the sandbox's proxies,
// prints the answer with where the version stands, and fails unless every
// connected proxy ACKed it.
func unaryWait[R proto.Message](ctx context.Context, env *environment, w *waitFlags, call func(api *apiclient.Client) (R, error), version func(R) (sandbox string, v uint32), text func(R) error) error {
	if !w.wait {
		return unary(env, call, text)
	}
	api, res, err := callGateway(env, call)
	if err != nil {
		return err
	}
	sandbox, v := version(res)
	return env.printEnforced(res, func() error { return text(res) }, awaitVersion(ctx, env, api, sandbox, v, w.timeout))
}

// enforced is the outcome of a wait: where the version stands (nil when
// there was nothing to follow or the watch failed) and why it failed.
type enforced struct {
	e   *portcullisv1.Enforcement
	err error
}

// awaitVersion waits for version of sandbox (a version 0 is none: nothing
// was committed), saying on stderr when there is no proxy to wait for.
func awaitVersion(ctx context.Context, env *environment, api *apiclient.Client, sandbox string, version uint32, timeout time.Duration) enforced {
	var w enforced
	var timedOut bool
	if version > 0 {
		w.e, timedOut, w.err = api.AwaitEnforcement(ctx, sandbox, version, timeout)
	}
	w.err = apitext.Waited(env.stderr, sandbox, version, w.e, timedOut, timeout, w.err)
	return w
}

// printEnforced prints a committed answer res (with text, or as JSON with
// "enforcement" added) and where its version stands, and returns the
// wait's error.
func (env *environment) printEnforced(res proto.Message, text func() error, w enforced) error {
	if env.jsonOutput() {
		if err := env.printJSONEnforced(res, w.e); err != nil {
			return err
		}
		return w.err
	}
	if err := text(); err != nil {
		return err
	}
	if w.e != nil {
		apitext.Enforcement(env.stdout, w.e)
	}
	return w.err
}

// printJSONEnforced prints m as -o json does, with "enforcement": e
// added (left out when e is nil), every counter present even when 0.
func (env *environment) printJSONEnforced(m proto.Message, e *portcullisv1.Enforcement) error {
	b, err := apiclient.MarshalJSONWith(jsonOptions, m, "enforcement", e)
	if err != nil {
		return err
	}
	return env.writeJSON(b)
}
