package kafkatest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
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
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(t), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{Cert: cert, key: key, dir: t.TempDir(), Pool: x509.NewCertPool()}
	ca.Pool.AddCert(cert)
	ca.CertFile = ca.write(t, name+"-ca.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	return ca
}

func serial(t testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (ca *CA) write(t testing.TB, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(ca.dir, strings.NewReplacer("/", "_", ":", "_", "*", "_").Replace(name))
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Server issues a server certificate for 127.0.0.1, ::1 and localhost.
func (ca *CA) Server(t testing.TB, name string) Pair {
	return ca.issue(t, name, x509.ExtKeyUsageServerAuth, []string{"localhost"},
		[]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")})
}

// Client issues a client certificate whose common name is name.
func (ca *CA) Client(t testing.TB, name string) Pair {
	return ca.issue(t, name, x509.ExtKeyUsageClientAuth, nil, nil)
}

func (ca *CA) issue(t testing.TB, name string, usage x509.ExtKeyUsage, dns []string, ips []net.IP) Pair {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(t), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		DNSNames: dns, IPAddresses: ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return Pair{TLS: pair, CertFile: ca.write(t, name+"-"+serialName(tmpl)+".pem", certPEM),
		KeyFile: ca.write(t, name+"-"+serialName(tmpl)+"-key.pem", keyPEM)}
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
func StartTLS(t testing.TB, ca *CA, o TLSOptions, topic string, partitions int32, opts ...kfake.Opt) *Cluster {
	t.Helper()
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
