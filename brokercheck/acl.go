package brokercheck

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/fencegate/fencegate/kafkaconn"
	"github.com/fencegate/fencegate/txnmap"
)

// acl is one ALLOW or DENY entry that applies to the principal.
type acl struct {
	resource kmsg.ACLResourceType
	name     string
	pattern  kmsg.ACLResourcePatternType
	op       kmsg.ACLOperation
	allow    bool
}

func (a acl) String() string {
	perm := "ALLOW"
	if !a.allow {
		perm = "DENY"
	}
	return fmt.Sprintf("%s %s on %s %s %q", perm, a.op, strings.ToLower(a.pattern.String()), a.resource, a.name)
}

// aclFacts are the ACLs of the connection's principal, or why not.
type aclFacts struct {
	// principal is "User:<name>"; empty when only the broker knows it
	// (a client certificate, mapped by its rules).
	principal string
	acls      []acl
	// disabled: the cluster has no authorizer.
	disabled bool
	err      error
}

// principalOf returns the principal the broker sees for conn, or "" when
// it cannot be known from the client side.
func principalOf(conn kafkaconn.Config) string {
	switch {
	case conn.SASL():
		return "User:" + conn.SASLUser
	case conn.CertFile != "":
		return ""
	}
	return "User:ANONYMOUS"
}

func readACLs(ctx context.Context, cl *kgo.Client, conn kafkaconn.Config) aclFacts {
	f := aclFacts{principal: principalOf(conn)}
	if f.principal == "" {
		return f
	}
	req := kmsg.NewPtrDescribeACLsRequest()
	req.ResourceType, req.ResourcePatternType = kmsg.ACLResourceTypeAny, kmsg.ACLResourcePatternTypeAny
	req.Operation, req.PermissionType = kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
	resp, err := req.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	switch {
	case errors.Is(err, kerr.SecurityDisabled):
		f.disabled = true
		return f
	case err != nil:
		f.err = err
		return f
	}
	for _, r := range resp.Resources {
		for _, a := range r.ACLs {
			if a.Principal != f.principal && a.Principal != "User:*" {
				continue
			}
			f.acls = append(f.acls, acl{resource: r.ResourceType, name: r.ResourceName, pattern: r.ResourcePatternType,
				op: a.Operation, allow: a.PermissionType == kmsg.ACLPermissionTypeAllow})
		}
	}
	return f
}

// covers reports whether an ALLOW acl grants op on resource name.
func (a acl) covers(resource kmsg.ACLResourceType, name string, op kmsg.ACLOperation) bool {
	if !a.allow || a.resource != resource || (a.op != op && a.op != kmsg.ACLOperationAll) {
		return false
	}
	if a.pattern == kmsg.ACLResourcePatternTypePrefixed {
		return strings.HasPrefix(name, a.name)
	}
	return a.name == name || a.name == "*"
}

// listed reports whether a is one docs/managed-kafka.md lists for the
// gateway: Write or Describe on a route's topic or on the deployment's
// transactional ids.
func (a acl) listed(topics []string, idPrefix string) bool {
	if !a.allow {
		return true // a DENY takes nothing away from the fence
	}
	if a.op != kmsg.ACLOperationWrite && a.op != kmsg.ACLOperationDescribe {
		return false
	}
	switch a.resource {
	case kmsg.ACLResourceTypeTopic:
		return a.pattern == kmsg.ACLResourcePatternTypeLiteral && slices.Contains(topics, a.name)
	case kmsg.ACLResourceTypeTransactionalId:
		return strings.HasPrefix(a.name, idPrefix)
	}
	return false
}

func aclRule(f aclFacts, cfg Config) Result {
	r := Result{Check: "acls", Subject: f.principal}
	switch {
	case f.principal == "":
		r.Subject, r.Status = "certificate principal", Warn
		r.Evidence = "the principal of a client certificate is what the brokers' ssl.principal.mapping.rules make of it; it is not checked here"
		r.Fix = "compare kafka-acls.sh --list --principal <it> with docs/managed-kafka.md"
		return r
	case f.disabled:
		r.Status = Warn
		r.Evidence = "the cluster has no authorizer (SECURITY_DISABLED): every principal may write the route topics and init their transactional ids, " +
			"so a direct writer is not refused (FM16)"
		r.Fix = "enable an authorizer and grant the gateway only the ACLs of docs/managed-kafka.md"
		return r
	case f.err != nil:
		return notReadable(r.Check, f.principal, f.err, "Describe on the cluster (DescribeAcls)")
	}
	idPrefix := txnmap.IDPrefix(cfg.Prefix)
	var missing, extra []string
	for _, t := range cfg.Topics {
		if !coveredBy(f.acls, kmsg.ACLResourceTypeTopic, t, kmsg.ACLOperationWrite) {
			missing = append(missing, "Write on topic "+t)
		}
	}
	if !coveredBy(f.acls, kmsg.ACLResourceTypeTransactionalId, idPrefix+"x", kmsg.ACLOperationWrite) {
		missing = append(missing, "Write on transactional ids prefixed "+idPrefix)
	}
	for _, a := range f.acls {
		if !a.listed(cfg.Topics, idPrefix) {
			extra = append(extra, a.String())
		}
	}
	switch {
	case len(missing) > 0 && len(f.acls) == 0:
		r.Status = Fail
		r.Evidence = "the cluster lists no ACL for " + f.principal + ": an authorizer without grants refuses the gateway " +
			"(a broker that answers DescribeAcls without enforcing ACLs, as the embedded kfake does, is told apart only by the fence checks passing)"
		r.Fix = "grant the ACLs of docs/managed-kafka.md"
	case len(missing) > 0:
		r.Status = Fail
		r.Evidence = "missing: " + strings.Join(missing, "; ")
		r.Fix = "grant the ACLs of docs/managed-kafka.md"
	case len(extra) > 0:
		r.Status = Warn
		r.Evidence = fmt.Sprintf("enough, and more than docs/managed-kafka.md lists: %s", strings.Join(extra, "; "))
		r.Fix = "remove what the gateway does not need (verify-broker's own topic needs Create and Delete, or --scratch-topic)"
	default:
		r.Status = Pass
		r.Evidence = fmt.Sprintf("%d ACLs, Write and Describe on the route topics and on %s*, nothing more", len(f.acls), idPrefix)
	}
	return r
}

func coveredBy(acls []acl, resource kmsg.ACLResourceType, name string, op kmsg.ACLOperation) bool {
	for _, a := range acls {
		if !a.allow && (a.op == op || a.op == kmsg.ACLOperationAll) && a.resource == resource &&
			(a.name == name || a.name == "*" || a.pattern == kmsg.ACLResourcePatternTypePrefixed && strings.HasPrefix(name, a.name)) {
			return false // a DENY wins
		}
	}
	for _, a := range acls {
		if a.covers(resource, name, op) {
			return true
		}
	}
	return false
}
