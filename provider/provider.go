package provider

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/portcullis-dev/portcullis/policy"
)

// The provider types.
const (
	TypeBearer                  = "bearer"
	TypeHeader                  = "header"
	TypeBasic                   = "basic"
	TypeAWS                     = "aws"
	TypeOAuth2ClientCredentials = "oauth2-client-credentials"
	TypeTokenExchange           = "token-exchange"
)

// Types lists the provider types, in the order help text shows them.
var Types = []string{TypeBearer, TypeHeader, TypeBasic, TypeAWS, TypeOAuth2ClientCredentials, TypeTokenExchange}

// The settings (non-secret) a provider may take.
const (
	SettingHeader             = "header"
	SettingUsername           = "username"
	SettingTokenURL           = "token_url"
	SettingScopes             = "scopes" // space-separated, as OAuth writes them
	SettingAudience           = "audience"
	SettingResource           = "resource"
	SettingSubjectTokenType   = "subject_token_type"
	SettingRequestedTokenType = "requested_token_type"
)

// The secret fields.
const (
	FieldToken           = "token"
	FieldValue           = "value"
	FieldPassword        = "password"
	FieldAccessKeyID     = "access_key_id"
	FieldSecretAccessKey = "secret_access_key"
	FieldSessionToken    = "session_token"
	FieldClientID        = "client_id"
	FieldClientSecret    = "client_secret"
	FieldSubjectToken    = "subject_token"
)

// TokenTypeAccessToken is RFC 8693's token type of an OAuth access token,
// token-exchange's default subject_token_type.
const TokenTypeAccessToken = "urn:ietf:params:oauth:token-type:access_token"

// shape is what one type takes.
type shape struct {
	required, optional         []string // secret fields
	settings, requiredSettings []string
}

var shapes = map[string]shape{
	TypeBearer: {required: []string{FieldToken}},
	TypeHeader: {required: []string{FieldValue}, settings: []string{SettingHeader}, requiredSettings: []string{SettingHeader}},
	TypeBasic:  {required: []string{FieldPassword}, settings: []string{SettingUsername}, requiredSettings: []string{SettingUsername}},
	TypeAWS:    {required: []string{FieldAccessKeyID, FieldSecretAccessKey}, optional: []string{FieldSessionToken}},
	TypeOAuth2ClientCredentials: {
		required: []string{FieldClientID, FieldClientSecret},
		settings: []string{SettingTokenURL, SettingScopes, SettingAudience, SettingResource}, requiredSettings: []string{SettingTokenURL},
	},
	TypeTokenExchange: {
		required: []string{FieldSubjectToken}, optional: []string{FieldClientID, FieldClientSecret},
		settings:         []string{SettingTokenURL, SettingScopes, SettingAudience, SettingResource, SettingSubjectTokenType, SettingRequestedTokenType},
		requiredSettings: []string{SettingTokenURL},
	},
}

// SecretFields returns the secret fields type t requires and those it
// allows besides (nil, nil for an unknown type).
func SecretFields(t string) (required, optional []string) {
	s := shapes[t]
	return s.required, s.optional
}

// Settings returns the settings type t takes, and which of them it
// requires.
func Settings(t string) (allowed, required []string) {
	s := shapes[t]
	return s.settings, s.requiredSettings
}

// Spec is a provider without its secret: what anyone may see.
type Spec struct {
	Name     string            `json:"name"`
	Type     string            `json:"type"`
	Hosts    []string          `json:"hosts"`
	Settings map[string]string `json:"settings,omitempty"`
}

// Problem is one thing wrong with a provider, at a field: "name", "type",
// "hosts[1]", "settings.token_url", "secret.token".
type Problem struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

func (p Problem) String() string { return p.Field + ": " + p.Message }

// Problems is every problem found; as an error it names them all.
type Problems []Problem

func (ps Problems) Error() string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, "; ")
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// headerNameRE is an HTTP field name (RFC 9110 token).
var headerNameRE = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

// MaxSecretBytes bounds one secret field's value.
const MaxSecretBytes = 16 << 10

// Check returns every problem with spec and, when secret is not nil, with
// secret (the fields its type requires and allows, each non-empty, at
// most MaxSecretBytes, no line breaks or NUL: a value that ends up in a
// header must not split it). A nil secret checks the spec alone. No
// problem quotes a secret's value, nor the name of a field the type does
// not take (those are counted at field "secret").
func Check(spec Spec, secret map[string][]byte) error {
	var ps Problems
	add := func(field, format string, args ...any) {
		ps = append(ps, Problem{Field: field, Message: fmt.Sprintf(format, args...)})
	}
	if !nameRE.MatchString(spec.Name) {
		add("name", "must be 1-63 characters of a-z, 0-9, '-' and '_', starting with a letter or digit")
	}
	sh, ok := shapes[spec.Type]
	if !ok {
		add("type", "must be one of %s", strings.Join(Types, ", "))
	}
	if len(spec.Hosts) == 0 {
		add("hosts", "at least one host is required")
	}
	for i, h := range spec.Hosts {
		if _, err := ParseHost(h); err != nil {
			add(fmt.Sprintf("hosts[%d]", i), "%v", err)
		}
	}
	if ok {
		for _, k := range sortedKeys(spec.Settings) {
			if !slices.Contains(sh.settings, k) {
				add("settings."+k, "is not a setting of type %s (it takes: %s)", spec.Type, listOrNone(sh.settings))
			}
		}
		for _, k := range sh.requiredSettings {
			if spec.Settings[k] == "" {
				add("settings."+k, "is required for type %s", spec.Type)
			}
		}
		checkSettings(spec.Settings, add)
		if secret != nil {
			checkSecret(spec.Type, sh, secret, add)
		}
	}
	if len(ps) > 0 {
		return ps
	}
	return nil
}

func checkSettings(s map[string]string, add func(field, format string, args ...any)) {
	if h, ok := s[SettingHeader]; ok && !headerNameRE.MatchString(h) {
		add("settings.header", "must be an HTTP header name")
	}
	if h, ok := s[SettingHeader]; ok && headerNameRE.MatchString(h) && reservedHeader(h) {
		add("settings.header", "%s is not a header a credential may set", h)
	}
	if u, ok := s[SettingUsername]; ok && (strings.Contains(u, ":") || strings.ContainsAny(u, "\r\n\x00")) {
		add("settings.username", "must not hold ':' or a line break")
	}
	if raw, ok := s[SettingTokenURL]; ok && raw != "" {
		u, err := url.Parse(raw)
		switch {
		case err != nil:
			add("settings.token_url", "%v", err)
		case u.Scheme != "https" && u.Scheme != "http" || u.Host == "":
			add("settings.token_url", "must be an absolute http or https URL")
		case u.User != nil:
			add("settings.token_url", "must not hold credentials (put them in the secret)")
		case u.Fragment != "":
			add("settings.token_url", "must not have a fragment")
		}
	}
	for k, v := range s {
		if strings.ContainsAny(v, "\r\n\x00") {
			add("settings."+k, "must not hold a line break or NUL")
		}
	}
}

func checkSecret(t string, sh shape, secret map[string][]byte, add func(field, format string, args ...any)) {
	// A field the type does not take is counted, never named: a secret
	// read as FIELD=VALUE where the value holds "=" (base64 padding) has
	// most of the secret in its name.
	var known []string
	for _, k := range sortedKeys(secret) {
		if slices.Contains(sh.required, k) || slices.Contains(sh.optional, k) {
			known = append(known, k)
		}
	}
	if n := len(secret) - len(known); n > 0 {
		add("secret", "has %d field(s) type %s does not take (it takes: %s; a field's name is not shown, as it may be the secret)",
			n, t, strings.Join(append(slices.Clone(sh.required), sh.optional...), ", "))
	}
	for _, k := range known {
		v := secret[k]
		switch {
		case len(v) == 0:
			add("secret."+k, "is empty")
		case len(v) > MaxSecretBytes:
			add("secret."+k, "is longer than %d bytes", MaxSecretBytes)
		case strings.ContainsAny(string(v), "\r\n\x00"):
			add("secret."+k, "must not hold a line break or NUL (a trailing newline of a file is trimmed)")
		case IndexPlaceholder(v) >= 0:
			add("secret."+k, "must not hold a placeholder")
		}
	}
	for _, k := range sh.required {
		if _, ok := secret[k]; !ok {
			add("secret."+k, "is required for type %s", t)
		}
	}
	if t == TypeTokenExchange {
		_, id := secret[FieldClientID]
		_, sec := secret[FieldClientSecret]
		if id != sec {
			add("secret.client_secret", "client_id and client_secret go together")
		}
	}
}

// reservedHeader: fields a header provider may not set, since they frame
// the request or route it.
func reservedHeader(h string) bool {
	switch strings.ToLower(h) {
	case "host", "content-length", "transfer-encoding", "connection", "upgrade", "te", "trailer",
		"proxy-authorization", "proxy-connection", "keep-alive", "cookie":
		return true
	}
	return false
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// Host is one destination a provider covers: a host pattern (exact, or
// with wildcards as an endpoint's host takes them: policy.ValidHostPattern),
// a port, and whether the credential may go there over plain HTTP.
type Host struct {
	Pattern string
	Port    int
	// Plain: the host was written http://HOST: the credential goes there
	// unencrypted (an internal service, tests), and only there; any
	// other host takes it only over TLS.
	Plain bool
}

// DefaultPort is the port of a host written without one (http://: 80).
const DefaultPort = 443

// ParseHost reads [http:// or https://]HOST[:PORT] (an IPv6 literal in
// brackets, no path), the port 443 when left out (80 after http://).
func ParseHost(s string) (Host, error) {
	s = strings.TrimSpace(s)
	in, plain, port := s, false, DefaultPort
	if scheme, rest, ok := strings.Cut(s, "://"); ok {
		switch strings.ToLower(scheme) {
		case "http":
			plain, port = true, 80
		case "https":
		default:
			return Host{}, fmt.Errorf("%q: the scheme must be http:// or https://", in)
		}
		s = rest
	}
	if strings.ContainsAny(s, "/?#@") {
		return Host{}, fmt.Errorf("%q: want [http://]HOST[:PORT], no path", in)
	}
	host := s
	if h, p, err := net.SplitHostPort(s); err == nil {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return Host{}, fmt.Errorf("%q: port must be 1-65535", in)
		}
		host, port = h, n
	} else if strings.Count(s, ":") == 1 {
		return Host{}, fmt.Errorf("%q: want HOST or HOST:PORT", in)
	}
	host = policy.NormalizeHost(host)
	if err := policy.ValidHostPattern(host); err != nil {
		return Host{}, err
	}
	if policy.IsMetadataHost(host) {
		return Host{}, fmt.Errorf("%q is a cloud metadata address: a credential never goes there", in)
	}
	return Host{Pattern: host, Port: port, Plain: plain}, nil
}

// String is the form ParseHost reads (the port always written, http://
// for a plain one).
func (h Host) String() string {
	s := net.JoinHostPort(h.Pattern, strconv.Itoa(h.Port))
	if h.Plain {
		return "http://" + s
	}
	return s
}

// Covers reports whether host:port is one of hosts' destinations for a
// request over TLS (tls true) or plain HTTP: an entry covers only its
// own kind (hosts as ParseHost reads them; an invalid one covers nothing).
func Covers(hosts []string, host string, port int, tls bool) bool {
	for _, s := range hosts {
		h, err := ParseHost(s)
		if err == nil && h.Plain != tls && h.Port == port && policy.MatchHost(h.Pattern, host) {
			return true
		}
	}
	return false
}

// PlaceholderPrefix starts every placeholder.
const PlaceholderPrefix = "portcullis:provider:"

// Placeholder is what an agent writes where provider name's credential
// goes: in the header the provider sets (Authorization: Bearer
// portcullis:provider:NAME, or the header's whole value), or in a body or
// WebSocket message the endpoint rewrites. The proxy replaces it with the
// credential, or refuses the request when it is not bound to the provider.
func Placeholder(name string) string { return PlaceholderPrefix + name }

// IndexPlaceholder returns where the first placeholder prefix in s
// starts, its ASCII letters matched in either case (PORTCULLIS:Provider:
// is one too: what reads it may not care), or -1.
func IndexPlaceholder[T ~string | ~[]byte](s T) int {
	for i := 0; i+len(PlaceholderPrefix) <= len(s); i++ {
		if prefixAt(s, i) {
			return i
		}
	}
	return -1
}

func prefixAt[T ~string | ~[]byte](s T, i int) bool {
	for j := 0; j < len(PlaceholderPrefix); j++ {
		c, p := s[i+j], PlaceholderPrefix[j]
		if c != p && (p < 'a' || p > 'z' || c != p-'a'+'A') {
			return false
		}
	}
	return true
}

// FindPlaceholder returns the provider named by the first placeholder in
// s (IndexPlaceholder) and where it starts, or ok false when s holds
// none. A placeholder's name is the longest run of name characters after
// the prefix (possibly empty: a malformed placeholder, PORTCULLIS:
// PROVIDER:GH's too, is still one).
func FindPlaceholder(s string) (name string, at int, ok bool) {
	at = IndexPlaceholder(s)
	if at < 0 {
		return "", -1, false
	}
	rest := s[at+len(PlaceholderPrefix):]
	n := 0
	for n < len(rest) && nameByte(rest[n]) && n < 63 {
		n++
	}
	return rest[:n], at, true
}

func nameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

// ErrNoSecret: a bundle's provider lacks a field its type requires.
var ErrNoSecret = errors.New("provider: a required secret field is missing")
