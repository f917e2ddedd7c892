package decision_test

import (
	"reflect"
	"testing"

	"github.com/portcullis-dev/portcullis/decision"
)

// KindOf and Kind.Of name the same fields: a kind made into a record and
// read back is itself, every field set.
func TestKindRoundTrip(t *testing.T) {
	var k decision.Kind
	v := reflect.ValueOf(&k).Elem()
	for i := range v.NumField() {
		switch f := v.Field(i); f.Kind() {
		case reflect.String:
			f.SetString(v.Type().Field(i).Name)
		case reflect.Int:
			f.SetInt(443)
		case reflect.Bool:
			f.SetBool(true)
		default:
			t.Fatalf("field %s: the test knows no %s", v.Type().Field(i).Name, f.Kind())
		}
	}
	r := k.Of()
	if got := decision.KindOf(&r); got != k {
		t.Errorf("KindOf(k.Of()) = %+v, want %+v", got, k)
	}
}

// A record counts as one decision, a summary as the decisions it stands
// for; only denials fold into summaries.
func TestCountAndFolds(t *testing.T) {
	one := decision.Record{Decision: decision.Deny}
	sum := decision.Record{Decision: decision.Deny, Summary: &decision.Summary{Count: 600}}
	if one.Count() != 1 || sum.Count() != 600 {
		t.Errorf("counts %d and %d, want 1 and 600", one.Count(), sum.Count())
	}
	for verdict, want := range map[string]bool{decision.Allow: false, decision.Audit: false, decision.Deny: true, decision.RateLimited: true} {
		if decision.Folds(verdict) != want {
			t.Errorf("Folds(%s) = %v, want %v", verdict, !want, want)
		}
	}
}
