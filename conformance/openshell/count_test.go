package openshell

import (
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// TestDocCounts checks the table of tests and cases per source file in
// doc.go against the tables.
func TestDocCounts(t *testing.T) {
	var srcs []string
	for _, l := range [][]decideCase{opaL4Cases, opaL7Cases, opaActionCases, opaHostCases, opaUninspectedCases, opaConfigCases,
		queryCases, addrCases, declaredCases, loopbackCases} {
		for _, c := range l {
			srcs = append(srcs, c.Source)
		}
	}
	for _, l := range [][]validateCase{l7ValidateCases, opaValidateCases, policyLibCases, e2eCases, linkLocalCases,
		ambiguityCases, allowedIPsValidateCases, l7ModCases, l7ModMCPCases, l7ModMoreCases} {
		for _, c := range l {
			srcs = append(srcs, c.Source)
		}
	}
	for _, l := range [][]proxyCase{restProxyCases, jsonrpcCases, forwardProxyCases} {
		for _, c := range l {
			srcs = append(srcs, c.Source)
		}
	}
	for _, c := range pathCases {
		srcs = append(srcs, c.Source)
	}
	for _, c := range proverCases {
		srcs = append(srcs, c.Source)
	}
	for _, c := range metadataCases {
		srcs = append(srcs, c.Source)
	}
	for _, c := range roundTripCases {
		srcs = append(srcs, c.Source)
	}
	for _, c := range connectCases {
		srcs = append(srcs, c.Source)
	}
	for _, c := range advisorCases {
		srcs = append(srcs, c.Source)
	}
	for _, c := range wsCases {
		srcs = append(srcs, c.Source)
	}

	cases := map[string]int{}
	tests := map[string]map[string]bool{}
	for _, s := range srcs {
		file, name, ok := strings.Cut(s, ": ")
		if !ok || name == "" {
			t.Errorf("Source %q does not name a file and a test", s)
			continue
		}
		cases[file]++
		if tests[file] == nil {
			tests[file] = map[string]bool{}
		}
		tests[file][name] = true
	}
	var want []string
	nt, nc := 0, 0
	for file := range cases {
		want = append(want, fmt.Sprintf("%s %d (%d)", file, len(tests[file]), cases[file]))
		nt += len(tests[file])
		nc += cases[file]
	}
	sort.Strings(want)
	want = append(want, fmt.Sprintf("total %d (%d)", nt, nc))

	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile(`(?m)^//\t(\S+)\s+(\d+) \((\d+)\)$`)
	var got []string
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		got = append(got, fmt.Sprintf("%s %s (%s)", m[1], m[2], m[3]))
	}
	sort.Strings(got[:len(got)-1])
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("doc.go's table is out of date; the tables hold:\n%s", strings.Join(want, "\n"))
	}
}
