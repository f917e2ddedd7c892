//go:build drills

package gateway

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"
)

// pgCluster is a PostgreSQL cluster of the drill's own, in a temporary
// directory on a free port: the drill stops and starts it at will and
// never touches the shared server of internal/pgtest.
//
// As root the server runs as the OS user postgres (runuser; PostgreSQL
// refuses to run as root), which must exist; as anyone else it runs as
// that user. The server binaries come from PORTCULLIS_DRILLS_PG_BIN, else
// the newest /usr/lib/postgresql/*/bin, else initdb on PATH.
type pgCluster struct {
	t              *testing.T
	bin, dir, data string
	port           int
	runAs          string // "" or the OS user for runuser
	uid, gid       int
	stopped        bool
}

// skipOrFail skips outside CI; under CI=true a drill that cannot run
// fails.
func skipOrFail(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

func pgBinDir() string {
	if d := os.Getenv("PORTCULLIS_DRILLS_PG_BIN"); d != "" {
		return d
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(a)))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(b)))
		return va - vb
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "initdb")); err == nil {
			return dirs[i]
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p)
	}
	return ""
}

// newPGCluster initialises a cluster (trust authentication, superuser
// postgres) and starts it. It is stopped (immediate) and removed when the
// test ends.
func newPGCluster(t *testing.T) *pgCluster {
	t.Helper()
	c := &pgCluster{t: t, bin: pgBinDir()}
	if c.bin == "" {
		skipOrFail(t, "no PostgreSQL server binaries (initdb): set PORTCULLIS_DRILLS_PG_BIN")
	}
	dir, err := os.MkdirTemp("", "portcullis-drill-pg-")
	if err != nil {
		t.Fatal(err)
	}
	c.dir, c.data = dir, filepath.Join(dir, "data")
	t.Cleanup(func() { os.RemoveAll(dir) })
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			skipOrFail(t, "running as root and there is no OS user postgres to run a PostgreSQL server as: %v", err)
		}
		c.runAs = u.Username
		c.uid, _ = strconv.Atoi(u.Uid)
		c.gid, _ = strconv.Atoi(u.Gid)
		if err := os.Chown(dir, c.uid, c.gid); err != nil {
			t.Fatal(err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c.port = ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	if out, err := c.run("initdb", "-D", c.data, "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync"); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if !c.stopped {
			c.run("pg_ctl", "stop", "-D", c.data, "-m", "immediate", "-w")
		}
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(c.dir, "server.log"))
			t.Logf("postgres log:\n%s", tail(string(b)))
		}
	})
	c.start()
	return c
}

// run runs a server program, as the cluster's OS user when root.
func (c *pgCluster) run(prog string, args ...string) ([]byte, error) {
	path := filepath.Join(c.bin, prog)
	var cmd *exec.Cmd
	if c.runAs != "" {
		cmd = exec.Command("runuser", append([]string{"-u", c.runAs, "--", path}, args...)...)
	} else {
		cmd = exec.Command(path, args...)
	}
	cmd.Dir = c.dir
	return cmd.CombinedOutput()
}

// start starts the server and returns once it accepts connections.
func (c *pgCluster) start() time.Duration {
	c.t.Helper()
	begin := time.Now()
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c max_connections=200", c.port, c.dir)
	if out, err := c.run("pg_ctl", "start", "-D", c.data, "-l", filepath.Join(c.dir, "server.log"), "-w", "-t", "120", "-o", opts); err != nil {
		b, _ := os.ReadFile(filepath.Join(c.dir, "server.log"))
		c.t.Fatalf("pg_ctl start: %v\n%s\n%s", err, out, tail(string(b)))
	}
	c.stopped = false
	return time.Since(begin)
}

// stop stops the server with pg_ctl's mode: "fast" (sessions ended, a
// clean shutdown) or "immediate" (a crash: recovery from WAL at the next
// start).
func (c *pgCluster) stop(mode string) {
	c.t.Helper()
	if out, err := c.run("pg_ctl", "stop", "-D", c.data, "-m", mode, "-w", "-t", "60"); err != nil {
		c.t.Fatalf("pg_ctl stop -m %s: %v\n%s", mode, err, out)
	}
	c.stopped = true
}

// url is the cluster's database URL.
func (c *pgCluster) url() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
}
