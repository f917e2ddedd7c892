package apitext

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
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

// sentryStatuses are the values of a Sentry action's status (the store's
// Sentry* constants), for sentry actions --status.
var sentryStatuses = []string{"frozen", "held", "dry_run", "already_frozen", "failed", "dismissed", "applied", "stale"}

// CheckSentryStatuses refuses a --status no Sentry action has.
func CheckSentryStatuses(statuses []string) error {
	for _, s := range statuses {
		if !slices.Contains(sentryStatuses, s) {
			return fmt.Errorf("--status must be one of %s, got %q", strings.Join(sentryStatuses, ", "), s)
		}
	}
	return nil
}

// SentryDecision reads sentry decide's ID, --freeze or --dismiss and
// --reason: the action's id and the decision the API takes, or what is
// wrong with them.
func SentryDecision(id string, freeze, dismiss bool, reason string) (int64, string, error) {
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil || n < 1 || strconv.FormatInt(n, 10) != id {
		return 0, "", fmt.Errorf("ID must be a sentry action id (1 or more), got %q", id)
	}
	switch {
	case freeze && dismiss:
		return 0, "", errors.New("give --freeze or --dismiss, not both")
	case !freeze && !dismiss:
		return 0, "", errors.New("portcullis sentry decide needs --freeze or --dismiss")
	case strings.TrimSpace(reason) == "":
		return 0, "", errors.New("portcullis sentry decide needs --reason")
	case freeze:
		return n, "freeze", nil
	}
	return n, "dismiss", nil
}

// SentryDecided writes the line sentry decide prints about the action x
// it decided.
func SentryDecided(w io.Writer, x *portcullisv1.SentryAction) error {
	line := fmt.Sprintf("sentry action %d %s: sandbox %s left as it was", x.GetId(), Dash(x.GetStatus()), Field(x.GetSandbox()))
	if x.GetStatus() == "applied" { // frozen after all
		line = fmt.Sprintf("sentry action %d applied: sandbox %s frozen, deny-all is version %s", x.GetId(), Field(x.GetSandbox()), VersionCell(x.GetVersion()))
	}
	_, err := fmt.Fprintln(w, line)
	return err
}

// SentryKeySet writes what sentry key set prints: the source and its
// key's fingerprint.
func SentryKeySet(w io.Writer, res *portcullisv1.SetSentrySourceKeyResponse) error {
	fmt.Fprintf(w, "source %s: key set; its events must now be signed\n", Field(res.GetSource()))
	return Fields(w, "fingerprint", "sha256 "+res.GetFingerprint())
}

// SentryKeyDeleted writes what sentry key delete prints.
func SentryKeyDeleted(w io.Writer, source string) error {
	_, err := fmt.Fprintf(w, "source %s: key deleted; its events need no signature\n", Field(source))
	return err
}
