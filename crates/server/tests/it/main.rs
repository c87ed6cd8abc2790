//! Integration tests of the `tracedb` binary: each starts real server processes
//! on 127.0.0.1 with a temporary data directory and talks to them over gRPC.

mod api;
mod check;
mod crash;
mod harness;
mod large;
mod python_sdk;
mod restart;
