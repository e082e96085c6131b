package kafkaconn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
)

// MechanismOAuthBearer is SASL OAUTHBEARER with OIDC client credentials:
// SASLUser is the client id, the SASL password (or its file) the client
// secret, OAuthTokenURL the identity provider's token endpoint.
const MechanismOAuthBearer = "OAUTHBEARER"

// ErrTokenEndpoint marks a token the identity provider did not give (its
// endpoint unreachable, or answering with an error): the broker was never
// asked, so nothing about the Kafka login is known yet.
var ErrTokenEndpoint = errors.New("kafka: OAUTHBEARER token endpoint")

// tokenRefreshFraction is the part of a token's lifetime after which a
// new one is fetched: librdkafka's and Kafka's own default (80%).
const tokenRefreshFraction = 0.8

// tokenTimeout bounds one token request.
const tokenTimeout = 10 * time.Second

// validateOAuth checks the settings that only OAUTHBEARER takes.
func (c Config) validateOAuth() error {
	if c.SASLMechanism != MechanismOAuthBearer {
		if c.OAuthTokenURL != "" || c.OAuthScope != "" {
			return fmt.Errorf("kafka: OAuth token URL or scope given but SASL mechanism is %q (they would be ignored)", c.SASLMechanism)
		}
		return nil
	}
	if c.OAuthTokenURL == "" {
		return errors.New("kafka: OAUTHBEARER needs the identity provider's token endpoint (--kafka-oauth-token-url)")
	}
	u, err := url.Parse(c.OAuthTokenURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return fmt.Errorf("kafka: OAuth token URL %q is not an http(s) URL", c.OAuthTokenURL)
	}
	return nil
}

// oauthMechanism is franz-go's OAUTHBEARER with tokens from the client
// credentials grant, each kept until tokenRefreshFraction of its life.
func (c Config) oauthMechanism() sasl.Mechanism {
	src := &tokenSource{conn: c}
	return oauth.Oauth(func(ctx context.Context) (oauth.Auth, error) {
		tok, err := src.token(ctx)
		return oauth.Auth{Token: tok}, err
	})
}

// tokenSource fetches and caches one client's token.
type tokenSource struct {
	conn    Config
	mu      sync.Mutex
	tok     string
	renewAt time.Time
}

func (s *tokenSource) token(ctx context.Context) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tok != "" && time.Now().Before(s.renewAt) {
		return s.tok, nil
	}
	tok, life, err := s.conn.fetchToken(ctx)
	if err != nil {
		return "", err
	}
	s.tok, s.renewAt = tok, time.Now().Add(time.Duration(float64(life)*tokenRefreshFraction))
	return tok, nil
}

// fetchToken asks the token endpoint for a token (RFC 6749 section 4.4,
// the client authenticated with HTTP Basic as librdkafka does). Its
// errors name the endpoint and client id, never the secret.
func (c Config) fetchToken(ctx context.Context) (string, time.Duration, error) {
	secret, err := c.password()
	if err != nil {
		return "", 0, err
	}
	form := url.Values{"grant_type": {"client_credentials"}}
	if c.OAuthScope != "" {
		form.Set("scope", c.OAuthScope)
	}
	ctx, cancel := context.WithTimeout(ctx, tokenTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.OAuthTokenURL, strings.NewReader(form.Encode()))
	if err != nil {
		return "", 0, fmt.Errorf("%w %s: %v", ErrTokenEndpoint, c.OAuthTokenURL, err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(url.QueryEscape(c.SASLUser), url.QueryEscape(secret))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", 0, fmt.Errorf("%w %s unreachable: %v", ErrTokenEndpoint, c.OAuthTokenURL, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return "", 0, fmt.Errorf("%w %s refused client %q: HTTP %d %s", ErrTokenEndpoint, c.OAuthTokenURL, c.SASLUser,
			resp.StatusCode, strings.TrimSpace(string(body[:min(len(body), 200)])))
	}
	var out struct {
		AccessToken string `json:"access_token"`
		ExpiresIn   int64  `json:"expires_in"`
	}
	if err := json.Unmarshal(body, &out); err != nil || out.AccessToken == "" {
		return "", 0, fmt.Errorf("%w %s: no access_token in the answer for client %q", ErrTokenEndpoint, c.OAuthTokenURL, c.SASLUser)
	}
	life := time.Duration(out.ExpiresIn) * time.Second
	if life <= 0 {
		life = time.Minute
	}
	return out.AccessToken, life, nil
}

// oidcConfig sets librdkafka's OAUTHBEARER with its own OIDC token
// refresh (sasl.oauthbearer.method=oidc): librdkafka fetches a token at
// start and again before each expires, and re-authenticates its broker
// connections with it (KIP-368).
func oidcConfig(cm kafka.ConfigMap, c Config, secret string) {
	cm["sasl.oauthbearer.method"] = "oidc"
	cm["sasl.oauthbearer.client.id"] = c.SASLUser
	cm["sasl.oauthbearer.client.secret"] = secret
	cm["sasl.oauthbearer.token.endpoint.url"] = c.OAuthTokenURL
	if c.OAuthScope != "" {
		cm["sasl.oauthbearer.scope"] = c.OAuthScope
	}
}
