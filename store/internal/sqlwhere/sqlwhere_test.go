package sqlwhere

import (
	"reflect"
	"testing"
)

func TestWhere(t *testing.T) {
	for _, c := range []struct {
		conds []Cond
		param func(int) string
		where string
		args  []any
	}{
		{nil, Dollar, "", nil},
		{[]Cond{{Expr: "a = ", V: 1}, {Expr: "b IN ", Any: []any{}}}, Dollar, "", nil},
		{[]Cond{{Expr: "a = ", V: 1, Set: true}, {Expr: "b = ", V: 2}, {Expr: "c >= ", V: 3, Set: true}}, Dollar,
			" WHERE a = $1 AND c >= $2", []any{1, 3}},
		{[]Cond{{Expr: "a = ", V: 1, Set: true}, {Expr: "s IN ", Any: []any{"x", "y"}}, {Expr: "c >= ", V: 3, Set: true}}, Numbered,
			" WHERE a = ?1 AND s IN (?2, ?3) AND c >= ?4", []any{1, "x", "y", 3}},
		{[]Cond{{Expr: "s IN ", Any: []any{"x"}}}, Question, " WHERE s IN (?)", []any{"x"}},
	} {
		where, args := Where(c.conds, c.param)
		if where != c.where || !reflect.DeepEqual(args, c.args) {
			t.Errorf("Where(%+v) = %q, %v; want %q, %v", c.conds, where, args, c.where, c.args)
		}
	}
}
