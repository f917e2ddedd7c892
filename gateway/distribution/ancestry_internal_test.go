package distribution

import (
	"fmt"
	"slices"
	"testing"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// A version sends the hashes a proxy missed from the ones it keeps, and
// reads older ones once for every stream that needs as many or fewer.
func TestAncestryReadsOnce(t *testing.T) {
	hash := func(v uint32) string { return fmt.Sprintf("h%d", v) }
	span := func(from, to uint32) []string {
		var out []string
		for v := from; v <= to; v++ {
			out = append(out, hash(v))
		}
		return out
	}
	sv := &signedVersion{policy: &portcullisv1.SignedPolicy{Version: 40}, recent: span(40-ancestryKept, 39)}
	var reads [][2]uint32
	read := func(from, to uint32) ([]string, error) {
		reads = append(reads, [2]uint32{from, to})
		return span(from, to), nil
	}
	for _, from := range []uint32{39, 40 - ancestryKept, 5, 10, 5, 3, 20} {
		got, err := sv.ancestry(from, read)
		if err != nil {
			t.Fatal(err)
		}
		if want := span(from, 39); !slices.Equal(got, want) {
			t.Fatalf("ancestry from %d = %v, want %v", from, got, want)
		}
	}
	if want := [][2]uint32{{5, 39}, {3, 39}}; !slices.Equal(reads, want) {
		t.Fatalf("reads %v, want %v", reads, want)
	}
}
