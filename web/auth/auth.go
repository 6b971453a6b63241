// Package auth signs and verifies Tally's bearer tokens and carries the
// verified principal in a context. It is the one place that decides who a
// request is; what that principal may do is decided by the schema's
// @auth/@admin directives and by the engine.
//
// Two kinds of token are accepted, and read alike: HS256 tokens signed
// with the server's secret (TALLY_JWT_SECRET, or a secret made for one dev
// run), which `tally token` prints; and, when a Provider is configured
// (-jwks), tokens the app's identity provider signs with a key of its
// JSON Web Key Set (RS256, ES256, EdDSA). Either way the claim sub is the
// user id in decimal, the role is read from the role claim (a dotted path,
// see roleOf), exp, nbf and iat are honoured when present, and the issuer
// and audience are checked when configured. The algorithm decides the
// key: HS256 only ever meets the secret and the others only the key set,
// so a token cannot pick which kind of key verifies it.
//
// A token that fails says why (TokenError): malformed or truncated,
// signed with another secret (in dev mode: by an earlier run), expired,
// signed by a key the provider does not list, for another issuer or
// audience. The reasons name nothing secret.
package auth

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/tally-dev/tally/engine"
)

// Principal is the verified caller.
type Principal struct {
	User  engine.UserID
	Admin bool
	// Service is a token of the app's own backend acting for User (the
	// role "service").
	Service bool
}

// ErrBadToken is what every refused token is (errors.Is); its TokenError
// says why.
var ErrBadToken = errors.New("invalid or expired token")

// TokenError is a refused token and the reason, written for the client.
type TokenError struct{ Reason string }

func (e *TokenError) Error() string        { return e.Reason }
func (e *TokenError) Is(target error) bool { return target == ErrBadToken }

func refuse(format string, args ...any) error {
	return &TokenError{Reason: fmt.Sprintf(format, args...)}
}

// Roles a token may carry in its role claim.
const (
	RoleAdmin   = "admin"
	RoleService = "service"
)

// DefaultRoleClaim is where the role is read when Options.RoleClaim is
// empty.
const DefaultRoleClaim = "role"

// Options configure Keys.
type Options struct {
	// Secret verifies (and signs) HS256 tokens; at least 16 bytes.
	Secret []byte
	// Dev says Secret was made for this run: a token signed with another
	// secret is then most likely from an earlier run, and its refusal
	// says so.
	Dev bool
	// Provider, when set, verifies tokens signed with its key set.
	Provider *Provider
	// Issuer and Audience, when set, must be the token's iss and among
	// its aud (of every token: Sign writes them too).
	Issuer   string
	Audience string
	// RoleClaim is the dotted path of the role claim, e.g.
	// app_metadata.role or realm_access.roles (see roleOf); empty means
	// DefaultRoleClaim.
	RoleClaim string
}

// Keys signs and verifies tokens.
type Keys struct {
	opts      Options
	roleClaim []string
	parser    *jwt.Parser
}

// NewKeys accepts HS256 tokens signed with secret, with the default
// claims.
func NewKeys(secret []byte) (*Keys, error) { return New(Options{Secret: secret}) }

// New makes Keys from o. The secret must be at least 16 bytes so that a
// typo such as TALLY_JWT_SECRET=x does not silently make tokens forgeable.
func New(o Options) (*Keys, error) {
	if len(o.Secret) < 16 {
		return nil, fmt.Errorf("the JWT secret must be at least 16 bytes (got %d)", len(o.Secret))
	}
	if o.RoleClaim == "" {
		o.RoleClaim = DefaultRoleClaim
	}
	path := strings.Split(o.RoleClaim, ".")
	for _, p := range path {
		if p == "" {
			return nil, fmt.Errorf("-jwt-role-claim %q: a claim path is names joined by dots, e.g. app_metadata.role", o.RoleClaim)
		}
	}
	methods := []string{"HS256"}
	if o.Provider != nil {
		methods = append(methods, providerMethods...)
	}
	popts := []jwt.ParserOption{jwt.WithValidMethods(methods), jwt.WithLeeway(leeway)}
	if o.Issuer != "" {
		popts = append(popts, jwt.WithIssuer(o.Issuer))
	}
	if o.Audience != "" {
		popts = append(popts, jwt.WithAudience(o.Audience))
	}
	return &Keys{opts: o, roleClaim: path, parser: jwt.NewParser(popts...)}, nil
}

// Close stops the provider's background refresh, if any.
func (k *Keys) Close() {
	if k.opts.Provider != nil {
		k.opts.Provider.Close()
	}
}

// leeway is the clock skew allowed for exp and nbf.
const leeway = 30 * time.Second

// providerMethods are the algorithms accepted from an identity provider.
var providerMethods = []string{"RS256", "ES256", "EdDSA"}

// RandomSecret makes a secret for one run of a dev server.
func RandomSecret() []byte {
	s := make([]byte, 32)
	rand.Read(s)
	return s
}

// Sign makes an HS256 token for user; ttl 0 means no expiry (a negative
// ttl makes an already-expired token, for tests).
func (k *Keys) Sign(user engine.UserID, admin bool, ttl time.Duration) (string, error) {
	role := ""
	if admin {
		role = RoleAdmin
	}
	return k.SignRole(user, role, ttl)
}

// SignRole is Sign with any role ("" for none), written at the role
// claim's path, with the configured issuer and audience, so that the
// token passes Verify under the same options.
func (k *Keys) SignRole(user engine.UserID, role string, ttl time.Duration) (string, error) {
	now := time.Now()
	c := jwt.MapClaims{
		"sub": strconv.FormatUint(uint64(user), 10),
		"iat": jwt.NewNumericDate(now),
	}
	if ttl != 0 {
		c["exp"] = jwt.NewNumericDate(now.Add(ttl))
	}
	if k.opts.Issuer != "" {
		c["iss"] = k.opts.Issuer
	}
	if k.opts.Audience != "" {
		c["aud"] = k.opts.Audience
	}
	if role != "" {
		m := map[string]any(c)
		for _, name := range k.roleClaim[:len(k.roleClaim)-1] {
			inner, ok := m[name].(map[string]any)
			if !ok {
				inner = map[string]any{}
				m[name] = inner
			}
			m = inner
		}
		m[k.roleClaim[len(k.roleClaim)-1]] = role
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(k.opts.Secret)
}

// key picks the verification key by the token's algorithm: the secret
// for HS256, the provider's key set for the others (the parser has
// already refused any algorithm not configured).
func (k *Keys) key(t *jwt.Token) (any, error) {
	if t.Method.Alg() == "HS256" {
		return k.opts.Secret, nil
	}
	if k.opts.Provider == nil {
		return nil, refuse("token algorithm %s needs an identity provider (-jwks), and none is configured", t.Method.Alg())
	}
	return k.opts.Provider.key(t)
}

// Verify checks a token (without the "Bearer " prefix). Its errors are
// TokenErrors.
func (k *Keys) Verify(token string) (Principal, error) {
	p, _, err := k.verify(token)
	return p, err
}

// verify is Verify that also returns the token's exp claim as the
// verification read it (zero: the token has none).
func (k *Keys) verify(token string) (Principal, time.Time, error) {
	c := jwt.MapClaims{}
	if _, err := k.parser.ParseWithClaims(token, c, k.key); err != nil {
		return Principal{}, time.Time{}, k.explain(token, err)
	}
	sub, _ := c["sub"].(string)
	id, err := strconv.ParseUint(sub, 10, 64)
	if err != nil || id == 0 {
		return Principal{}, time.Time{}, refuse("token claim sub must be the user id as a positive decimal string, got %s", describeClaim(c["sub"]))
	}
	p := Principal{User: engine.UserID(id)}
	p.Admin, p.Service = roleOf(c, k.roleClaim)
	var exp time.Time
	if e, err := c.GetExpirationTime(); err == nil && e != nil {
		exp = e.Time
	}
	return p, exp, nil
}

// roleOf reads the role claim: a top-level claim named by the whole path
// when there is one (namespaced claims such as
// "https://app.example.com/roles" have dots in their names), else the
// claim at the dotted path. A string is the role; an array
// (realm_access.roles and the like) grants admin when it holds "admin"
// and service when it holds "service", admin winning when both are
// there. Anything else, or nothing, is an end user.
func roleOf(c jwt.MapClaims, path []string) (admin, service bool) {
	v, literal := c[strings.Join(path, ".")]
	if !literal {
		v = map[string]any(c)
		for _, name := range path {
			m, ok := v.(map[string]any)
			if !ok {
				return false, false
			}
			v = m[name]
		}
	}
	switch v := v.(type) {
	case string:
		return v == RoleAdmin, v == RoleService
	case []any:
		for _, r := range v {
			switch r {
			case RoleAdmin:
				admin = true
			case RoleService:
				service = true
			}
		}
		return admin, service && !admin
	}
	return false, false
}

// explain turns a parse failure into the reason the client reads.
func (k *Keys) explain(token string, err error) error {
	if te, ok := errors.AsType[*TokenError](err); ok {
		return te // from key: the provider's own reason
	}
	if strings.Count(token, ".") != 2 {
		return refuse("token is malformed: a JWT is three base64url parts joined by dots, this has %d part(s) (truncated when copied?)", strings.Count(token, ".")+1)
	}
	var c jwt.MapClaims
	t, _, perr := jwt.NewParser().ParseUnverified(token, &c)
	if t == nil || errors.Is(err, jwt.ErrTokenMalformed) || errors.Is(perr, jwt.ErrTokenMalformed) {
		return refuse("token is malformed: its header or claims are not base64url JSON (truncated when copied?)")
	}
	alg, _ := t.Header["alg"].(string)
	switch {
	case errors.Is(err, jwt.ErrTokenExpired):
		exp, _ := c.GetExpirationTime()
		if exp != nil {
			return refuse("token expired at %s: get a new one", exp.UTC().Format(time.RFC3339))
		}
		return refuse("token expired: get a new one")
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return refuse("token is not valid yet (its nbf is in the future): check the clocks")
	case errors.Is(err, jwt.ErrTokenInvalidIssuer), errors.Is(err, jwt.ErrTokenRequiredClaimMissing) && c["iss"] == nil && k.opts.Issuer != "":
		return refuse("token issuer %s is not the expected %q (-jwt-issuer)", describeClaim(c["iss"]), k.opts.Issuer)
	case errors.Is(err, jwt.ErrTokenInvalidAudience), errors.Is(err, jwt.ErrTokenRequiredClaimMissing) && c["aud"] == nil && k.opts.Audience != "":
		aud, _ := c.GetAudience()
		return refuse("token audience %s does not include the expected %q (-jwt-audience)", describeClaim(audience(aud)), k.opts.Audience)
	case errors.Is(err, jwt.ErrInvalidType):
		return refuse("token has a claim of the wrong type: exp and nbf are numbers, iss and sub strings, aud a string or a list of strings")
	case !k.accepts(alg):
		accepted := "HS256"
		if k.opts.Provider != nil {
			accepted += ", " + strings.Join(providerMethods, ", ")
		} else if alg != "none" {
			accepted += " (RS256, ES256 and EdDSA with an identity provider, -jwks)"
		}
		return refuse("token algorithm %s is not accepted: %s", describeClaim(alg), accepted)
	case errors.Is(err, jwt.ErrTokenSignatureInvalid) && alg == "HS256":
		if sig := token[strings.LastIndexByte(token, '.')+1:]; len(sig) != hs256SignatureLen {
			return refuse("token signature is %d characters where HS256 has %d: truncated when copied?", len(sig), hs256SignatureLen)
		}
		if k.opts.Dev {
			return refuse("token is not signed with this dev server's secret, so it is likely from an earlier run (without TALLY_JWT_SECRET each start makes a new secret, and tokens from an earlier run are invalid); use a token it logged at start, or `tally token -user N`")
		}
		return refuse("token signature does not match this server's secret (TALLY_JWT_SECRET)")
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return refuse("token signature does not match the identity provider's key")
	}
	return refuse("token is invalid")
}

// audience is aud for describeClaim: nil when the token has none.
func audience(aud jwt.ClaimStrings) any {
	if len(aud) == 0 {
		return nil
	}
	return []string(aud)
}

// hs256SignatureLen is the base64url length of an HMAC-SHA256.
const hs256SignatureLen = 43

func (k *Keys) accepts(alg string) bool {
	if alg == "HS256" {
		return true
	}
	for _, m := range providerMethods {
		if alg == m {
			return k.opts.Provider != nil
		}
	}
	return false
}

// describeClaim shows a claim's value in a reason, bounded.
func describeClaim(v any) string {
	if v == nil {
		return "(none)"
	}
	s := fmt.Sprintf("%q", v)
	if _, ok := v.(string); !ok {
		s = fmt.Sprint(v)
	}
	if len(s) > 60 {
		s = s[:60] + "…"
	}
	return s
}

// FromHeader verifies an Authorization header value. An empty header is
// anonymous (ok, no error); anything else must be a valid bearer token.
func (k *Keys) FromHeader(h string) (p Principal, present bool, err error) {
	p, present, _, err = k.FromHeaderExpiry(h)
	return p, present, err
}

// FromHeaderExpiry is FromHeader that also returns a verified token's exp
// claim (zero when it has none), read by the same parse: what a cache of
// verified headers keeps them until.
func (k *Keys) FromHeaderExpiry(h string) (p Principal, present bool, exp time.Time, err error) {
	h = strings.TrimSpace(h)
	if h == "" {
		return Principal{}, false, time.Time{}, nil
	}
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		if strings.Count(h, ".") == 2 && !strings.Contains(h, " ") {
			return Principal{}, true, time.Time{}, refuse(`the Authorization header must be "Bearer <token>": this one has the token without "Bearer "`)
		}
		return Principal{}, true, time.Time{}, refuse(`the Authorization header must be "Bearer <token>"`)
	}
	token = strings.TrimSpace(token)
	if token == "" {
		return Principal{}, true, time.Time{}, refuse(`the Authorization header must be "Bearer <token>": the token is missing`)
	}
	p, exp, err = k.verify(token)
	return p, true, exp, err
}

type ctxKey struct{}

type state struct {
	p   Principal
	err error
}

// With returns ctx carrying the outcome of authenticating a request: the
// principal, or the error of a token that was presented but is bad.
func With(ctx context.Context, p Principal, err error) context.Context {
	return context.WithValue(ctx, ctxKey{}, state{p, err})
}

// From returns the request's principal (zero User when anonymous) and the
// error of a bad token, if one was presented.
func From(ctx context.Context) (Principal, error) {
	s, _ := ctx.Value(ctxKey{}).(state)
	return s.p, s.err
}
