package kafkatest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/fencegate/fencegate/kafkaconn"
)

// CA is a certificate authority made for one test, with its certificate
// written as PEM to CertFile.
type CA struct {
	Cert     *x509.Certificate
	CertFile string
	Pool     *x509.CertPool
	key      *ecdsa.PrivateKey
	dir      string
}

// Pair is a certificate issued by a CA: the tls.Certificate and its PEM
// files.
type Pair struct {
	TLS      tls.Certificate
	CertFile string
	KeyFile  string
}

// NewCA makes a CA named name; its files live in t's temporary directory.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	ca, err := NewCAIn(t.TempDir(), name)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// NewCAIn makes a CA named name whose files live in dir (for a broker
// started outside a test: internal/kafkatest/kfakeserve).
func NewCAIn(dir, name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	ca := &CA{Cert: cert, key: key, dir: dir, Pool: x509.NewCertPool()}
	ca.Pool.AddCert(cert)
	ca.CertFile, err = ca.write(name+"-ca.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	return ca, err
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		panic(err) // crypto/rand does not fail on the systems Go supports
	}
	return n
}

func (ca *CA) write(name string, b []byte) (string, error) {
	p := filepath.Join(ca.dir, strings.NewReplacer("/", "_", ":", "_", "*", "_").Replace(name))
	return p, os.WriteFile(p, b, 0o600)
}

// Server issues a server certificate for 127.0.0.1, ::1 and localhost.
func (ca *CA) Server(t testing.TB, name string) Pair {
	t.Helper()
	return must(t)(ca.ServerPair(name))
}

// ServerPair is Server outside a test.
func (ca *CA) ServerPair(name string) (Pair, error) {
	return ca.issue(pkix.Name{CommonName: name}, x509.ExtKeyUsageServerAuth, []string{"localhost"},
		[]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")})
}

// Client issues a client certificate whose common name is name.
func (ca *CA) Client(t testing.TB, name string) Pair {
	t.Helper()
	return must(t)(ca.ClientPair(name))
}

// ClientPair is Client outside a test.
func (ca *CA) ClientPair(name string) (Pair, error) {
	return ca.issue(pkix.Name{CommonName: name}, x509.ExtKeyUsageClientAuth, nil, nil)
}

// ClientWithCNs issues a client certificate whose subject holds one
// common-name attribute per entry of cns, in that order (Go's
// Subject.CommonName keeps the last; OpenSSL-based CA policies often check
// the first).
func (ca *CA) ClientWithCNs(t testing.TB, cns ...string) Pair {
	t.Helper()
	var subject pkix.Name
	for _, cn := range cns {
		subject.ExtraNames = append(subject.ExtraNames, pkix.AttributeTypeAndValue{Type: oidCommonName, Value: cn})
	}
	return must(t)(ca.issue(subject, x509.ExtKeyUsageClientAuth, nil, nil))
}

// oidCommonName is the X.520 commonName attribute type.
var oidCommonName = asn1.ObjectIdentifier{2, 5, 4, 3}

func must(t testing.TB) func(Pair, error) Pair {
	return func(p Pair, err error) Pair {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
}

func (ca *CA) issue(subject pkix.Name, usage x509.ExtKeyUsage, dns []string, ips []net.IP) (Pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: subject,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		DNSNames: dns, IPAddresses: ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		return Pair{}, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return Pair{}, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return Pair{}, err
	}
	out := Pair{TLS: pair}
	name := subject.CommonName
	if name == "" {
		name = "cns"
	}
	if out.CertFile, err = ca.write(name+"-"+serialName(tmpl)+".pem", certPEM); err != nil {
		return Pair{}, err
	}
	out.KeyFile, err = ca.write(name+"-"+serialName(tmpl)+"-key.pem", keyPEM)
	return out, err
}

func serialName(c *x509.Certificate) string { return c.SerialNumber.Text(36) }

// TLSOptions says how a TLS cluster authenticates clients.
type TLSOptions struct {
	// ClientCA, when set, makes the brokers require a client certificate
	// signed by it (mutual TLS).
	ClientCA *CA
	// SASL is the mechanism of the one superuser User/Password (empty: no
	// SASL).
	SASL, User, Password string
}

// StartTLS starts a one-broker kfake cluster listening with TLS only, its
// certificate issued by ca, with topic seeded, closed when t ends. Conn is
// the matching client connection (SSL or SASL_SSL, ca's file as CA, a
// client certificate when the cluster asks for one).
//
// With an external cluster in the environment it makes the test's topic
// there (as Start) when that cluster is reached with at least what o asks
// for (TLS; SASL with o's mechanism; a client certificate), and skips the
// test otherwise. Conn is then the environment's, with its own CA, user
// and password: a test reads them from Conn, not from o.
func StartTLS(t testing.TB, ca *CA, o TLSOptions, topic string, partitions int32, opts ...kfake.Opt) *Cluster {
	t.Helper()
	if External() {
		conn := ExternalConn(t)
		if want, ok := o.metBy(conn); !ok {
			t.Skipf("needs a cluster reached with %s; %s is reached with %s", want, EnvBrokers, Describe(conn))
		}
		if len(opts) > 0 {
			(&Cluster{}).Fake(t)
		}
		return startExternal(t, conn, topic, partitions)
	}
	srv := ca.Server(t, "kfake")
	tc := &tls.Config{Certificates: []tls.Certificate{srv.TLS}, MinVersion: tls.VersionTLS12}
	conn := kafkaconn.Config{SecurityProtocol: kafkaconn.SSL, CAFile: ca.CertFile}
	if o.ClientCA != nil {
		tc.ClientAuth, tc.ClientCAs = tls.RequireAndVerifyClientCert, o.ClientCA.Pool
		cl := o.ClientCA.Client(t, "fencegate-test")
		conn.CertFile, conn.KeyFile = cl.CertFile, cl.KeyFile
	}
	opts = append([]kfake.Opt{kfake.TLS(tc)}, opts...)
	if o.SASL != "" {
		opts = append(opts, kfake.EnableSASL(), kfake.Superuser(o.SASL, o.User, o.Password))
		conn.SecurityProtocol, conn.SASLMechanism, conn.SASLUser, conn.SASLPassword = kafkaconn.SASLSSL, o.SASL, o.User, o.Password
	}
	c := Start(t, topic, partitions, opts...)
	conn.Brokers = c.Brokers
	c.Conn = conn
	return c
}

// metBy reports whether conn reaches its cluster with at least what o
// asks for, and what that is.
func (o TLSOptions) metBy(conn kafkaconn.Config) (string, bool) {
	want := kafkaconn.SSL
	if o.SASL != "" {
		want = kafkaconn.SASLSSL + "/" + o.SASL
	}
	if o.ClientCA != nil {
		want += "/mTLS"
	}
	ok := conn.TLS() && (o.SASL == "" || conn.SASL() && conn.SASLMechanism == o.SASL) && (o.ClientCA == nil || conn.CertFile != "")
	return want, ok
}
