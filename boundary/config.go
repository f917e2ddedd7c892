package boundary

import (
	"context"
	"errors"
	"io"
	"net/netip"
	"os/exec"
	"strconv"
	"time"
)

// DefaultProxy is the proxy's transparent listener run points a sandbox at
// when Config.Proxy is not set: TCP and DNS over UDP on the same address.
var DefaultProxy = netip.MustParseAddrPort("127.0.0.1:3129")

// DefaultRange is where run carves a sandbox's /30 from when Config.Range
// is not set: shared address space (RFC 6598) hosts rarely route.
var DefaultRange = netip.MustParsePrefix("100.127.0.0/16")

// ErrPrivileges is Run's error when it may not create the namespace, the
// link or the rules.
var ErrPrivileges = errors.New("portcullis run needs root or CAP_NET_ADMIN (it creates a network namespace, " +
	"a veth pair and nftables rules; creating the namespace takes CAP_SYS_ADMIN too)")

// ErrNoRange is Run's error when every /30 of the range is in use by the
// host's addresses or routes.
var ErrNoRange = errors.New("no free /30 for the sandbox's link")

// Config is a sandbox namespace Run makes.
type Config struct {
	// Proxy is the proxy's transparent listener: every TCP connection from
	// the namespace is redirected to it, and every UDP datagram to port 53
	// to the same address and port. Default DefaultProxy. An unspecified
	// address (0.0.0.0) means the host side of the link.
	Proxy netip.AddrPort
	// UID and GID, when set, are the user and group the command runs as
	// (no supplementary groups). GID defaults to UID when only UID is set.
	UID, GID *uint32
	// Sandbox names the sandbox, for people reading the host's links: the
	// host side's alias is "portcullis run <Sandbox> pid <pid>".
	Sandbox string
	// Range is where the link's /30 is taken from. Default DefaultRange.
	Range netip.Prefix
	// KillDelay is how long the command has to exit after run's context
	// ends (it is sent SIGTERM) before it is killed. Default 5s.
	KillDelay time.Duration
}

// SidecarConfig is a namespace a container runtime made with the proxy in
// it, for Rules.
type SidecarConfig struct {
	// Proxy is the proxy's transparent listener. Default DefaultProxy.
	Proxy netip.AddrPort
	// ProxyUID is the user the proxy runs as: its traffic goes out
	// directly.
	ProxyUID uint32
}

func (c Config) withDefaults() Config {
	if !c.Proxy.IsValid() {
		c.Proxy = DefaultProxy
	}
	if !c.Range.IsValid() {
		c.Range = DefaultRange
	}
	if c.KillDelay <= 0 {
		c.KillDelay = 5 * time.Second
	}
	if c.UID != nil && c.GID == nil {
		c.GID = c.UID
	}
	return c
}

// Exec is Run of the command args (a program and its arguments, looked up
// in PATH) with the streams given.
func Exec(ctx context.Context, cfg Config, args []string, stdin io.Reader, stdout, stderr io.Writer) (exit int, err error) {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	return Run(ctx, cfg, cmd)
}

// ParseID reads a user or group id (a number) for Config.UID and GID.
func ParseID(s string) (*uint32, error) {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return nil, errors.New("want a number")
	}
	id := uint32(n)
	return &id, nil
}
