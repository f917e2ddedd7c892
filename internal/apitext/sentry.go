package apitext

import (
	"fmt"
	"strings"
	"time"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// pairsCell is gaps as "6-7, 10" ("10" for a gap of one), or "none".
func pairsCell(gaps [][2]uint64) string {
	if len(gaps) == 0 {
		return "none"
	}
	var parts []string
	for _, g := range gaps {
		if g[0] == g[1] {
			parts = append(parts, fmt.Sprint(g[0]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", g[0], g[1]))
		}
	}
	return strings.Join(parts, ", ")
}

// GapsCell is a Sentry source's listed gaps, and how many more it has:
// "6-7, 10 (+42 more)".
func GapsCell(gaps []*portcullisv1.SequenceGap, more uint64) string {
	pairs := make([][2]uint64, len(gaps))
	for i, g := range gaps {
		pairs[i] = [2]uint64{g.GetFrom(), g.GetTo()}
	}
	if more > 0 {
		return fmt.Sprintf("%s (+%d more)", pairsCell(pairs), more)
	}
	return pairsCell(pairs)
}

// IngestToAck is how long the action took from ingest to the last proxy's
// ACK, "-" until every connected proxy applied it (or for an action that
// committed nothing).
func IngestToAck(a *portcullisv1.SentryAction) string {
	if a.GetAckedAt() == nil || a.GetReceivedAt() == nil {
		return "-"
	}
	d := a.GetAckedAt().AsTime().Sub(a.GetReceivedAt().AsTime())
	if d < 0 {
		return "-"
	}
	return d.Round(100 * time.Microsecond).String()
}
