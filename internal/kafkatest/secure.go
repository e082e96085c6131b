package kafkatest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/fencegate/fencegate/kafkaconn"
)

// The principals of kafka.sh's secured broker: each has a SCRAM-SHA-512
// password and a client certificate (CN = the name), and none has an
// ACL until a test grants one. admin is a super user.
const (
	PrincipalAdmin        = "admin"
	PrincipalGateway      = "gateway"
	PrincipalMaterializer = "materializer"
	PrincipalWorker       = "worker"
)

// secretDir is where kafka.sh keeps the secured broker's CA and the
// principals' passwords and certificates.
func (a *Apache) secretDir() string { return filepath.Join(a.node.Dir, "secure") }

// CAFile is the PEM CA of the secured broker's certificate.
func (a *Apache) CAFile() string { return filepath.Join(a.secretDir(), "ca.pem") }

// SCRAM is principal's connection to the secured broker: SASL_SSL,
// SCRAM-SHA-512, its password read from kafka.sh's file.
func (a *Apache) SCRAM(principal string) kafkaconn.Config {
	return kafkaconn.Config{Brokers: a.Brokers, SecurityProtocol: kafkaconn.SASLSSL, CAFile: a.CAFile(),
		SASLMechanism: kafkaconn.MechanismSCRAMSHA512, SASLUser: principal,
		SASLPasswordFile: filepath.Join(a.secretDir(), principal+".password")}
}

// MTLSBrokers is the secured broker's SSL listener that requires a client
// certificate and takes the principal from its CN.
func (a *Apache) MTLSBrokers() string { return "127.0.0.1:" + strconv.Itoa(a.node.Port+2) }

// MTLS is principal's connection to the mTLS listener with its
// certificate.
func (a *Apache) MTLS(principal string) kafkaconn.Config {
	d := a.secretDir()
	return kafkaconn.Config{Brokers: a.MTLSBrokers(), SecurityProtocol: kafkaconn.SSL, CAFile: a.CAFile(),
		CertFile: filepath.Join(d, principal+".pem"), KeyFile: filepath.Join(d, principal+"-key.pem")}
}

// OAuth is a connection to the SASL_SSL listener with OAUTHBEARER, tokens
// from tokenURL for client id and secret.
func (a *Apache) OAuth(tokenURL, id, secret string) kafkaconn.Config {
	return kafkaconn.Config{Brokers: a.Brokers, SecurityProtocol: kafkaconn.SASLSSL, CAFile: a.CAFile(),
		SASLMechanism: kafkaconn.MechanismOAuthBearer, SASLUser: id, SASLPassword: secret, OAuthTokenURL: tokenURL}
}

// Secure is the secured Apache Kafka broker of a test binary, with the
// identity provider whose tokens it accepts.
type Secure struct {
	*Apache
	Issuer *Issuer
}

// OAuthAudience is the audience the secured broker requires of tokens.
const OAuthAudience = "fencegate-kafka"

// secureReauth bounds a session on the secured broker: a client must
// log in again within it (KIP-368), so an expired token ends a
// connection that is not re-authenticated.
const secureReauth = 10 * time.Second

var shared struct {
	once sync.Once
	s    *Secure
	err  error
}

// SharedSecure returns the test binary's secured broker, started by its
// first caller (10-20 s): kafka.sh's FENCEGATE_KAFKA_SECURE=1 with
// OAUTHBEARER validated against Issuer's JWKS. It is shared by the tests
// of one binary (each makes its own topics, transactional ids and ACLs)
// and ends with the binary (kafka.sh's watcher). Skipped with an external
// cluster; the secured broker is this suite's own.
func SharedSecure(t testing.TB) *Secure {
	t.Helper()
	if External() {
		t.Skip("starts a secured Apache Kafka of its own: runs without " + EnvBrokers)
	}
	shared.once.Do(func() { shared.s, shared.err = startSecure() })
	if shared.err != nil {
		t.Fatalf("kafkatest: the secured Apache Kafka: %v", shared.err)
	}
	return shared.s
}

// sharedDirPrefix starts the directory of a secured broker, followed by
// the pid of its test binary.
const sharedDirPrefix = "fencegate-kafka-secure-"

// removeStale removes the directories of secured brokers whose test
// binary and broker have both ended (kafka.sh's watcher stops the broker;
// nothing removes its directory).
func removeStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), sharedDirPrefix+"*"))
	for _, d := range dirs {
		pid, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(d), sharedDirPrefix), "-")
		if alive(pid) {
			continue
		}
		b, _ := os.ReadFile(filepath.Join(d, "single", "kafka.pid"))
		if alive(strings.TrimSpace(string(b))) {
			continue
		}
		_ = os.RemoveAll(d)
	}
}

func alive(pid string) bool {
	n, err := strconv.Atoi(pid)
	return err == nil && n > 0 && syscall.Kill(n, 0) == nil
}

func startSecure() (*Secure, error) {
	removeStale()
	iss, err := NewIssuer()
	if err != nil {
		return nil, err
	}
	a, err := newApache(ApacheOptions{Secure: true,
		Env: []string{"FENCEGATE_KAFKA_OAUTH_JWKS_URL=" + iss.JWKSURL(), "FENCEGATE_KAFKA_OAUTH_AUDIENCE=" + OAuthAudience,
			"FENCEGATE_KAFKA_OAUTH_ISSUER=" + iss.url},
		Config: []string{"connections.max.reauth.ms=" + strconv.FormatInt(secureReauth.Milliseconds(), 10)}})
	if err != nil {
		return nil, err
	}
	if err := a.launch("fencegate-secure-probe", 1); err != nil {
		b, _ := os.ReadFile(a.node.LogFile(1))
		a.close()
		return nil, fmt.Errorf("%w\n%s", err, errorLines(string(b)))
	}
	return &Secure{Apache: a, Issuer: iss}, nil
}

// Topic makes a topic of partitions partitions named for the test, as
// admin, and returns its name.
func (s *Secure) Topic(t testing.TB, name string, partitions int32) string {
	t.Helper()
	topic := name + "-" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	if err := CreateTopic(s.Conn, topic, partitions); err != nil {
		t.Fatalf("kafkatest: %v", err)
	}
	return topic
}

// ACL is one allow rule for a principal of the secured broker.
type ACL struct {
	Principal string // the name; the principal is User:<name>
	Resource  kmsg.ACLResourceType
	Name      string // of the resource; "kafka-cluster" for the cluster
	Prefixed  bool
	Operation kmsg.ACLOperation
}

// String is the ACL as kafka-acls would list it.
func (a ACL) String() string {
	pat := "literal"
	if a.Prefixed {
		pat = "prefixed"
	}
	return fmt.Sprintf("User:%s %s on %s %s (%s)", a.Principal, a.Operation, a.Resource, a.Name, pat)
}

// Grant is the grant a gives, as fencegate names it to operators.
func (a ACL) Grant() kafkaconn.Grant {
	return kafkaconn.Grant{Op: a.Operation, Resource: a.Resource, Name: a.Name, Prefixed: a.Prefixed}
}

func (a ACL) pattern() kmsg.ACLResourcePatternType {
	if a.Prefixed {
		return kmsg.ACLResourcePatternTypePrefixed
	}
	return kmsg.ACLResourcePatternTypeLiteral
}

// Grant creates acls as admin (CreateAcls, what kafka-acls --add sends).
func (s *Secure) Grant(t testing.TB, acls ...ACL) {
	t.Helper()
	req := kmsg.NewPtrCreateACLsRequest()
	for _, a := range acls {
		c := kmsg.NewCreateACLsRequestCreation()
		c.ResourceType, c.ResourceName, c.ResourcePatternType = a.Resource, a.Name, a.pattern()
		c.Principal, c.Host, c.Operation = "User:"+a.Principal, "*", a.Operation
		c.PermissionType = kmsg.ACLPermissionTypeAllow
		req.Creations = append(req.Creations, c)
	}
	s.adminRequest(t, func(ctx context.Context, r kmsg.Requestor) error {
		resp, err := req.RequestWith(ctx, r)
		if err != nil {
			return err
		}
		for i, res := range resp.Results {
			if err := kerr.ErrorForCode(res.ErrorCode); err != nil {
				return fmt.Errorf("grant %s: %w", acls[i], err)
			}
		}
		return waitACLs(ctx, r, acls, true)
	})
}

// Revoke deletes acls as admin (DeleteAcls, kafka-acls --remove).
func (s *Secure) Revoke(t testing.TB, acls ...ACL) {
	t.Helper()
	req := kmsg.NewPtrDeleteACLsRequest()
	for _, a := range acls {
		f := kmsg.NewDeleteACLsRequestFilter()
		name, principal, host := a.Name, "User:"+a.Principal, "*"
		f.ResourceType, f.ResourceName, f.ResourcePatternType = a.Resource, &name, a.pattern()
		f.Principal, f.Host, f.Operation, f.PermissionType = &principal, &host, a.Operation, kmsg.ACLPermissionTypeAllow
		req.Filters = append(req.Filters, f)
	}
	s.adminRequest(t, func(ctx context.Context, r kmsg.Requestor) error {
		resp, err := req.RequestWith(ctx, r)
		if err != nil {
			return err
		}
		for i, res := range resp.Results {
			if err := kerr.ErrorForCode(res.ErrorCode); err != nil {
				return fmt.Errorf("revoke %s: %w", acls[i], err)
			}
		}
		return waitACLs(ctx, r, acls, false)
	})
}

// waitACLs polls DescribeAcls until each of acls is (present) or is not
// (!present) in the broker's authorizer: an ACL is enforced once the
// broker has replayed it from the metadata log, a moment after CreateAcls
// answers.
func waitACLs(ctx context.Context, r kmsg.Requestor, acls []ACL, present bool) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		done := true
		for _, a := range acls {
			has, err := hasACL(ctx, r, a)
			if err != nil {
				return err
			}
			done = done && has == present
		}
		if done {
			return nil
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return fmt.Errorf("ACLs %v not applied by the broker: %w", acls, ctx.Err())
		}
	}
}

func hasACL(ctx context.Context, r kmsg.Requestor, a ACL) (bool, error) {
	req := kmsg.NewPtrDescribeACLsRequest()
	name, principal := a.Name, "User:"+a.Principal
	req.ResourceType, req.ResourceName, req.ResourcePatternType = a.Resource, &name, a.pattern()
	req.Principal, req.Operation, req.PermissionType = &principal, a.Operation, kmsg.ACLPermissionTypeAllow
	resp, err := req.RequestWith(ctx, r)
	if err != nil {
		return false, err
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return false, err
	}
	return len(resp.Resources) > 0, nil
}

func (s *Secure) adminRequest(t testing.TB, do func(context.Context, kmsg.Requestor) error) {
	t.Helper()
	cl, err := client(s.Conn)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := do(ctx, cl); err != nil {
		t.Fatalf("kafkatest: %v", err)
	}
}

// Password returns principal's SCRAM password.
func (a *Apache) Password(principal string) string {
	b, _ := os.ReadFile(filepath.Join(a.secretDir(), principal+".password"))
	return strings.TrimSpace(string(b))
}

// NewCluster makes a topic of partitions partitions for the test (named
// after topic) and returns it as a Cluster reached with conn, with a
// transactional-id prefix (RouterPrefix) of its own.
func (s *Secure) NewCluster(t testing.TB, topic string, partitions int32, conn kafkaconn.Config) *Cluster {
	t.Helper()
	name := s.Topic(t, topic, partitions)
	return &Cluster{Brokers: conn.Brokers, Conn: conn, Topic: name, suffix: name}
}

// errorLines are the ERROR lines of a broker's log, the first 20.
func errorLines(log string) string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "ERROR") && len(out) < 20 {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
