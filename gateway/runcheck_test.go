package gateway

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestRunConfigCheck: the settings Run refuses before opening anything
// are SettingErrors naming the flag; a zero is the default unless the
// operator gave every bound (Explicit).
func TestRunConfigCheck(t *testing.T) {
	for _, c := range []struct {
		cfg  RunConfig
		want string
	}{
		{RunConfig{Server: Config{TLSCertFile: "c.pem"}}, "--tls-cert and --tls-key"},
		{RunConfig{Server: Config{DecisionRate: 5, DecisionBurst: 9}}, "--decision-burst 9"},
		{RunConfig{Explicit: true}, "--decision-max-age 0"},
		{RunConfig{Explicit: true, Server: Config{DecisionMaxAge: -1, DecisionMaxPerSandbox: -1, DecisionRate: -1, QuarantineBudget: -1, QuarantineBudgetPerSource: -1}}, "--sentry-max-age 0 would act on no quarantine"},
		{RunConfig{Explicit: true, Server: Config{DecisionMaxAge: -1, DecisionMaxPerSandbox: -1, DecisionRate: -1, QuarantineBudget: -1, QuarantineBudgetPerSource: -1,
			SentryMaxAge: -1, SentryRetention: -1}}, "--max-held-calls 0"},
		{RunConfig{Server: Config{MaxHeldCalls: -1}}, "--max-held-calls -1"},
		{RunConfig{Server: Config{HeldCallRetention: -time.Hour}}, "--held-call-retention -1h0m0s"},
		{RunConfig{SentryDatabaseURL: "sqlite:///x"}, "--sentry-database-url"},
		{RunConfig{Server: Config{WebhookURL: "ftp://x"}}, "--webhook-url \"ftp://x\": want an http(s) URL"},
		{RunConfig{Server: Config{AuditWebhookURL: "https://x"}}, "--audit-webhook-url needs PORTCULLIS_WEBHOOK_SECRET"},
		{RunConfig{Server: Config{BootstrapToken: "short"}}, "at least 32"},
	} {
		err := c.cfg.Check()
		if _, ok := errors.AsType[*SettingError](err); !ok || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want a SettingError saying %q", c.cfg, err, c.want)
		}
	}
	if err := (RunConfig{}).Check(); err != nil {
		t.Errorf("the defaults: %v", err)
	}
}
