// Package sqlwhere writes the parts of a query the two engines spell
// differently or every list query repeats: placeholders, and the WHERE
// clause of a filter's optional fields (the decision records' and the
// Sentry events' lists build theirs with it, so an unset field matches
// everything in the same way everywhere).
package sqlwhere

import (
	"strconv"
	"strings"
)

// Dollar writes PostgreSQL's placeholder for the nth argument ($1, $2…).
func Dollar(n int) string { return "$" + strconv.Itoa(n) }

// Question writes SQLite's positional placeholder, the same for every
// argument.
func Question(int) string { return "?" }

// Numbered writes SQLite's numbered placeholder (?1, ?2…), which, unlike
// "?", may appear twice for one argument.
func Numbered(n int) string { return "?" + strconv.Itoa(n) }

// Cond is one field of a filter: Expr (a column and an operator, such as
// "sandbox = ") applied to the next parameter, V, when Set. With Any set
// instead, Expr (such as "status IN ") is applied to a parenthesised list
// of the next parameters, one per element: a field matching any of
// several values (an empty Any is not set).
type Cond struct {
	Expr string
	V    any
	Set  bool
	Any  []any
}

// Where returns " WHERE …" joining the set conditions with AND ("" when
// none is set) and their arguments; param(n) writes the engine's
// placeholder for the nth argument.
func Where(conds []Cond, param func(n int) string) (string, []any) {
	var where []string
	var args []any
	for _, c := range conds {
		if len(c.Any) > 0 {
			ps := make([]string, len(c.Any))
			for i, v := range c.Any {
				args = append(args, v)
				ps[i] = param(len(args))
			}
			where = append(where, c.Expr+"("+strings.Join(ps, ", ")+")")
		} else if c.Set {
			args = append(args, c.V)
			where = append(where, c.Expr+param(len(args)))
		}
	}
	if len(where) == 0 {
		return "", nil
	}
	return ` WHERE ` + strings.Join(where, " AND "), args
}
