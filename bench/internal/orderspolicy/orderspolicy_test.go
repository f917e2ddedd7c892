package orderspolicy

import (
	"testing"

	"github.com/portcullis-dev/portcullis/policy"
)

// The fragments make a valid policy when a fixture joins them the way
// the benchmarks do, so a change to them fails here, not mid-benchmark.
func TestFragmentsMakeAPolicy(t *testing.T) {
	doc := Head + `      - host: orders.example.com
        port: 443
        path: /mcp
        protocol: mcp
        rules:
          - allow: { method: initialize }
` + ToolRules
	if _, _, err := policy.Parse([]byte(doc)); err != nil {
		t.Fatalf("Head + endpoint + ToolRules does not parse: %v\n%s", err, doc)
	}
}
