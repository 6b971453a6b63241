// Package auth signs and verifies Tally's bearer tokens (JWT HS256: claim
// sub = the user id in decimal, optional role = "admin", exp honoured when
// present) and carries the verified principal in a context. It is the one
// place that decides who a request is; what that principal may do is
// decided by the schema's @auth/@admin directives and by the engine.
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
}

// ErrBadToken is returned for a token that is malformed, badly signed,
// expired or names no valid user.
var ErrBadToken = errors.New("invalid or expired token")

// Keys signs and verifies tokens with one HS256 secret.
type Keys struct{ secret []byte }

// NewKeys uses secret; it must be at least 16 bytes so that a typo such as
// TALLY_JWT_SECRET=x does not silently make tokens forgeable.
func NewKeys(secret []byte) (*Keys, error) {
	if len(secret) < 16 {
		return nil, fmt.Errorf("the JWT secret must be at least 16 bytes (got %d)", len(secret))
	}
	return &Keys{secret: secret}, nil
}

// RandomSecret makes a secret for one run of a dev server.
func RandomSecret() []byte {
	s := make([]byte, 32)
	rand.Read(s)
	return s
}

type claims struct {
	Role string `json:"role,omitempty"`
	jwt.RegisteredClaims
}

// Sign makes a token for user; ttl 0 means no expiry (a negative ttl makes
// an already-expired token, for tests).
func (k *Keys) Sign(user engine.UserID, admin bool, ttl time.Duration) (string, error) {
	c := claims{RegisteredClaims: jwt.RegisteredClaims{
		Subject:  strconv.FormatUint(uint64(user), 10),
		IssuedAt: jwt.NewNumericDate(time.Now()),
	}}
	if admin {
		c.Role = "admin"
	}
	if ttl != 0 {
		c.ExpiresAt = jwt.NewNumericDate(time.Now().Add(ttl))
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(k.secret)
}

var parser = jwt.NewParser(jwt.WithValidMethods([]string{"HS256"}), jwt.WithLeeway(30*time.Second))

// Verify checks a token (without the "Bearer " prefix).
func (k *Keys) Verify(token string) (Principal, error) {
	var c claims
	_, err := parser.ParseWithClaims(token, &c, func(*jwt.Token) (any, error) { return k.secret, nil })
	if err != nil {
		return Principal{}, ErrBadToken
	}
	id, err := strconv.ParseUint(c.Subject, 10, 64)
	if err != nil || id == 0 {
		return Principal{}, ErrBadToken
	}
	return Principal{User: engine.UserID(id), Admin: c.Role == "admin"}, nil
}

// FromHeader verifies an Authorization header value. An empty header is
// anonymous (ok, no error); anything else must be a valid bearer token.
func (k *Keys) FromHeader(h string) (p Principal, present bool, err error) {
	h = strings.TrimSpace(h)
	if h == "" {
		return Principal{}, false, nil
	}
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return Principal{}, true, ErrBadToken
	}
	p, err = k.Verify(strings.TrimSpace(token))
	return p, true, err
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
