// Command pie releases its executable's pages (exetrim.Release) and then
// uses what a position-independent executable keeps in relocated
// read-only data: interfaces, maps, formatted output.
package main

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/portcullis-dev/portcullis/internal/exetrim"
)

func main() {
	n, err := exetrim.Release()
	if err != nil || n == 0 {
		fmt.Fprintln(os.Stderr, "release:", n, err)
		os.Exit(1)
	}
	m := map[string]fmt.Stringer{"b": &strings.Builder{}, "a": &strings.Builder{}}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var err2 error = fmt.Errorf("wrapped: %w", os.ErrNotExist)
	fmt.Printf("ok after releasing %d bytes: %v %v\n", n, keys, err2)
}
