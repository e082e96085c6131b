# syntax=docker/dockerfile:1
#
# fencegate: one image for `serve` (the default), `materialize` and `migrate`.
#
#   docker build -t fencegate:local --build-arg VERSION=v1.2.3 .
#   docker run --rm fencegate:local --version
#
# librdkafka is not installed in either stage: confluent-kafka-go links its
# bundled static librdkafka (with OpenSSL, zlib, zstd and lz4 inside) through
# cgo on linux/amd64 and linux/arm64 with glibc. The binary then needs glibc
# and nothing else (`ldd` lists libc and libm only), so the runtime stage is
# the Debian release the builder links against.
#
# Probes: GET /healthz (liveness) and GET /readyz (readiness: Postgres and
# Kafka reachable) on the listen port; the HEALTHCHECK below uses /healthz
# of `serve` on 8080. A container running `materialize` serves the same
# paths on its own --listen port (8081 in deploy/compose/compose.yaml, which
# overrides the check).

ARG GO_VERSION=1.26
ARG DEBIAN_RELEASE=bookworm

FROM golang:${GO_VERSION}-${DEBIAN_RELEASE} AS build
WORKDIR /src
# Modules first: a change of source does not download them again.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG VERSION=""
# CGO_ENABLED=1: librdkafka comes in through cgo (see above).
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=1 go build -buildvcs=false -trimpath \
      -ldflags "-s -w -X github.com/fencegate/fencegate/internal/telemetry.version=${VERSION}" \
      -o /out/fencegate ./cmd/fencegate \
 && /out/fencegate --version

FROM debian:${DEBIAN_RELEASE}-slim AS runtime
# ca-certificates: trust roots for TLS to brokers and Postgres.
# curl: the HEALTHCHECK (the image has no other HTTP client).
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 65532 fencegate \
 && useradd --system --uid 65532 --gid 65532 --home-dir /nonexistent \
      --no-create-home --shell /usr/sbin/nologin fencegate
COPY --from=build /out/fencegate /usr/local/bin/fencegate
# Every flag can be set as FENCEGATE_<FLAG>; these are the container's
# defaults: listen on all interfaces, routes and clients from a mounted file,
# JSON logs. Secrets (FENCEGATE_BARRIER_KEY, FENCEGATE_KAFKA_SASL_PASSWORD,
# the database password in FENCEGATE_DATABASE_URL) are never baked in.
ENV FENCEGATE_LISTEN=0.0.0.0:8080 \
    FENCEGATE_CONFIG=/etc/fencegate/fencegate.yaml \
    FENCEGATE_LOG_JSON=true
USER 65532:65532
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
  CMD ["curl", "-fsS", "-o", "/dev/null", "http://127.0.0.1:8080/healthz"]
ENTRYPOINT ["/usr/local/bin/fencegate"]
CMD ["serve"]
