package gateway

import (
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// saslMechanism returns the franz-go mechanism matching cfg, nil for none.
func saslMechanism(cfg KafkaConfig) sasl.Mechanism {
	switch cfg.SASLMechanism {
	case "PLAIN":
		return plain.Auth{User: cfg.SASLUser, Pass: cfg.SASLPassword}.AsMechanism()
	case "SCRAM-SHA-256":
		return scram.Auth{User: cfg.SASLUser, Pass: cfg.SASLPassword}.AsSha256Mechanism()
	case "SCRAM-SHA-512":
		return scram.Auth{User: cfg.SASLUser, Pass: cfg.SASLPassword}.AsSha512Mechanism()
	}
	return nil
}
