// Package benchcli is the command-line shell of the benchmark programs
// that run under a context: the run ends cleanly on Ctrl-C or SIGTERM
// (children stopped, temporary files removed), and the exit status tells a
// mistake in the flags (2) from a run that failed (1). It also writes
// what the programs' common flags ask for: -json's report and
// -memprofile's file.
package benchcli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
)

// UsageError is a mistake in the flags or arguments: the program exits 2.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// Usagef returns a *UsageError with the formatted message.
func Usagef(format string, args ...any) error {
	return &UsageError{fmt.Sprintf(format, args...)}
}

// Main calls run with a context cancelled by an interrupt or SIGTERM. On
// an error it prints "name: error" to stderr and exits: 2 for a
// *UsageError, 1 for anything else.
func Main(name string, run func(ctx context.Context) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	if err == nil {
		return
	}
	fmt.Fprintln(os.Stderr, name+":", err)
	var usage *UsageError
	if errors.As(err, &usage) {
		os.Exit(2)
	}
	os.Exit(1)
}

// WriteJSON writes report to w as -json promises: one indented document.
func WriteJSON(w io.Writer, report any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(report)
}

// WriteProfile writes the pprof profile called name ("allocs", "heap") to
// path, as -memprofile asks. Errors say "memory profile".
func WriteProfile(path, name string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("memory profile: %w", err)
	}
	if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
		f.Close()
		return fmt.Errorf("memory profile: %w", err)
	}
	return f.Close()
}
