package otel

import (
	"fmt"

	gotel "go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
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

	global bool // TracerProvider is the global one (setDefaults)
}

// unsetProvider is OpenTelemetry's global tracer provider before the application set
// one (its no-op delegate), when this package was initialised first.
var unsetProvider = func() trace.TracerProvider {
	tp := gotel.GetTracerProvider()
	if fmt.Sprintf("%T", tp) != "*global.tracerProvider" {
		return nil // another package's init set a provider already
	}
	return tp
}()

// tracingOff reports whether spans cannot record: the provider is OpenTelemetry's
// no-op one, or the global provider was never set (a Tracer taken from it starts
// recording once one is set, and this says so from then on).
func (c *Config) tracingOff() bool {
	tp := c.TracerProvider
	if c.global {
		if tp = gotel.GetTracerProvider(); unsetProvider != nil && tp == unsetProvider {
			return true
		}
	}
	_, off := tp.(noop.TracerProvider)
	return off
}

func (c *Config) setDefaults() {
	if c.TracerProvider == nil {
		c.TracerProvider = gotel.GetTracerProvider()
		c.global = true
	}
	if c.Propagator == nil {
		c.Propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	}
}

func (c *Config) tracer() trace.Tracer {
	return c.TracerProvider.Tracer(InstrumentationName)
}
