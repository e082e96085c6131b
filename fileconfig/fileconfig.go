// Package fileconfig reads fencegate's YAML file of routes and clients.
//
// It owns the file's shape and the routes' validity, and nothing else: the
// gateway gives the clients their meaning (token hashes, allow patterns,
// act_for) and refuses an ambiguous set in gateway.NewAuthenticator. The
// materializer reads the same file for its routes without linking the
// gateway's acceptance code (docs/design.md, defence in depth).
//
// It must never import the gateway or the materializer, nor decide who a
// client is: a loader that knew the gateway's acceptance rules would give
// the materializer a code path shared with what it defends against.
package fileconfig

import (
	"cmp"
	"fmt"
	"os"

	"gopkg.in/yaml.v3"

	"github.com/fencegate/fencegate/txnmap"
)

// DefaultTransactionalIDPrefix is the transactional-id prefix of a file
// that names none.
const DefaultTransactionalIDPrefix = "default"

// File is the YAML file of routes and clients.
//
//	transactional_id_prefix: dev
//	routes:
//	  - pattern: "shard:*"
//	    topic: shard-output
//	    partitions: 16
//	    partition_rule: number   # or murmur2
//	clients:
//	  - name: dev-worker
//	    token_sha256: <hex sha-256 of the bearer token>
//	    allow: ["*"]
//	  - name: indexers
//	    certificate_cn: indexer.workers.example  # with --tls-client-ca
//	    allow: ["shard:*"]
//	  - name: indexers-v1          # an old binary during a rollout
//	    token_sha256: <hex>
//	    allow: ["shard:*"]
//	    kind: direct               # fenced (the default) or direct
//	    kafka_principal: User:indexer-v1
//
// allow governs reads (GET /v1/leases...) as it governs writes.
type File struct {
	TransactionalIDPrefix string         `yaml:"transactional_id_prefix"`
	Routes                []txnmap.Route `yaml:"routes"`
	Clients               []Client       `yaml:"clients"`
}

// Client is a worker identity as the file states it: a bearer token
// (stored as its SHA-256) and/or the common name of a TLS client
// certificate, and the lease-name patterns it may take, write and read.
// Load does not validate clients; gateway.NewAuthenticator does.
type Client struct {
	Name        string `yaml:"name"`
	TokenSHA256 string `yaml:"token_sha256"`
	// CertificateCN names this client's TLS client certificate: with
	// mutual TLS on (--tls-client-ca), a request without a bearer token
	// whose verified certificate has this subject common name is this
	// client.
	CertificateCN string   `yaml:"certificate_cn"`
	Allow         []string `yaml:"allow"`
	// ActFor names the other clients whose leases this client may renew,
	// release, move and write, and whose tokens it may read ("*": every
	// client; an operator's). A lease's owner id is bound to the client
	// that acquired it; without ActFor no other client may act as that
	// owner, whatever its Allow patterns (FM38).
	ActFor []string `yaml:"act_for"`
	// Kind says how the client's workers write: KindFenced (the default:
	// through the gateway) or KindDirect (an old binary that only takes
	// leases here and writes Kafka with its own producer). Direct clients
	// are judged by the rollout state of each route pattern (FM21).
	Kind string `yaml:"kind"`
	// KafkaPrincipal is a direct client's principal on the cluster
	// ("User:indexer-v1"): the Write ACLs `fencegate rollout enforce`
	// removes from the pattern's topic.
	KafkaPrincipal string `yaml:"kafka_principal"`
	// Admin lets the client use the admin API (/v1/admin/...: the
	// rollout states). Grant it to operators' credentials only.
	Admin bool `yaml:"admin"`
}

// The kinds of client.
const (
	// KindFenced writes through the gateway, stamped and fenced.
	KindFenced = "fenced"
	// KindDirect writes Kafka itself; only the lease API is the gateway's.
	KindDirect = "direct"
)

// IsDirect says whether the client writes Kafka itself.
func (c Client) IsDirect() bool { return c.Kind == KindDirect }

// Load reads a config file and validates its routes.
func Load(path string) (File, *txnmap.Router, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return File{}, nil, err
	}
	return Parse(raw)
}

// Parse parses YAML config bytes and validates their routes.
func Parse(raw []byte) (File, *txnmap.Router, error) {
	var f File
	if err := yaml.Unmarshal(raw, &f); err != nil {
		return f, nil, fmt.Errorf("config: %w", err)
	}
	f.TransactionalIDPrefix = cmp.Or(f.TransactionalIDPrefix, DefaultTransactionalIDPrefix)
	router, err := txnmap.NewRouter(f.TransactionalIDPrefix, f.Routes)
	if err != nil {
		return f, nil, fmt.Errorf("config: %w", err)
	}
	return f, router, nil
}
