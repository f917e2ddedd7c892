package decisionsql

import (
	"reflect"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/internal/sqlwhere"
)

func TestSelect(t *testing.T) {
	from := `SELECT id, received_at, ` + strings.Join(Columns, ", ") + ` FROM decisions`
	for _, tc := range []struct {
		f      store.DecisionFilter
		param  func(int) string
		q      string
		args   []any
		newest bool
	}{
		{store.DecisionFilter{}, sqlwhere.Dollar, from + ` ORDER BY id`, nil, false},
		{store.DecisionFilter{Limit: 5}, sqlwhere.Dollar, from + ` ORDER BY id DESC LIMIT $1`, []any{5}, true},
		{store.DecisionFilter{AfterID: -1, Limit: 5}, sqlwhere.Question, from + ` ORDER BY id LIMIT ?`, []any{5}, false},
		{
			store.DecisionFilter{Sandbox: "box", Decision: "deny", DenialID: "d1", AfterID: 7, Limit: 2}, sqlwhere.Dollar,
			from + ` WHERE sandbox = $1 AND decision = $2 AND denial_id = $3 AND id > $4 ORDER BY id LIMIT $5`,
			[]any{"box", "deny", "d1", int64(7), 2}, false,
		},
		{
			store.DecisionFilter{Decision: "allow", AfterID: 3}, sqlwhere.Question,
			from + ` WHERE decision = ? AND id > ? ORDER BY id`, []any{"allow", int64(3)}, false,
		},
	} {
		q, args, newest := Select(tc.f, tc.param)
		if q != tc.q || !reflect.DeepEqual(args, tc.args) || newest != tc.newest {
			t.Errorf("Select(%+v) = %q, %v, %v; want %q, %v, %v", tc.f, q, args, newest, tc.q, tc.args, tc.newest)
		}
	}
}
