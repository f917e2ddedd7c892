package lifecycle

import (
	"context"

	"github.com/portcullis-dev/portcullis/store"
)

// The fleet: what proxies report — their statuses, the decision records
// they ship, the MCP tool definitions they saw — and the retention of
// those records. Package gateway/distribution and gateway/decisions
// decide what to write and when; the writes themselves (one statement or
// short transaction each, not audited: they are observations, not
// changes of configuration) are written once in the store's drivers, and
// lifecycle is their one caller.

// SaveProxyStatuses records proxies' statuses by (Sandbox, ProxyID); see
// store.Tx.SaveProxyStatuses for what is skipped.
func (l *Lifecycle) SaveProxyStatuses(ctx context.Context, statuses []store.ProxyStatus) error {
	return l.st.SaveProxyStatuses(ctx, statuses)
}

// RecordToolDefinitions stores the tool definitions proxies reported and
// returns how many it stored or updated (see
// store.Driver.RecordToolDefinitions).
func (l *Lifecycle) RecordToolDefinitions(ctx context.Context, defs []store.ToolDefinition) (int, error) {
	return l.st.RecordToolDefinitions(ctx, defs)
}

// AppendDecisions stores decision records and returns how many it stored.
func (l *Lifecycle) AppendDecisions(ctx context.Context, records []store.Decision) (int, error) {
	return l.st.AppendDecisions(ctx, records)
}

// PruneDecisions deletes the decision records outside r's bounds (keeping
// denials a proposal names) and returns how many it deleted.
func (l *Lifecycle) PruneDecisions(ctx context.Context, r store.DecisionRetention) (int64, error) {
	return l.st.PruneDecisions(ctx, r)
}
