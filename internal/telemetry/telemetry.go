// Package telemetry builds the OpenTelemetry providers of a fencegate
// process: a MeterProvider exported for Prometheus scraping, and a
// TracerProvider that exports by OTLP when the standard OTEL_* variables
// ask for it and is a no-op otherwise.
//
// Every process it serves names itself: service.name (fencegate-gateway,
// fencegate-materializer) and service.instance.id in the resource, which
// the Prometheus exporter publishes as target_info; the Go runtime and
// process collectors (go_*, process_*); and fencegate_build_info with the
// version, commit and librdkafka version of the binary.
//
// It must never set the global OpenTelemetry providers or register
// anything in init: each component gets its providers injected, so tests
// and several components in one process do not share instruments.
package telemetry

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Service names of the components, as service.name.
const (
	Gateway      = "fencegate-gateway"
	Materializer = "fencegate-materializer"
)

// Service identifies the process in its telemetry.
type Service struct {
	// Name is service.name: Gateway or Materializer.
	Name string
	// Instance is service.instance.id, e.g. the gateway's replica name.
	// Empty: host name and process id, unique among the running instances.
	Instance string
}

// resource is the process's resource. OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES still win, as the OpenTelemetry specification
// asks: the environment is how a deployment renames a process.
func (s Service) resource(b BuildInfo) (*resource.Resource, error) {
	inst := s.Instance
	if inst == "" {
		host, _ := os.Hostname()
		inst = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	return resource.New(context.Background(),
		resource.WithSchemaURL(semconv.SchemaURL),
		resource.WithTelemetrySDK(),
		resource.WithAttributes(semconv.ServiceName(s.Name), semconv.ServiceInstanceID(inst),
			semconv.ServiceVersion(b.Version)),
		resource.WithFromEnv())
}

// Prometheus returns a MeterProvider whose instruments the returned
// handler serves in the Prometheus text format (GET /metrics), together
// with the Go runtime and process collectors and the build-info gauge.
func Prometheus(svc Service) (*sdkmetric.MeterProvider, http.Handler, error) {
	reg := prometheus.NewRegistry()
	// client_golang's collectors rather than OpenTelemetry's runtime
	// instrumentation: go_* and process_* are the names every Go dashboard
	// and the process-level alerts already read.
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return nil, nil, err
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, nil, err
	}
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, nil, err
	}
	build := Build()
	res, err := svc.resource(build)
	if err != nil {
		return nil, nil, err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithResource(res))
	if err := buildInfo(mp, build); err != nil {
		_ = mp.Shutdown(context.Background())
		return nil, nil, err
	}
	return mp, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), nil
}

// buildInfo registers fencegate.build.info: 1, labelled with what the
// binary is. A dashboard joins on it to tell which version ran when.
func buildInfo(mp metric.MeterProvider, b BuildInfo) error {
	m := mp.Meter("github.com/fencegate/fencegate/internal/telemetry")
	g, err := m.Int64ObservableGauge("fencegate.build.info",
		metric.WithDescription("Always 1; the labels say which fencegate binary runs (version, commit, Go and librdkafka versions)."))
	if err != nil {
		return err
	}
	set := metric.WithAttributes(attribute.String("version", b.Version), attribute.String("commit", b.Commit),
		attribute.String("go.version", b.GoVersion), attribute.String("librdkafka.version", b.Librdkafka))
	_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(g, 1, set)
		return nil
	}, g)
	return err
}

// Tracing returns an OTLP/HTTP TracerProvider when
// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set,
// and a no-op provider (no cost) otherwise. Call shutdown before exit.
func Tracing(ctx context.Context) (tp trace.TracerProvider, shutdown func(context.Context) error, err error) {
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return noop.NewTracerProvider(), func(context.Context) error { return nil }, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, nil, err
	}
	sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp))
	return sdk, sdk.Shutdown, nil
}

// DefaultLeaseSeriesLimit is the most leases a process exports per-lease
// series for when lease metrics are on (gateway.Config.LeaseMetricsLimit,
// materializer.Config.LeaseMetricsLimit, the --lease-metrics-limit flags).
// Each lease costs two series on a gateway and one on a materializer.
const DefaultLeaseSeriesLimit = 1000

// LeaseSeries returns the names a process exports per-lease series for:
// the first limit of names in byte order (stable from scrape to scrape, so
// a series does not come and go as other leases do), and how many are
// left out. It sorts names in place.
func LeaseSeries(names []string, limit int) ([]string, int) {
	if len(names) <= limit {
		return names, 0
	}
	slices.Sort(names)
	return names[:limit], len(names) - limit
}
