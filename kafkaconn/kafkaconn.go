// Package kafkaconn is the one description of how fencegate reaches Kafka.
// Every client of the project (the gateway's transactional producers and
// its franz-go inspector, the materializer's consumer, verify and the load
// harness) builds its connection from one Config, so a cluster that needs
// TLS, mTLS or SASL is configured once and reached the same way by all.
//
// It guarantees:
//
//   - the four security protocols (PLAINTEXT, SSL, SASL_PLAINTEXT,
//     SASL_SSL) and the SASL mechanisms PLAIN, SCRAM-SHA-256,
//     SCRAM-SHA-512 and OAUTHBEARER (OIDC client credentials) mean the
//     same for librdkafka and franz-go;
//   - TLS verifies the brokers' certificates and host names against CAFile
//     (or the system roots); there is no switch to skip verification;
//   - a setting that would be silently ignored (a CA file without TLS, a
//     SASL user without SASL, half a client key pair) is an error;
//   - the SASL password never appears in String, in slog output or in an
//     error of this package.
//
// It imports nothing of fencegate.
//
// It must never offer a switch that skips certificate verification, nor
// let the SASL password reach a string, a log or an error.
package kafkaconn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// Security protocols, as Kafka and librdkafka name them.
const (
	Plaintext     = "PLAINTEXT"
	SSL           = "SSL"
	SASLPlaintext = "SASL_PLAINTEXT"
	SASLSSL       = "SASL_SSL"
)

// SASL mechanisms.
const (
	MechanismPlain       = "PLAIN"
	MechanismSCRAMSHA256 = "SCRAM-SHA-256"
	MechanismSCRAMSHA512 = "SCRAM-SHA-512"
)

// Config says how to reach a Kafka cluster. The zero value with Brokers set
// is PLAINTEXT without authentication.
type Config struct {
	// Brokers is the bootstrap list, "host:port,host:port" (required).
	Brokers string
	// SecurityProtocol is PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.
	// Default: SASL_PLAINTEXT when SASLMechanism is set, else PLAINTEXT.
	SecurityProtocol string
	// SASLMechanism is PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or
	// OAUTHBEARER; required with the SASL protocols, refused with the
	// others.
	SASLMechanism string
	// SASLUser is the SASL user; with OAUTHBEARER, the OAuth client id.
	SASLUser string
	// SASLPassword is the SASL password (with OAUTHBEARER, the OAuth
	// client secret). SASLPasswordFile, when set, is
	// read instead each time a client is built, so a rotated password
	// file is used by every client built after the rotation. Never both.
	SASLPassword     string
	SASLPasswordFile string
	// CAFile is a PEM bundle of the CAs that sign the brokers'
	// certificates (SSL, SASL_SSL). Empty: the system roots.
	CAFile string
	// CertFile and KeyFile are this client's PEM certificate and
	// unencrypted PEM key for mutual TLS; both or neither.
	CertFile string
	KeyFile  string
	// OAuthTokenURL is the identity provider's token endpoint, where
	// OAUTHBEARER exchanges the client id and secret for tokens (OIDC
	// client credentials); required with OAUTHBEARER, refused otherwise.
	OAuthTokenURL string
	// OAuthScope is the scope asked for with each token (optional).
	OAuthScope string
}

// Protocol returns the security protocol in effect (the default filled in).
func (c Config) Protocol() string {
	if c.SecurityProtocol != "" {
		return strings.ToUpper(c.SecurityProtocol)
	}
	if c.SASLMechanism != "" {
		return SASLPlaintext
	}
	return Plaintext
}

// TLS reports whether the protocol in effect encrypts.
func (c Config) TLS() bool { p := c.Protocol(); return p == SSL || p == SASLSSL }

// SASL reports whether the protocol in effect authenticates with SASL.
func (c Config) SASL() bool { p := c.Protocol(); return p == SASLPlaintext || p == SASLSSL }

// Validate reports the first setting that is missing, unknown or would be
// ignored. It reads the CA, certificate, key and password files, so a
// missing or unparsable file is reported before any client is built.
func (c Config) Validate() error {
	if strings.TrimSpace(c.Brokers) == "" {
		return errors.New("kafka: no brokers")
	}
	switch c.Protocol() {
	case Plaintext, SSL, SASLPlaintext, SASLSSL:
	default:
		return fmt.Errorf("kafka: security protocol %q is none of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL", c.SecurityProtocol)
	}
	if c.SASL() {
		switch c.SASLMechanism {
		case MechanismPlain, MechanismSCRAMSHA256, MechanismSCRAMSHA512, MechanismOAuthBearer:
		case "":
			return fmt.Errorf("kafka: %s needs a SASL mechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER)", c.Protocol())
		default:
			return fmt.Errorf("kafka: SASL mechanism %q is none of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER", c.SASLMechanism)
		}
		if err := c.validateOAuth(); err != nil {
			return err
		}
		if c.SASLUser == "" {
			return fmt.Errorf("kafka: %s needs a SASL user", c.Protocol())
		}
		if c.SASLPassword != "" && c.SASLPasswordFile != "" {
			return errors.New("kafka: SASL password given both directly and as a file; give one")
		}
		// Without a password the login can only fail, and only at the
		// first connection, as a timeout (FM32).
		if c.SASLPassword == "" && c.SASLPasswordFile == "" {
			return fmt.Errorf("kafka: %s with SASL user %q but no SASL password: set FENCEGATE_KAFKA_SASL_PASSWORD or --kafka-sasl-password-file", c.Protocol(), c.SASLUser)
		}
		if _, err := c.password(); err != nil {
			return err
		}
	} else if c.SASLMechanism != "" || c.SASLUser != "" || c.SASLPassword != "" || c.SASLPasswordFile != "" ||
		c.OAuthTokenURL != "" || c.OAuthScope != "" {
		return fmt.Errorf("kafka: SASL settings given but security protocol is %s (they would be ignored)", c.Protocol())
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return errors.New("kafka: client certificate and key go together; give both or neither")
	}
	if !c.TLS() {
		if c.CAFile != "" || c.CertFile != "" {
			return fmt.Errorf("kafka: TLS files given but security protocol is %s (they would be ignored)", c.Protocol())
		}
		return nil
	}
	_, err := c.TLSConfig()
	return err
}

// password returns the SASL password, read from SASLPasswordFile when set.
// Its errors name the file, never the content.
func (c Config) password() (string, error) {
	if c.SASLPasswordFile == "" {
		return c.SASLPassword, nil
	}
	b, err := os.ReadFile(c.SASLPasswordFile)
	if err != nil {
		return "", fmt.Errorf("kafka: SASL password file: %w", err)
	}
	p := strings.TrimRight(string(b), "\r\n")
	if p == "" {
		return "", fmt.Errorf("kafka: SASL password file %s is empty", c.SASLPasswordFile)
	}
	return p, nil
}

// TLSConfig returns the client TLS configuration: the brokers' CA (system
// roots when CAFile is empty), the client key pair for mTLS, TLS 1.2 at
// least. Host names are verified.
func (c Config) TLSConfig() (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("kafka: CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("kafka: CA file %s holds no PEM certificate", c.CAFile)
		}
		tc.RootCAs = pool
	}
	if c.CertFile != "" {
		kp, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("kafka: client certificate %s and key %s: %w", c.CertFile, c.KeyFile, err)
		}
		tc.Certificates = []tls.Certificate{kp}
	}
	return tc, nil
}

// ConfigMap returns the librdkafka connection properties
// (bootstrap.servers, security.protocol, sasl.*, ssl.*). Callers add their
// own client properties to it.
func (c Config) ConfigMap() (kafka.ConfigMap, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	cm := kafka.ConfigMap{"bootstrap.servers": c.Brokers, "security.protocol": strings.ToLower(c.Protocol())}
	if c.SASL() {
		pw, err := c.password()
		if err != nil {
			return nil, err
		}
		cm["sasl.mechanism"] = c.SASLMechanism
		if c.SASLMechanism == MechanismOAuthBearer {
			oidcConfig(cm, c, pw)
		} else {
			cm["sasl.username"] = c.SASLUser
			cm["sasl.password"] = pw
		}
	}
	if c.TLS() {
		// librdkafka's default since 2.0; set so that no older library or
		// Extra property can quietly turn host name checks off.
		cm["ssl.endpoint.identification.algorithm"] = "https"
		if c.CAFile != "" {
			cm["ssl.ca.location"] = c.CAFile
		}
		if c.CertFile != "" {
			cm["ssl.certificate.location"] = c.CertFile
			cm["ssl.key.location"] = c.KeyFile
		}
	}
	return cm, nil
}

// KgoOpts returns the franz-go options of the connection: seed brokers,
// the TLS dialer and the SASL mechanism.
func (c Config) KgoOpts() ([]kgo.Opt, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	opts := []kgo.Opt{kgo.SeedBrokers(c.BrokerList()...)}
	if c.TLS() {
		tc, err := c.TLSConfig()
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	if c.SASL() {
		m, err := c.mechanism()
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

func (c Config) mechanism() (sasl.Mechanism, error) {
	pw, err := c.password()
	if err != nil {
		return nil, err
	}
	switch c.SASLMechanism {
	case MechanismOAuthBearer:
		return c.oauthMechanism(), nil
	case MechanismPlain:
		return plain.Auth{User: c.SASLUser, Pass: pw}.AsMechanism(), nil
	case MechanismSCRAMSHA256:
		return scram.Auth{User: c.SASLUser, Pass: pw}.AsSha256Mechanism(), nil
	case MechanismSCRAMSHA512:
		return scram.Auth{User: c.SASLUser, Pass: pw}.AsSha512Mechanism(), nil
	}
	return nil, fmt.Errorf("kafka: SASL mechanism %q is none of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER", c.SASLMechanism)
}

// BrokerList splits Brokers at commas, dropping empty entries and spaces.
func (c Config) BrokerList() []string {
	var out []string
	for _, b := range strings.Split(c.Brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

// String describes the connection without its password.
func (c Config) String() string {
	s := fmt.Sprintf("brokers=%s protocol=%s", c.Brokers, c.Protocol())
	if c.SASL() {
		s += fmt.Sprintf(" sasl=%s user=%s", c.SASLMechanism, c.SASLUser)
	}
	if c.OAuthTokenURL != "" {
		s += " token_url=" + c.OAuthTokenURL
	}
	if c.CAFile != "" {
		s += " ca=" + c.CAFile
	}
	if c.CertFile != "" {
		s += " cert=" + c.CertFile
	}
	return s
}

// LogValue keeps the password out of slog output.
func (c Config) LogValue() slog.Value { return slog.StringValue(c.String()) }

// ErrHandshake marks a connection refused by TLS verification or SASL
// authentication: a configuration error that retrying does not mend.
var ErrHandshake = errors.New("kafka: TLS or SASL handshake refused")

// Probe asks the cluster for metadata over this connection. A failed TLS
// verification or SASL authentication is wrapped in ErrHandshake with what
// to check; anything else (the cluster not reachable yet) is returned as
// it is.
func (c Config) Probe(ctx context.Context) error {
	opts, err := c.KgoOpts()
	if err != nil {
		return err
	}
	watch := &AuthWatch{}
	cl, err := kgo.NewClient(append(opts, kgo.RequestRetries(0), kgo.WithHooks(watch))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	_, err = kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
	return watch.Explain(c, err)
}

// Explain wraps a failed TLS verification or SASL authentication in
// ErrHandshake with the setting to check; other errors pass unchanged.
func (c Config) Explain(err error) error {
	if err == nil {
		return nil
	}
	var unknownCA x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	var verify *tls.CertificateVerificationError
	var rec tls.RecordHeaderError
	switch {
	case errors.As(err, &unknownCA), errors.As(err, &verify) && errors.As(verify.Err, &unknownCA):
		return fmt.Errorf("%w: the brokers' certificate is not signed by a CA in %s (%v)", ErrHandshake, c.caName(), err)
	case errors.As(err, &host):
		return fmt.Errorf("%w: the brokers' certificate does not name the host dialled; bootstrap with the name in the certificate (%v)", ErrHandshake, err)
	case errors.As(err, &invalid), errors.As(err, &verify):
		return fmt.Errorf("%w: the brokers' certificate does not verify (%v)", ErrHandshake, err)
	// A TLS alert from the broker reaches the client only as text.
	case strings.Contains(err.Error(), "remote error: tls:"):
		return fmt.Errorf("%w: the broker refused the TLS handshake (%v); mutual TLS needs a client certificate the broker trusts", ErrHandshake, err)
	case errors.As(err, &rec):
		return fmt.Errorf("%w: the broker does not speak TLS (%v); is the security protocol right?", ErrHandshake, err)
	}
	if errors.Is(err, kerr.SaslAuthenticationFailed) || errors.Is(err, kerr.UnsupportedSaslMechanism) {
		return fmt.Errorf("%w: SASL %s as %q refused (%v)", ErrHandshake, c.SASLMechanism, c.SASLUser, err)
	}
	return err
}

func (c Config) caName() string {
	if c.CAFile == "" {
		return "the system roots"
	}
	return c.CAFile
}
