package boundary

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Run runs cmd in a new network namespace whose only way out is
// cfg.Proxy (see the package doc), and returns its exit status (128+N
// when signal N killed it). SIGINT, SIGTERM and SIGHUP sent to this process
// are forwarded to cmd (SIGINT not when the terminal sent it to both);
// after SIGTERM, or when ctx ends (cmd is sent SIGTERM), cmd has
// cfg.KillDelay to exit before it is killed. Everything Run made is
// removed before it returns. cmd must not have been started; Run sets its
// SysProcAttr's Pdeathsig and, with cfg.UID, Credential.
func Run(ctx context.Context, cfg Config, cmd *exec.Cmd) (exit int, err error) {
	cfg = cfg.withDefaults()
	proxy := netip.AddrPortFrom(cfg.Proxy.Addr().Unmap(), cfg.Proxy.Port())
	if !proxy.Addr().Is4() {
		return -1, fmt.Errorf("proxy %s: want an IPv4 address", cfg.Proxy)
	}
	if err := checkCapabilities(); err != nil {
		return -1, err
	}
	if err := RemoveStale(); err != nil {
		return -1, err
	}
	s, err := setUp(cfg, proxy, nextID())
	if err != nil {
		return -1, err
	}
	defer func() {
		if cerr := s.tearDown(); cerr != nil && err == nil {
			err = fmt.Errorf("clean up: %w", cerr)
		}
	}()
	return s.run(ctx, cfg, cmd)
}

// checkCapabilities returns ErrPrivileges unless this process holds
// CAP_NET_ADMIN and CAP_SYS_ADMIN (root does).
func checkCapabilities() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capabilities: %w", err)
	}
	for _, c := range []uint{unix.CAP_NET_ADMIN, unix.CAP_SYS_ADMIN} {
		if data[c/32].Effective&(1<<(c%32)) == 0 {
			return ErrPrivileges
		}
	}
	return nil
}

// sandbox is what Run made: the namespace (held by its thread), the link
// and the host's table.
type sandbox struct {
	t     *nsThread
	link  *link
	table string // made when set
}

func setUp(cfg Config, proxy netip.AddrPort, id string) (s *sandbox, err error) {
	s = &sandbox{}
	if s.t, err = newNSThread(); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			s.tearDown()
		}
	}()
	name := linkPrefix + id
	// An id is this process's own: what holds it is stale (an earlier
	// process of this pid that was killed).
	if err := removeLink(name); err != nil {
		return s, privileges(err)
	}
	subnet, err := pickSubnet(cfg.Range)
	if err != nil {
		return s, err
	}
	alias := fmt.Sprintf("portcullis run %s pid %d", cfg.Sandbox, os.Getpid())
	if s.link, err = addLink(s.t, name, alias, subnet); err != nil {
		return s, err
	}
	switch {
	case proxy.Addr().IsUnspecified():
		proxy = netip.AddrPortFrom(s.link.host.Addr(), proxy.Port())
	case proxy.Addr().IsLoopback():
		// The host may DNAT what arrives on the link to 127.0.0.1.
		if err := sysctls(map[string]string{"net/ipv4/conf/" + name + "/route_localnet": "1"}); err != nil {
			return s, err
		}
	}
	if err := nsRules(s.t.fd, s.link.host.Addr()); err != nil {
		return s, privileges(err)
	}
	table := tablePrefix + id
	if err := removeTable(table); err != nil { // stale, as the link above
		return s, privileges(err)
	}
	s.table = table
	if err := hostRules(table, name, proxy); err != nil {
		return s, privileges(err)
	}
	return s, nil
}

// tearDown kills what still runs in the namespace and removes the link,
// the table and the namespace.
func (s *sandbox) tearDown() error {
	var errs []error
	if ino, err := s.t.ino(); err != nil {
		errs = append(errs, err)
	} else if err := killIn(func(_ int, i uint64) bool { return i == ino }); err != nil {
		errs = append(errs, err)
	}
	if s.link != nil {
		errs = append(errs, s.link.remove())
	}
	if s.table != "" {
		errs = append(errs, removeTable(s.table))
	}
	s.t.close()
	return errors.Join(errs...)
}

// run starts cmd from the namespace's thread and waits for it there (its
// Pdeathsig fires when that thread ends), forwarding signals meanwhile.
func (s *sandbox) run(ctx context.Context, cfg Config, cmd *exec.Cmd) (int, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if cfg.UID != nil {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: *cfg.UID, Gid: *cfg.GID}
	}
	if cmd.WaitDelay == 0 {
		// A process cmd left behind may hold its output open; it is
		// killed once cmd exits, but only after Wait returns.
		cmd.WaitDelay = time.Second
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, unix.SIGINT, unix.SIGTERM, unix.SIGHUP)
	defer signal.Stop(sigs)

	started := make(chan error, 1)
	exited := make(chan error, 1)
	s.t.do <- func() {
		err := cmd.Start()
		started <- err
		if err == nil {
			exited <- cmd.Wait()
		}
	}
	if err := <-started; err != nil {
		return -1, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	done := ctx.Done()
	var kill <-chan time.Time
	for {
		select {
		case err := <-exited:
			return status(cmd, err)
		case sig := <-sigs:
			if sig == unix.SIGINT && terminalSentIt(cmd) {
				continue
			}
			cmd.Process.Signal(sig)
			if sig == unix.SIGTERM && kill == nil {
				kill = time.After(cfg.KillDelay)
			}
		case <-done:
			done = nil
			cmd.Process.Signal(unix.SIGTERM)
			if kill == nil {
				kill = time.After(cfg.KillDelay)
			}
		case <-kill:
			cmd.Process.Kill()
		}
	}
}

// status is cmd's exit status from its Wait's error.
func status(cmd *exec.Cmd, err error) (int, error) {
	ps := cmd.ProcessState
	if ps == nil {
		return -1, err
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	return ps.ExitCode(), nil
}

// terminalSentIt reports whether a SIGINT this process got came from its
// terminal, which sent it to cmd too: cmd is in this process's group and
// that group is the terminal's foreground.
func terminalSentIt(cmd *exec.Cmd) bool {
	if cmd.SysProcAttr.Setpgid || cmd.SysProcAttr.Setsid {
		return false
	}
	fg, err := unix.IoctlGetInt(0, unix.TIOCGPGRP)
	return err == nil && fg == unix.Getpgrp()
}
