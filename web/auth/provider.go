package auth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/time/rate"
)

// Provider holds an identity provider's JSON Web Key Set: read once from
// a file, or fetched from a URL and kept in memory. The key handling —
// parsing the set, matching a token's kid and alg to a key, the periodic
// and on-demand refreshes — is github.com/MicahParks/keyfunc's (over
// github.com/MicahParks/jwkset); what Provider adds is the policy:
//
//   - Each fetch has a timeout (ProviderOptions.Timeout).
//   - A token naming a kid the set does not hold makes the set be fetched
//     again, at most once per UnknownKeyInterval however many such tokens
//     arrive, so a flood of made-up kids costs the provider one request
//     per interval; the tokens waiting meanwhile are refused without
//     waiting longer than Timeout.
//   - A fetch that fails keeps the keys already held: while the provider
//     is down, tokens signed by a key it listed before still verify.
//   - A provider down at start is not fatal: the server starts, and tokens
//     are refused, saying the keys could not be fetched, until a fetch
//     succeeds (the next unknown-kid refresh or the periodic one).
type Provider struct {
	source string
	kf     keyfunc.Keyfunc
	cancel context.CancelFunc

	mu      sync.Mutex
	lastErr error // the last fetch's failure; nil after a success
	fetched bool  // a fetch has succeeded
}

// ProviderOptions configure a Provider. Zero durations take the defaults
// in brackets.
type ProviderOptions struct {
	// Source is an http(s) URL, or a file path.
	Source string
	// Timeout bounds one fetch of the set [10s].
	Timeout time.Duration
	// RefreshInterval is how often the set is fetched anyway [1h].
	RefreshInterval time.Duration
	// UnknownKeyInterval is the least time between two fetches made
	// because a token named an unknown kid [1m].
	UnknownKeyInterval time.Duration
}

// OpenProvider opens the key set of o.Source. A file must hold a valid
// set; a URL that cannot be fetched now is logged and retried later.
func OpenProvider(o ProviderOptions) (*Provider, error) {
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.RefreshInterval <= 0 {
		o.RefreshInterval = time.Hour
	}
	if o.UnknownKeyInterval <= 0 {
		o.UnknownKeyInterval = time.Minute
	}
	p := &Provider{source: o.Source}
	if !strings.HasPrefix(o.Source, "http://") && !strings.HasPrefix(o.Source, "https://") {
		raw, err := os.ReadFile(o.Source)
		if err != nil {
			return nil, fmt.Errorf("-jwks: %w", err)
		}
		if p.kf, err = keyfunc.NewJWKSetJSON(raw); err != nil {
			return nil, fmt.Errorf("-jwks %s is not a JSON Web Key Set: %w", o.Source, err)
		}
		keys, err := p.kf.Storage().KeyReadAll(context.Background())
		if err != nil || len(keys) == 0 {
			return nil, fmt.Errorf("-jwks %s holds no key Tally can use (RSA, EC P-256 or Ed25519 public keys)", o.Source)
		}
		p.fetched = true
		return p, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	client := &http.Client{Timeout: o.Timeout, Transport: fetchObserver{p, http.DefaultTransport}}
	noErrorAtStart := true
	kf, err := keyfunc.NewDefaultOverrideCtx(ctx, []string{o.Source}, keyfunc.Override{
		Client:                    client,
		HTTPTimeout:               o.Timeout,
		NoErrorReturnFirstHTTPReq: &noErrorAtStart,
		RefreshInterval:           o.RefreshInterval,
		RefreshUnknownKID:         rate.NewLimiter(rate.Every(o.UnknownKeyInterval), 1),
		// Also the deadline of the refresh itself (jwkset uses one
		// context for both): a token waits at most this long.
		RateLimitWaitMax: o.Timeout,
		RefreshErrorHandlerFunc: func(u string) func(context.Context, error) {
			return func(_ context.Context, err error) {
				p.setErr(err)
				slog.Warn("identity provider: fetching its key set failed; the keys fetched before stay in use", "jwks", u, "err", err)
			}
		},
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("-jwks %s: %w", o.Source, err)
	}
	p.kf = kf
	if ok, err := p.status(); !ok {
		slog.Warn("identity provider: its key set could not be fetched at start; its tokens are refused until it answers", "jwks", o.Source, "err", err)
	}
	return p, nil
}

// Close stops the periodic refresh.
func (p *Provider) Close() {
	if p.cancel != nil {
		p.cancel()
	}
}

// Keys returns how many keys the set holds now.
func (p *Provider) Keys() int {
	keys, _ := p.kf.Storage().KeyReadAll(context.Background())
	return len(keys)
}

func (p *Provider) setErr(err error) {
	p.mu.Lock()
	p.lastErr = err
	if err == nil {
		p.fetched = true
	}
	p.mu.Unlock()
}

// status reports whether a fetch has ever succeeded, and the last one's
// failure.
func (p *Provider) status() (fetched bool, lastErr error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fetched, p.lastErr
}

// fetchObserver records each fetch's outcome, so that a refusal can say
// whether the provider is reachable.
type fetchObserver struct {
	p    *Provider
	next http.RoundTripper
}

func (f fetchObserver) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := f.next.RoundTrip(r)
	switch {
	case err != nil:
		f.p.setErr(err)
	case resp.StatusCode != http.StatusOK:
		f.p.setErr(fmt.Errorf("HTTP status %d", resp.StatusCode))
	default:
		f.p.setErr(nil)
	}
	return resp, err
}

// key is the jwt.Keyfunc for a token the provider signed. Its refusals
// say what went wrong but not the fetch's error, which names the
// provider's address: that goes to the server's log.
func (p *Provider) key(t *jwt.Token) (any, error) {
	kid, _ := t.Header["kid"].(string)
	if fetched, _ := p.status(); !fetched && kid == "" {
		return nil, refuse("the identity provider's key set (-jwks) could not be fetched yet, so its tokens cannot be verified (the server's log says why)")
	}
	key, err := p.kf.Keyfunc(t)
	if err == nil {
		return key, nil
	}
	fetched, lastErr := p.status()
	switch {
	case !fetched:
		return nil, refuse("the identity provider's key set (-jwks) could not be fetched yet, so its tokens cannot be verified (the server's log says why)")
	case errors.Is(err, jwkset.ErrKeyNotFound) || strings.Contains(err.Error(), "rate limiter"):
		if lastErr != nil {
			return nil, refuse("token key id %s is not in the identity provider's key set, and the provider could not be asked again (the server's log says why)", describeClaim(kid))
		}
		return nil, refuse("token key id %s is not in the identity provider's key set (-jwks)", describeClaim(kid))
	case strings.Contains(err.Error(), `"alg" parameter`):
		return nil, refuse("token algorithm %s is not the algorithm of its key %s in the identity provider's key set", t.Method.Alg(), describeClaim(kid))
	}
	slog.Debug("identity provider: token key not usable", "kid", kid, "err", err)
	return nil, refuse("token key %s in the identity provider's key set cannot verify it", describeClaim(kid))
}
