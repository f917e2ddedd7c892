package notify_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/gateway/notify"
)

// TestVerifyWebhook: the signature covers the timestamp and the body.
func TestVerifyWebhook(t *testing.T) {
	body := []byte(`{"text":"x"}`)
	m := hmac.New(sha256.New, []byte("k"))
	m.Write([]byte("1700000000." + string(body)))
	sig := "sha256=" + hex.EncodeToString(m.Sum(nil))
	if !notify.VerifyWebhook([]byte("k"), sig, "1700000000", body) {
		t.Fatal("a correct signature did not verify")
	}
	for name, ok := range map[string]bool{
		"other key":       notify.VerifyWebhook([]byte("K"), sig, "1700000000", body),
		"other timestamp": notify.VerifyWebhook([]byte("k"), sig, "1700000001", body),
		"other body":      notify.VerifyWebhook([]byte("k"), sig, "1700000000", []byte(`{"text":"y"}`)),
		"no prefix":       notify.VerifyWebhook([]byte("k"), strings.TrimPrefix(sig, "sha256="), "1700000000", body),
	} {
		if ok {
			t.Errorf("%s: verified", name)
		}
	}
}
