// Command kfakeserve serves a kfake cluster on a fixed loopback port as a
// process of its own, so that `make test-external` can be proved here
// against a cluster it did not start, as it will be run against an
// operator's Apache Kafka. It is a test tool: kfake is not Apache Kafka.
//
//	go run ./internal/kafkatest/kfakeserve --listen 127.0.0.1:19092 --env kfake.env
//	go run ./internal/kafkatest/kfakeserve --listen 127.0.0.1:19093 --sasl-ssl --env kfake.env
//	set -a; . ./kfake.env; set +a; make test-external
//
// With --sasl-ssl the broker speaks SASL_SSL only (SCRAM-SHA-512, a
// certificate for 127.0.0.1 and localhost from a CA made at start) and
// checks ACLs: the test principal "gateway" gets what the release check
// asks an operator to grant (topics and transactional ids under the topic
// prefix), the principal "worker" nothing. Passwords are random, written
// to files beside the CA; the file --env names holds the
// FENCEGATE_TEST_KAFKA_* settings of the cluster. It serves until
// SIGINT or SIGTERM. With --data-dir it persists to that directory with
// every write synced, and a restart on the same directory (after SIGKILL
// too) serves what it had acknowledged (kafkatest.StartProcess).
//
// It must never stand in for Apache Kafka in a claim about Apache Kafka:
// a check it passes is proved on kfake only.
package main

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/fencegate/fencegate/internal/kafkatest"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:19092", "loopback address to serve on")
	saslSSL := flag.Bool("sasl-ssl", false, "SASL_SSL with SCRAM-SHA-512 and ACLs instead of PLAINTEXT")
	prefix := flag.String("topic-prefix", kafkatest.DefaultTopicPrefix, "the prefix the gateway principal's ACLs cover")
	dir := flag.String("dir", "", "where CA and password files go (default: a new temporary directory)")
	env := flag.String("env", "", "write the FENCEGATE_TEST_KAFKA_* settings of the cluster to this file")
	dataDir := flag.String("data-dir", "", "persist the cluster's state and log here, every write synced (kfake DataDir and SyncWrites), so that a restart after SIGKILL finds what was acknowledged")
	flag.Parse()
	if err := run(*listen, *saslSSL, *prefix, *dir, *env, *dataDir); err != nil {
		log.Fatalf("kfakeserve: %v", err)
	}
}

func run(listen string, saslSSL bool, prefix, dir, envFile, dataDir string) error {
	host, portS, err := net.SplitHostPort(listen)
	if err != nil {
		return err
	}
	if host != "127.0.0.1" { // where kfake listens
		return fmt.Errorf("--listen %s: 127.0.0.1:<port> only", listen)
	}
	port, err := strconv.Atoi(portS)
	if err != nil {
		return err
	}
	if dir == "" {
		if dir, err = os.MkdirTemp("", "kfakeserve-"); err != nil {
			return err
		}
	}
	vars := []string{kafkatest.EnvBrokers + "=" + listen, kafkatest.EnvTopicPrefix + "=" + prefix}
	opts := []kfake.Opt{kfake.Ports(port)}
	if dataDir != "" {
		opts = append(opts, kfake.DataDir(dataDir), kfake.SyncWrites())
	}
	if saslSSL {
		ca, err := kafkatest.NewCAIn(dir, "kfakeserve")
		if err != nil {
			return err
		}
		srv, err := ca.ServerPair("kfake")
		if err != nil {
			return err
		}
		gwPass, workerPass := secret(), secret()
		gwFile, workerFile := filepath.Join(dir, "gateway.password"), filepath.Join(dir, "worker.password")
		for f, p := range map[string]string{gwFile: gwPass, workerFile: workerPass} {
			if err := os.WriteFile(f, []byte(p+"\n"), 0o600); err != nil {
				return err
			}
		}
		const mech = "SCRAM-SHA-512"
		opts = append(opts, kfake.TLS(&tls.Config{Certificates: []tls.Certificate{srv.TLS}, MinVersion: tls.VersionTLS12}),
			kfake.EnableSASL(), kfake.EnableACLs(),
			kfake.Superuser(mech, "admin", secret()), // unused: the tests run as gateway and worker
			kfake.User(mech, "gateway", gwPass, gatewayACLs(prefix)...),
			kfake.User(mech, "worker", workerPass))
		vars = append(vars, kafkatest.EnvSecurityProtocol+"=SASL_SSL", kafkatest.EnvSASLMechanism+"="+mech,
			kafkatest.EnvSASLUser+"=gateway", kafkatest.EnvSASLPasswordFile+"="+gwFile, kafkatest.EnvCAFile+"="+ca.CertFile,
			kafkatest.EnvWorkerSASLUser+"=worker", kafkatest.EnvWorkerSASLPasswordFile+"="+workerFile)
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return err
	}
	defer c.Close()
	if envFile != "" {
		if err := os.WriteFile(envFile, []byte(strings.Join(vars, "\n")+"\n"), 0o600); err != nil {
			return err
		}
	}
	log.Printf("kfakeserve: serving %s on %s (pid %d); settings:\n%s", map[bool]string{false: "PLAINTEXT", true: "SASL_SSL"}[saslSSL],
		strings.Join(c.ListenAddrs(), ","), os.Getpid(), strings.Join(vars, "\n"))
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	return nil
}

// gatewayACLs are the release check's grants to its test principal: the
// topics it makes, reads, writes and deletes under the prefix, the
// transactional ids under fencegate/<prefix>, and the consumer groups of
// the materializer and the readers.
func gatewayACLs(prefix string) []kfake.ACL {
	pre := kmsg.ACLResourcePatternTypePrefixed
	var out []kfake.ACL
	add := func(res kmsg.ACLResourceType, name string, ops ...kmsg.ACLOperation) {
		for _, op := range ops {
			out = append(out, kfake.ACL{Resource: res, Name: name, Pattern: pre, Operation: op, Allow: true})
		}
	}
	add(kmsg.ACLResourceTypeTopic, prefix, kmsg.ACLOperationCreate, kmsg.ACLOperationDelete, kmsg.ACLOperationDescribe,
		kmsg.ACLOperationRead, kmsg.ACLOperationWrite)
	add(kmsg.ACLResourceTypeTransactionalId, "fencegate/"+prefix, kmsg.ACLOperationWrite, kmsg.ACLOperationDescribe)
	add(kmsg.ACLResourceTypeGroup, "fencegate", kmsg.ACLOperationRead, kmsg.ACLOperationDescribe)
	return out
}

func secret() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
