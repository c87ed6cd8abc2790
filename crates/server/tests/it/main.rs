//! Integration tests of the `tracedb` binary: each starts real server processes
//! on 127.0.0.1 with a temporary data directory and talks to them over gRPC and
//! HTTP, with Rust clients and with real OpenTelemetry clients (the Python SDK,
//! telemetrygen).

mod api;
mod cancel;
mod check;
mod cluster;
mod collector;
mod config;
mod crash;
mod deploy;
mod harness;
mod jaeger;
mod large;
mod metrics;
mod object_store;
mod otlp_http;
mod overload;
mod python_sdk;
mod readme;
mod restart;
mod shared_span_ids;
mod shutdown;
mod telemetrygen;
mod tempo;
mod tempo_metrics;
mod tenants;
mod time_rules;
mod tls;
mod traceql;
mod ui;
