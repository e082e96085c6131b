package gateway

import (
	"fmt"
	"os"

	"gopkg.in/yaml.v3"

	"github.com/fencegate/fencegate/txnmap"
)

// FileConfig is the YAML file of routes and clients.
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
//
// allow governs reads (GET /v1/leases...) as it governs writes.
type FileConfig struct {
	TransactionalIDPrefix string         `yaml:"transactional_id_prefix"`
	Routes                []txnmap.Route `yaml:"routes"`
	Clients               []Client       `yaml:"clients"`
}

// LoadFileConfig reads and validates a config file.
func LoadFileConfig(path string) (FileConfig, *txnmap.Router, *Authenticator, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return FileConfig{}, nil, nil, err
	}
	return ParseFileConfig(raw)
}

// ParseFileConfig parses and validates YAML config bytes.
func ParseFileConfig(raw []byte) (FileConfig, *txnmap.Router, *Authenticator, error) {
	var fc FileConfig
	if err := yaml.Unmarshal(raw, &fc); err != nil {
		return fc, nil, nil, fmt.Errorf("config: %w", err)
	}
	if fc.TransactionalIDPrefix == "" {
		fc.TransactionalIDPrefix = "default"
	}
	router, err := txnmap.NewRouter(fc.TransactionalIDPrefix, fc.Routes)
	if err != nil {
		return fc, nil, nil, fmt.Errorf("config: %w", err)
	}
	auth, err := NewAuthenticator(fc.Clients)
	if err != nil {
		return fc, nil, nil, fmt.Errorf("config: %w", err)
	}
	return fc, router, auth, nil
}
