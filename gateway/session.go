package gateway

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect/v2"

	"github.com/portcullis-dev/portcullis/store"
)

// The console's session. It keeps no state on the server, so it is valid
// on every replica: the session cookie carries the operator's token itself
// (HttpOnly, so the page's scripts never see it; SameSite=Strict; Secure
// when the gateway serves TLS), and revoking the token ends the session
// everywhere at once. The cookie alone authenticates nothing that changes
// state: an RPC authenticated by the cookie must also carry the CSRF token
// (an HMAC of the session token, which the page reads from GET
// /console/session) in the X-Portcullis-CSRF header — a header another
// origin's page can neither read nor send without a CORS preflight the
// gateway never grants.
const (
	// SessionCookie is the name of the console's session cookie.
	SessionCookie = "portcullis_session"
	// CSRFHeader carries the CSRF token on RPCs authenticated by the
	// session cookie.
	CSRFHeader = "X-Portcullis-CSRF"
	// SessionPath is where the console signs in (POST), reads its session
	// (GET) and signs out (DELETE).
	SessionPath = "/console/session"
	// SessionMaxAge is how long the browser keeps the session cookie.
	SessionMaxAge = 12 * time.Hour

	csrfLabel = "portcullis console csrf"
	// maxSignInBytes bounds a sign-in request body.
	maxSignInBytes = 16 << 10
)

var (
	errCSRF         = connect.NewError(connect.CodePermissionDenied, "the console session needs the "+CSRFHeader+" header from GET "+SessionPath)
	errCrossOrigin  = connect.NewError(connect.CodePermissionDenied, "cross-origin request refused")
	errCookieFormat = connect.NewError(connect.CodeInvalidArgument, "this token cannot be carried in a cookie; create an operator token for the console")
)

// CSRFToken is the CSRF token of a console session: HMAC-SHA256 of a fixed
// label keyed by the session token, in hex. Knowing it reveals nothing of
// the token.
func CSRFToken(sessionToken string) string {
	m := hmac.New(sha256.New, []byte(sessionToken))
	m.Write([]byte(csrfLabel))
	return hex.EncodeToString(m.Sum(nil))
}

// validCSRF reports whether got is the CSRF token of sessionToken, in
// constant time.
func validCSRF(sessionToken, got string) bool {
	return got != "" && hmac.Equal([]byte(CSRFToken(sessionToken)), []byte(got))
}

// consoleRole reports whether a role may use the console.
func consoleRole(role string) bool {
	return role == store.RoleAdmin || role == store.RoleOperator
}

// headers is what session checks read of a request's headers: an
// http.Header or a Connect call's header.
type headers interface {
	Get(key string) string
	Values(key string) []string
}

// sessionToken returns the token in the session cookie of h, if any.
func sessionToken(h headers) (string, bool) {
	// Request.Cookie skips malformed cookies (other applications on the
	// same host may set them) rather than failing the whole header.
	r := http.Request{Header: http.Header{"Cookie": h.Values("Cookie")}}
	c, err := r.Cookie(SessionCookie)
	if err != nil || c.Value == "" {
		return "", false
	}
	return c.Value, true
}

// cookieSafe reports whether a token can be a cookie value as it is
// (tokens the gateway makes always can: "pcs_" and base64url).
func cookieSafe(tok string) bool {
	for i := 0; i < len(tok); i++ {
		b := tok[i]
		if b <= 0x20 || b >= 0x7f || b == '"' || b == ',' || b == ';' || b == '\\' {
			return false
		}
	}
	return tok != ""
}

// authenticateCall authenticates an RPC by its request headers: the
// Authorization header when there is one (CLI, proxies, SDKs), otherwise
// the console's session cookie, which also needs the CSRF header, a
// same-origin request and a console role.
func (a *authenticator) authenticateCall(ctx context.Context, h headers) (Principal, error) {
	authz := h.Get("Authorization")
	tok, ok := sessionToken(h)
	if authz != "" || !ok {
		return a.authenticate(ctx, authz)
	}
	if site := h.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" {
		return Principal{}, errCrossOrigin
	}
	if !validCSRF(tok, h.Get(CSRFHeader)) {
		return Principal{}, errCSRF
	}
	return a.authenticateConsole(ctx, tok)
}

// authenticateConsole checks a token presented to the console: valid, not
// revoked, and of a role that may use the console.
func (a *authenticator) authenticateConsole(ctx context.Context, tok string) (Principal, error) {
	p, err := a.authenticate(ctx, "Bearer "+tok)
	if err != nil {
		return Principal{}, err
	}
	if !consoleRole(p.Role) {
		return Principal{}, errConsoleRole(p.Role)
	}
	return p, nil
}

// errConsoleRole refuses a token whose role may not use the console (a
// sandbox's or a watchdog's), saying which role it has.
func errConsoleRole(role string) error {
	return connect.NewError(connect.CodePermissionDenied,
		fmt.Sprintf("a %s token cannot sign in to the console: use an operator or admin token", role))
}

// sessionInfo is what GET and POST /console/session answer.
type sessionInfo struct {
	Name string `json:"name"`
	Role string `json:"role"`
	// CSRF is the value of the X-Portcullis-CSRF header for this session.
	CSRF string `json:"csrf"`
	// Can lists the RPCs the role may call ("SandboxService/UnfreezeSandbox"),
	// from the authorization table: the console offers only those actions.
	Can []string `json:"can"`
}

// sessionFor is the session answer for principal p signed in with tok.
func sessionFor(p Principal, tok string) sessionInfo {
	return sessionInfo{Name: p.Name, Role: p.Role, CSRF: CSRFToken(tok), Can: roleCan(p.Role)}
}

// roleCan lists, sorted, the portcullis.v1 RPCs role may call.
func roleCan(role string) []string {
	can := []string{}
	for proc, r := range authzTable {
		name, ok := strings.CutPrefix(proc, "/portcullis.v1.")
		if ok && !r.public && r.allows(role) {
			can = append(can, name)
		}
	}
	slices.Sort(can)
	return can
}

// consoleSession serves SessionPath: POST signs in (a form or JSON with
// "token"), GET returns the session's name, role and CSRF token, DELETE
// signs out. POST and DELETE are refused from another origin, so a
// cross-site form cannot sign a browser in or out.
func (s *Server) consoleSession() http.Handler {
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeSessionError(w, http.StatusForbidden, errCrossOrigin.Message())
	}))
	return cop.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			s.getSession(w, r)
		case http.MethodPost:
			s.signIn(w, r)
		case http.MethodDelete:
			s.signOut(w, r)
		default:
			w.Header().Set("Allow", "GET, HEAD, POST, DELETE")
			writeSessionError(w, http.StatusMethodNotAllowed, "method not allowed")
		}
	}))
}

func (s *Server) getSession(w http.ResponseWriter, r *http.Request) {
	tok, ok := sessionToken(r.Header)
	if !ok {
		writeSessionError(w, http.StatusUnauthorized, "not signed in")
		return
	}
	p, err := s.auth.authenticateConsole(r.Context(), tok)
	if err != nil {
		// A revoked or foreign token: forget it.
		http.SetCookie(w, s.sessionCookie(r, "", -1))
		s.writeAuthError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, sessionFor(p, tok))
}

func (s *Server) signIn(w http.ResponseWriter, r *http.Request) {
	tok, err := signInToken(w, r)
	if err != nil {
		writeSessionError(w, http.StatusBadRequest, err.Error())
		return
	}
	if !cookieSafe(tok) {
		writeSessionError(w, http.StatusBadRequest, errCookieFormat.Message())
		return
	}
	p, err := s.auth.authenticateConsole(r.Context(), tok)
	if err != nil {
		s.writeAuthError(w, r, err)
		return
	}
	http.SetCookie(w, s.sessionCookie(r, tok, int(SessionMaxAge/time.Second)))
	s.log.InfoContext(r.Context(), "console sign-in", "actor", p.Actor(), "role", p.Role)
	writeJSON(w, http.StatusOK, sessionFor(p, tok))
}

func (s *Server) signOut(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, s.sessionCookie(r, "", -1))
	w.WriteHeader(http.StatusNoContent)
}

// signInToken reads the token of a sign-in request: JSON {"token": …} or
// a form field "token".
func signInToken(w http.ResponseWriter, r *http.Request) (string, error) {
	r.Body = http.MaxBytesReader(w, r.Body, maxSignInBytes)
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var tok string
	switch ct {
	case "application/json":
		var body struct {
			Token string `json:"token"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			return "", errors.New("the body must be JSON with a token")
		}
		tok = body.Token
	case "application/x-www-form-urlencoded", "multipart/form-data":
		if err := r.ParseMultipartForm(maxSignInBytes); err != nil && !errors.Is(err, http.ErrNotMultipart) {
			return "", errors.New("unreadable form")
		}
		tok = r.PostFormValue("token")
	default:
		return "", errors.New("send the token as JSON or as a form")
	}
	tok = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(tok), "Bearer "))
	if tok == "" {
		return "", errors.New("a token is required")
	}
	return tok, nil
}

// sessionCookie is the session cookie holding tok; maxAge < 0 deletes it.
func (s *Server) sessionCookie(r *http.Request, tok string, maxAge int) *http.Cookie {
	return &http.Cookie{
		Name:     SessionCookie,
		Value:    tok,
		Path:     "/",
		MaxAge:   maxAge,
		HttpOnly: true,
		Secure:   r.TLS != nil || s.cfg.TLSCertFile != "",
		SameSite: http.SameSiteStrictMode,
	}
}

// writeAuthError answers a failed console authentication with the
// message a Connect client would see; anything unexpected is logged and
// answered as an internal error.
func (s *Server) writeAuthError(w http.ResponseWriter, r *http.Request, err error) {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		s.log.ErrorContext(r.Context(), "console session", "err", err)
		writeSessionError(w, http.StatusInternalServerError, "internal error")
		return
	}
	status := http.StatusUnauthorized
	if ce.Code() == connect.CodePermissionDenied {
		status = http.StatusForbidden
	}
	writeSessionError(w, status, ce.Message())
}

func writeSessionError(w http.ResponseWriter, status int, message string) {
	writeJSON(w, status, struct {
		Message string `json:"message"`
	}{message})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
