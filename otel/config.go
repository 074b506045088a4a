package otel

import (
	gotel "go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// InstrumentationName names the tracer and meter of this package.
const InstrumentationName = "github.com/relayer-go/watermill-outbox/otel"

// Config configures the tracing hooks of this package. The zero value is usable.
type Config struct {
	// TracerProvider makes the spans of the forwarder's sends and of ConsumerMiddleware.
	// Defaults to the global provider (otel.GetTracerProvider()) at the time the hook
	// is built; without one set, that is OpenTelemetry's no-op provider, which records
	// nothing and costs next to nothing.
	TracerProvider trace.TracerProvider
	// Propagator writes and reads the trace context in message metadata. Defaults to
	// W3C Trace Context and W3C Baggage (metadata keys traceparent, tracestate,
	// baggage), the keys Watermill's OpenTelemetry middleware of third parties and
	// every OpenTelemetry SDK use.
	Propagator propagation.TextMapPropagator
}

func (c *Config) setDefaults() {
	if c.TracerProvider == nil {
		c.TracerProvider = gotel.GetTracerProvider()
	}
	if c.Propagator == nil {
		c.Propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	}
}

func (c *Config) tracer() trace.Tracer {
	return c.TracerProvider.Tracer(InstrumentationName)
}
