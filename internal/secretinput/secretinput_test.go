package secretinput

import (
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/provider"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestRead(t *testing.T) {
	got, err := Read(provider.TypeBearer, Source{File: []byte("ghp_abc\n"), FileName: "tok"})
	if err != nil || string(got[provider.FieldToken]) != "ghp_abc" || len(got) != 1 {
		t.Fatalf("bearer from a file: %q %v", got, err)
	}
	got, err = Read(provider.TypeBearer, Source{Env: []string{"GH"}, Getenv: env(map[string]string{"GH": "ghp_env"})})
	if err != nil || string(got[provider.FieldToken]) != "ghp_env" {
		t.Fatalf("bearer from the environment: %q %v", got, err)
	}
	file := "# AWS\naccess_key_id=AKIDEXAMPLE\r\n\nsecret_access_key=wJal/rXU=tn\n"
	got, err = Read(provider.TypeAWS, Source{File: []byte(file), FileName: "aws.env",
		Env: []string{"session_token=TOK"}, Getenv: env(map[string]string{"TOK": "st"})})
	if err != nil {
		t.Fatal(err)
	}
	if string(got[provider.FieldAccessKeyID]) != "AKIDEXAMPLE" || string(got[provider.FieldSecretAccessKey]) != "wJal/rXU=tn" || string(got[provider.FieldSessionToken]) != "st" {
		t.Fatalf("aws fields: %q", got)
	}
}

func TestReadRefuses(t *testing.T) {
	for _, c := range []struct {
		name, typ string
		src       Source
		want      string
	}{
		{"nothing", provider.TypeBearer, Source{}, "--secret-file"},
		{"unset variable", provider.TypeBearer, Source{Env: []string{"NOPE"}, Getenv: env(nil)}, "NOPE is not set"},
		{"several fields want pairs", provider.TypeAWS, Source{Env: []string{"AWS_ACCESS_KEY_ID"}, Getenv: env(nil)}, "FIELD=VAR"},
		{"twice", provider.TypeBearer, Source{File: []byte("a"), FileName: "f", Env: []string{"X"}, Getenv: env(map[string]string{"X": "b"})}, "twice"},
		{"a line without =", provider.TypeAWS, Source{File: []byte("AKIDSECRETLINE\n"), FileName: "aws.env"}, "aws.env:1: want FIELD=VALUE"},
		{"an unknown type", "nope", Source{File: []byte("a=AKIDSECRETLINE\n"), FileName: "f"}, `type "nope" is not a provider type`},
		{"a field of another type", provider.TypeAWS, Source{Env: []string{"client_id=X"}, Getenv: env(map[string]string{"X": "AKIDSECRETLINE"})},
			"--secret-env client_id=X: not a field of type aws (it takes: access_key_id, secret_access_key, session_token)"},
		{"a single field type takes its own only", provider.TypeBearer, Source{Env: []string{"tokn=X"}, Getenv: env(map[string]string{"X": "AKIDSECRETLINE"})},
			"not a field of type bearer (it takes: token)"},
	} {
		_, err := Read(c.typ, c.src)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: want an error with %q, got %v", c.name, c.want, err)
		}
		if err != nil && strings.Contains(err.Error(), "AKIDSECRETLINE") {
			t.Errorf("%s: the error quotes the secret: %v", c.name, err)
		}
	}
}

// TestReadNeverQuotesALine: a raw secret given where FIELD=VALUE lines
// are wanted (base64 with padding holds an "=") is refused naming the
// file and line, never the text before the "=" (nearly the whole secret)
// nor after it.
func TestReadNeverQuotesALine(t *testing.T) {
	const secret = "c2VjcmV0LWNsaWVudC1zZWNyZXQtdmFsdWU="
	for _, file := range []string{
		secret + "\n",
		"client_id=app\n" + secret + "\n",
		"client_id=app\n client_secret =" + secret + "\n# done\n" + "cGFkZGVkLXNlY3JldC12YWx1ZQ==\n",
	} {
		_, err := Read(provider.TypeOAuth2ClientCredentials, Source{File: []byte(file), FileName: "crm.env"})
		if err == nil || !strings.Contains(err.Error(), "not a field of type oauth2-client-credentials (it takes: client_id, client_secret)") ||
			!strings.HasPrefix(err.Error(), "crm.env:") {
			t.Errorf("file %q: want crm.env:LINE: not a field of type …, got %v", file, err)
			continue
		}
		for _, leak := range []string{"c2VjcmV0", "LWNsaWVudC1zZWNyZXQtdmFsdWU", "cGFkZGVkLXNlY3JldC12YWx1ZQ"} {
			if strings.Contains(err.Error(), leak) {
				t.Errorf("file %q: the error quotes the secret: %v", file, err)
			}
		}
	}
	// the line number is the secret's
	_, err := Read(provider.TypeOAuth2ClientCredentials, Source{File: []byte("# crm\n\nclient_id=app\n" + secret + "\n"), FileName: "crm.env"})
	if err == nil || !strings.HasPrefix(err.Error(), "crm.env:4: ") {
		t.Errorf("want crm.env:4:, got %v", err)
	}
}
