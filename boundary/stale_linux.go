package boundary

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Names of a run's link and table: linkPrefix+id, tablePrefix+id.
const (
	linkPrefix  = "pcr"
	tablePrefix = "portcullis_run_"
)

// runs counts this process's runs: the first one's id is the pid, later
// ones add "n" and the count (base 36), within IFNAMSIZ.
var runs atomic.Uint64

func nextID() string {
	id := strconv.Itoa(os.Getpid())
	if n := runs.Add(1) - 1; n > 0 {
		id += "n" + strconv.FormatUint(n%(36*36*36), 36)
	}
	return id
}

// pidOf is the pid of the run that named a link or table name, whose
// prefix is prefix; ok is false for a name no run made.
func pidOf(name, prefix string) (pid int, ok bool) {
	id, found := strings.CutPrefix(name, prefix)
	if !found {
		return 0, false
	}
	digits, rest, _ := strings.Cut(id, "n")
	pid, err := strconv.Atoi(digits)
	if err != nil || pid <= 0 {
		return 0, false
	}
	if _, err := strconv.ParseUint(rest, 36, 32); rest != "" && err != nil {
		return 0, false
	}
	return pid, true
}

// gone reports whether no process has the pid, or only a zombie (an
// earlier run that was killed). This process's own pid is never gone: its
// other runs are live.
func gone(pid int) bool {
	if pid == os.Getpid() {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	// pid (comm) S ...: the state follows the last ')'.
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}

// RemoveStale deletes what runs that are gone left behind: pcr<id> links
// (killing what still runs in their namespace, which kept it alive) and
// portcullis_run_<id> tables. Run calls it first.
func RemoveStale() error {
	links, err := netlink.LinkList()
	if err != nil {
		return privileges(fmt.Errorf("list links: %w", err))
	}
	var errs []error
	for _, l := range links {
		a := l.Attrs()
		pid, ok := pidOf(a.Name, linkPrefix)
		if !ok || l.Type() != "veth" || !gone(pid) {
			continue
		}
		if a.NetNsID >= 0 {
			if err := killNSID(a.NetNsID); err != nil {
				errs = append(errs, fmt.Errorf("stale link %s: %w", a.Name, err))
			}
		}
		if err := removeLink(a.Name); err != nil {
			errs = append(errs, privileges(err))
		}
	}
	c, err := nftables.New()
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("nftables: %w", err))...)
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return errors.Join(append(errs, privileges(fmt.Errorf("list nftables tables: %w", err)))...)
	}
	for _, t := range tables {
		if pid, ok := pidOf(t.Name, tablePrefix); ok && gone(pid) {
			if err := removeTable(t.Name); err != nil {
				errs = append(errs, privileges(err))
			}
		}
	}
	return errors.Join(errs...)
}

// killNSID kills every process in the network namespace the host knows
// by the id nsid (a stale link's peer namespace).
func killNSID(nsid int) error {
	inos := map[uint64]bool{} // namespaces looked at: is it nsid's?
	return killIn(func(pid int, ino uint64) bool {
		if match, seen := inos[ino]; seen {
			return match
		}
		fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/net", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return false
		}
		defer unix.Close(fd)
		id, err := netlink.GetNetNsIdByFd(fd)
		inos[ino] = err == nil && id == nsid
		return inos[ino]
	})
}

// killIn kills every process for which in(pid, its network namespace's
// inode) is true, and waits for them to die (up to 2s in all), rescanning
// until none is left: one may have forked in between.
func killIn(in func(pid int, ino uint64) bool) error {
	deadline := time.Now().Add(2 * time.Second)
	for {
		var pids []int
		for pid, ino := range processes() {
			if in(pid, ino) {
				pids = append(pids, pid)
			}
		}
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v still run in the namespace", pids)
		}
		for _, pid := range pids {
			killAndWait(pid, time.Until(deadline))
		}
	}
}

// killAndWait sends SIGKILL to pid through a pidfd (no pid reuse race)
// and waits for it to exit, up to d.
func killAndWait(pid int, d time.Duration) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return // gone already
	}
	defer unix.Close(fd)
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil {
		return
	}
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		_, err := unix.Poll(fds, max(int(d.Milliseconds()), 1))
		if !errors.Is(err, unix.EINTR) {
			return
		}
	}
}

// processes yields each process's pid and the inode of its network
// namespace (zombies and processes gone meanwhile are skipped).
func processes() func(yield func(int, uint64) bool) {
	return func(yield func(int, uint64) bool) {
		entries, err := os.ReadDir("/proc")
		if err != nil {
			return
		}
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == os.Getpid() {
				continue
			}
			var st unix.Stat_t
			if unix.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &st) != nil {
				continue
			}
			if !yield(pid, st.Ino) {
				return
			}
		}
	}
}
