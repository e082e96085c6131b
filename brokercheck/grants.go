package brokercheck

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/fencegate/fencegate/kafkaconn"
	"github.com/fencegate/fencegate/txnmap"
)

// GatewayGrants are the grants docs/security.md lists for the gateway's
// principal: Write on each route's topic, and Write on the deployment's
// transactional ids, pattern prefixed. Describe on both is implied by
// Write, and a transactional producer needs no IdempotentWrite.
func GatewayGrants(topics []string, prefix string) []kafkaconn.Grant {
	var out []kafkaconn.Grant
	for _, t := range topics {
		out = append(out, kafkaconn.Grant{Op: kmsg.ACLOperationWrite, Resource: kmsg.ACLResourceTypeTopic, Name: t})
	}
	return append(out, kafkaconn.Grant{Op: kmsg.ACLOperationWrite, Resource: kmsg.ACLResourceTypeTransactionalId,
		Name: txnmap.IDPrefix(prefix), Prefixed: true})
}

// GrantsProbeID is the transactional id whose InitProducerId proves
// Write on the deployment's transactional ids: under the prefix, with a
// '~' that no lease's id holds, so it fences no lease's producer.
func GrantsProbeID(prefix string) string { return txnmap.IDPrefix(prefix) + "~grants" }

// Grants proves, as cfg.Conn's principal, that it holds GatewayGrants:
// Write in each route topic's authorized operations (Metadata, KIP-430:
// no Describe on the cluster needed, unlike reading the ACLs) and an
// InitProducerId on GrantsProbeID (Write on the transactional ids, the
// request each handover starts with). It returns nil, a
// *kafkaconn.MissingGrantError naming the principal and each grant
// refused (errors.Is kafkaconn.ErrMissingGrant), or an error that is no
// answer about rights (the cluster did not answer, a refused login).
func Grants(ctx context.Context, cfg Config) error {
	opts, err := cfg.Conn.KgoOpts()
	if err != nil {
		return err
	}
	watch := &kafkaconn.AuthWatch{}
	cl, err := kgo.NewClient(append(opts, kgo.WithHooks(watch))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	err = kafkaconn.Missing(ctx, cl, cfg.Conn.Principal(), GrantsProbeID(cfg.Prefix), GatewayGrants(cfg.Topics, cfg.Prefix))
	if err != nil && !errors.Is(err, kafkaconn.ErrMissingGrant) {
		return watch.Explain(cfg.Conn, err)
	}
	return err
}

// grantsResult is Grants as verify-broker reports it.
func grantsResult(ctx context.Context, cfg Config) Result {
	r := Result{Check: "grants", Subject: cfg.Conn.Principal()}
	switch err := Grants(ctx, cfg); {
	case errors.Is(err, kafkaconn.ErrMissingGrant):
		r.Status, r.Evidence = Fail, err.Error()
		r.Fix = "grant the ACLs of docs/security.md; serve refuses to start without them"
	case err != nil:
		r.Status, r.Evidence = Error, err.Error()
		r.Fix = "check the connection settings (docs/security.md)"
	default:
		r.Status = Pass
		r.Evidence = "the cluster lets the principal write the route topics and init a transactional id under " + txnmap.IDPrefix(cfg.Prefix)
	}
	return r
}
