package credentials

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/portcullis-dev/portcullis/policy"
	"github.com/portcullis-dev/portcullis/provider"
)

// Token fetches.
const (
	fetchTimeout = 10 * time.Second
	// expiryMargin: a token is fetched again this long before it expires,
	// so none expires on its way upstream.
	expiryMargin = 30 * time.Second
	// noExpiry is how long a token without expires_in is kept.
	noExpiry = 5 * time.Minute
	// maxTokenResponse bounds a token server's answer.
	maxTokenResponse = 64 << 10
	// failureMemory: a failed fetch is answered, without another, this
	// long (a down token server is not asked by every request).
	failureMemory = 5 * time.Second
	// maxFetchWait bounds how long a request waits for another's fetch.
	maxFetchWait = fetchTimeout
)

// token is an access token and when it stops being used.
type token struct {
	value  string
	expiry time.Time // zero: noExpiry from when it was fetched
}

// failure is a fetch's error, answered until it is forgotten.
type failure struct {
	err   error
	until time.Time
}

// tokenCache is one provider's token, fetched one at a time, and its last
// fetch's failure.
type tokenCache struct {
	sem  *chan struct{} // one fetch at a time; shared by carry
	tok  *atomic.Pointer[token]
	fail *atomic.Pointer[failure]
	wait time.Duration // maxFetchWait
}

func newTokenCache() tokenCache {
	sem := make(chan struct{}, 1)
	return tokenCache{sem: &sem, tok: new(atomic.Pointer[token]), fail: new(atomic.Pointer[failure]), wait: maxFetchWait}
}

// current is the token held ("" none).
func (c tokenCache) current() string {
	if c.tok == nil {
		return ""
	}
	if t := c.tok.Load(); t != nil {
		return t.value
	}
	return ""
}

// get returns the token held while it is fresh, else fetches one (one
// fetch at a time: a request waiting for another's fetch, at most c.wait,
// uses its token or its error). A failed fetch's error is answered again,
// without fetching, for failureMemory.
func (c tokenCache) get(ctx context.Context, now func() time.Time, fetch func(context.Context) (token, error)) (string, error) {
	if v, ok, err := c.held(now()); ok {
		return v, err
	}
	wait := time.NewTimer(c.wait)
	defer wait.Stop()
	select {
	case *c.sem <- struct{}{}:
	case <-wait.C:
		return "", fmt.Errorf("waited %s for another request's token fetch", c.wait)
	case <-ctx.Done():
		return "", ctx.Err()
	}
	defer func() { <-*c.sem }()
	if v, ok, err := c.held(now()); ok {
		return v, err
	}
	fctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	t, err := fetch(fctx)
	if err != nil {
		if ctx.Err() == nil { // not the requester gone: the fetch's own failure
			c.fail.Store(&failure{err: err, until: now().Add(failureMemory)})
		}
		return "", err
	}
	c.fail.Store(nil)
	switch {
	case t.expiry.IsZero():
		t.expiry = now().Add(noExpiry)
	case t.expiry.Sub(now()) > 2*expiryMargin:
		t.expiry = t.expiry.Add(-expiryMargin)
	default: // short-lived: half its life
		t.expiry = now().Add(t.expiry.Sub(now()) / 2)
	}
	c.tok.Store(&t)
	return t.value, nil
}

// held is the token held while fresh, or the error of a failed fetch
// while remembered; ok false when neither.
func (c tokenCache) held(now time.Time) (string, bool, error) {
	if t := c.tok.Load(); t != nil && now.Before(t.expiry) {
		return t.value, true, nil
	}
	if f := c.fail.Load(); f != nil && now.Before(f.until) {
		return "", true, f.err
	}
	return "", false, nil
}

// tokenClient is the HTTP client of token fetches: no proxy, no
// redirects, and every address dialled checked as upstream addresses are.
func tokenClient(cfg Config) *http.Client {
	dialer := &net.Dialer{Timeout: fetchTimeout, Control: func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return err
		}
		if policy.DeniedPort(int(ap.Port())) {
			return fmt.Errorf("port %d is a control-plane port, always denied", ap.Port())
		}
		if reason, denied := policy.AlwaysDenied(ap.Addr().Unmap(), cfg.DevAllowLoopback); denied {
			return fmt.Errorf("%s is a %s, always denied", ap.Addr(), reason)
		}
		return nil
	}}
	return &http.Client{
		Transport: &http.Transport{
			DialContext:         dialer.DialContext,
			TLSClientConfig:     &tls.Config{RootCAs: cfg.RootCAs, MinVersion: tls.VersionTLS12},
			TLSHandshakeTimeout: fetchTimeout,
			// Fetches are rare (a token lasts): no connection, and no
			// goroutine, outlives one.
			DisableKeepAlives: true,
		},
		Timeout: fetchTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return errors.New("the token endpoint redirected")
		},
	}
}

// fetch gets an access token for p (oauth2-client-credentials or
// token-exchange). Its error names the token endpoint's status and error
// code, never a secret.
func (h *Holder) fetch(ctx context.Context, p provider.Provider) (token, error) {
	if p.Type == provider.TypeTokenExchange {
		return h.exchange(ctx, p)
	}
	cc := clientcredentials.Config{
		ClientID:     p.Secret[provider.FieldClientID],
		ClientSecret: p.Secret[provider.FieldClientSecret],
		TokenURL:     p.Settings[provider.SettingTokenURL],
		Scopes:       strings.Fields(p.Settings[provider.SettingScopes]),
		// RFC 6749 §2.3.1: every server takes HTTP Basic.
		AuthStyle: oauth2.AuthStyleInHeader,
	}
	params := url.Values{}
	for _, k := range []string{provider.SettingAudience, provider.SettingResource} {
		if v := p.Settings[k]; v != "" {
			params.Set(k, v)
		}
	}
	cc.EndpointParams = params
	t, err := cc.Token(context.WithValue(ctx, oauth2.HTTPClient, h.client))
	if err != nil {
		var re *oauth2.RetrieveError
		if errors.As(err, &re) {
			return token{}, tokenError(re.Response.StatusCode, re.ErrorCode, re.ErrorDescription)
		}
		return token{}, fmt.Errorf("token endpoint %s: %s", endpointName(cc.TokenURL), scrub(err, p))
	}
	if strings.ContainsAny(t.AccessToken, "\r\n\x00") {
		return token{}, fmt.Errorf("token endpoint %s answered an access_token that cannot go in a header", endpointName(cc.TokenURL))
	}
	if !strings.EqualFold(t.Type(), "Bearer") {
		return token{}, fmt.Errorf("token endpoint %s issued a %s token, not a bearer token", endpointName(cc.TokenURL), cut(t.Type(), 32))
	}
	return token{value: t.AccessToken, expiry: t.Expiry}, nil
}

// exchangeResponse is RFC 8693 §2.2.1's answer.
type exchangeResponse struct {
	AccessToken     string          `json:"access_token"`
	IssuedTokenType string          `json:"issued_token_type"`
	TokenType       string          `json:"token_type"`
	ExpiresIn       json.Number     `json:"expires_in"`
	Error           string          `json:"error"`
	Description     string          `json:"error_description"`
	Scope           json.RawMessage `json:"scope"`
}

// exchange is RFC 8693 token exchange of p's subject token.
func (h *Holder) exchange(ctx context.Context, p provider.Provider) (token, error) {
	endpoint := p.Settings[provider.SettingTokenURL]
	form := url.Values{
		"grant_type":         {"urn:ietf:params:oauth:grant-type:token-exchange"},
		"subject_token":      {p.Secret[provider.FieldSubjectToken]},
		"subject_token_type": {p.Settings[provider.SettingSubjectTokenType]},
	}
	if form.Get("subject_token_type") == "" {
		form.Set("subject_token_type", provider.TokenTypeAccessToken)
	}
	for param, setting := range map[string]string{
		"requested_token_type": provider.SettingRequestedTokenType, "audience": provider.SettingAudience,
		"resource": provider.SettingResource, "scope": provider.SettingScopes,
	} {
		if v := p.Settings[setting]; v != "" {
			form.Set(param, v)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return token{}, fmt.Errorf("token endpoint %s: %s", endpointName(endpoint), scrub(err, p))
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	if id := p.Secret[provider.FieldClientID]; id != "" {
		req.SetBasicAuth(url.QueryEscape(id), url.QueryEscape(p.Secret[provider.FieldClientSecret]))
	}
	res, err := h.client.Do(req)
	if err != nil {
		return token{}, fmt.Errorf("token endpoint %s: %s", endpointName(endpoint), scrub(err, p))
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, maxTokenResponse))
	if err != nil {
		return token{}, fmt.Errorf("token endpoint %s: reading the answer: %s", endpointName(endpoint), scrub(err, p))
	}
	var er exchangeResponse
	jsonErr := json.Unmarshal(raw, &er)
	if res.StatusCode < 200 || res.StatusCode > 299 {
		return token{}, tokenError(res.StatusCode, er.Error, er.Description)
	}
	switch {
	case jsonErr != nil:
		return token{}, fmt.Errorf("token endpoint %s answered %d with a body that is not a token response", endpointName(endpoint), res.StatusCode)
	case er.AccessToken == "":
		return token{}, fmt.Errorf("token endpoint %s answered without an access_token", endpointName(endpoint))
	case strings.ContainsAny(er.AccessToken, "\r\n\x00"):
		return token{}, fmt.Errorf("token endpoint %s answered an access_token that cannot go in a header", endpointName(endpoint))
	case er.TokenType != "" && !strings.EqualFold(er.TokenType, "Bearer") && er.TokenType != "N_A":
		return token{}, fmt.Errorf("token endpoint %s issued a %s token, not a bearer token", endpointName(endpoint), cut(er.TokenType, 32))
	}
	t := token{value: er.AccessToken}
	if s := er.ExpiresIn.String(); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return token{}, fmt.Errorf("token endpoint %s answered an expires_in that is not a count of seconds", endpointName(endpoint))
		}
		if n > 0 {
			t.expiry = time.Now().Add(time.Duration(n) * time.Second)
		}
	}
	return t, nil
}

// tokenError is a token endpoint's refusal: its status and RFC 6749
// error, cut short.
func tokenError(status int, code, description string) error {
	msg := fmt.Sprintf("the token endpoint answered %d", status)
	if code != "" {
		msg += ": " + cut(printable(code), 64)
	}
	if description != "" {
		msg += " (" + cut(printable(description), 200) + ")"
	}
	return errors.New(msg)
}

// endpointName is a token URL without its query (which may hold anything).
func endpointName(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(invalid URL)"
	}
	return u.Scheme + "://" + u.Host + u.Path
}

// scrub is err's text with p's secrets taken out (a transport error may
// quote the request).
func scrub(err error, p provider.Provider) string {
	s := err.Error()
	for _, v := range p.Secret {
		if v != "" {
			s = strings.ReplaceAll(s, v, "[secret]")
			s = strings.ReplaceAll(s, url.QueryEscape(v), "[secret]")
		}
	}
	return cut(s, 300)
}

// printable keeps a server's text to printable ASCII.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e {
			return '?'
		}
		return r
	}, s)
}
