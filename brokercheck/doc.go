// Package brokercheck decides whether a Kafka cluster fences zombies the
// way fencegate needs, by exercising the transaction coordinator on a
// scratch topic and by reading the settings that decide safety. It is the
// one place of these rules: `fencegate verify-broker` prints every
// result, and `fencegate serve` refuses to start on the settings checks
// that break the fence (Refusals), unless the operator names each one.
// It must never write outside its own scratch topic and transactional
// ids, and must never call a setting safe that it could not read.
//
// The checks (docs/verify-broker.md has the table with the fixes):
//
//	fence.epoch            InitProducerId on a transactional id bumps its epoch
//	fence.produce          the older producer is refused at its next produce
//	fence.commit           the older producer is refused at its commit
//	fence.open-aborted     the older producer's open transaction is aborted by
//	                       the bump and never read_committed
//	read.committed         committed batches read_committed in order, headers
//	                       byte-exact; aborted ones absent
//	read.markers           each transaction's records end with its producer's
//	                       COMMIT or ABORT marker
//	transaction.version    the finalized transaction.version and its meaning
//	unclean.leader.election.enable   per route topic and __transaction_state
//	replication            replication factor and min.insync.replicas per
//	                       route topic and __transaction_state
//	transaction.max.timeout.ms       against the gateway's transaction timeout
//	transactional.id.expiration.ms   against the longest idle (--park-after)
//	transaction.partition.verification.enable
//	acls                   the principal's ACLs against docs/managed-kafka.md
//	grants                 the principal may do what the gateway does: Write in
//	                       each route topic's authorized operations and an
//	                       InitProducerId under the prefix (Grants; serve
//	                       refuses to start without them)
//	cleanup                only when the scratch topic could not be deleted
//
// Statuses: PASS, WARN (safe as far as fencegate is concerned but worth a
// look, or not readable with these credentials), FAIL (the property does
// not hold) and ERROR (the check could not run). A FAIL of a settings check
// that breaks the fence carries its Unsafe name, the name an operator
// gives to `serve --allow-unsafe-broker` to start anyway.
//
// The fence checks need the librdkafka transactional producer the gateway
// uses (gateway.KafkaConfig.ProducerConfig), a topic of their own (created
// and deleted, or the one the operator names) and transactional ids under
// the deployment's prefix with a '~' no lease name holds, so they never
// fence a lease's producer.
package brokercheck
