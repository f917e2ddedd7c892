//go:build !linux

package boundary

import (
	"context"
	"errors"
	"os/exec"
)

// errLinux is Run's error on other systems.
var errLinux = errors.New("portcullis run needs Linux: it makes a network namespace and nftables rules")

// Run needs Linux; here it returns an error.
func Run(context.Context, Config, *exec.Cmd) (int, error) { return -1, errLinux }

// RemoveStale needs Linux; here it returns an error.
func RemoveStale() error { return errLinux }
