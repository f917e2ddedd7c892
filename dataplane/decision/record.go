package decision

import record "github.com/portcullis-dev/portcullis/decision"

// The verdicts of Record.Decision, under the names the proxy has always
// used (decision.Allow and the others).
const (
	Allow       = record.Allow
	Deny        = record.Deny
	Audit       = record.Audit
	RateLimited = record.RateLimited
)

// Record is one decision of the proxy: the record both roles share
// (package decision at the module's root). The proxy bounds its size
// (Bound), folds floods of denials into summaries (Summarizer), keeps the
// recent ones (Log) and writes them as JSON lines.
type Record = record.Record

// Cut and Summary are a record's, as the proxy names them.
type (
	Cut     = record.Cut
	Summary = record.Summary
)
