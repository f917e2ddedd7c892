package main

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/boundary"
)

// runProbeEnv makes this test binary, run as portcullis run's command,
// dial the address it names and print what answered (runProbeMain).
const runProbeEnv = "PORTCULLIS_TEST_RUN_PROBE"

// runProbeMain dials TCP to addr and prints the first line it reads.
func runProbeMain(addr string) int {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	defer c.Close()
	line, _ := bufio.NewReader(c).ReadString('\n')
	fmt.Print(line)
	return 0
}

// TestRunUsage: what run refuses before it makes anything.
func TestRunUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run"}, "error: run needs a command: portcullis run -- CMD [ARG...]\n"},
		{[]string{"run", "--proxy", "localhost", "--", "true"}, `error: invalid argument "localhost" for "--proxy" flag`},
		{[]string{"run", "--uid", "nobody", "--", "true"}, `error: invalid argument "nobody" for "--uid" flag: want a number`},
	} {
		_, stderr, code := runCLI(t, tc.args...)
		if code != exitInvalid || !strings.HasPrefix(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d, %q", tc.args, code, stderr, exitInvalid, tc.want)
		}
	}
}

// TestRunPrintRules: --print-rules prints Rules for the flags given.
func TestRunPrintRules(t *testing.T) {
	out, stderr, code := runCLI(t, "run", "--print-rules", "--proxy", "10.0.0.5:3130", "--proxy-uid", "1000")
	want := boundary.Rules(boundary.SidecarConfig{Proxy: netip.MustParseAddrPort("10.0.0.5:3130"), ProxyUID: 1000})
	if code != 0 || out != want || stderr != "" {
		t.Errorf("exit %d, stderr %q, stdout\n%s\nwant\n%s", code, stderr, out, want)
	}
	if out, _, _ := runCLI(t, "run", "--print-rules"); !strings.Contains(out, "meta skuid 65532 return") {
		t.Errorf("default --proxy-uid: want the proxy image's nonroot user (65532) in\n%s", out)
	}
}
