//! What the server serves before the storage engine is open.
//!
//! The listeners answer (health checks say NOT_SERVING) while the engine is
//! still opening and replaying its WAL; whatever needs the engine, or a
//! service built over it, reads it through a [`StartCell`], set once when it
//! exists. Until then [`StartCell::get`] answers [`Starting`], which each
//! crate's one error mapping turns into its "retry later": UNAVAILABLE over
//! gRPC ([`From<Starting> for tonic::Status`](Starting)), 503 over HTTP.
//! The ingest path, the query services, the Tempo API and `/metrics` all
//! wait for the engine this one way.

use std::{
    fmt,
    sync::{Arc, OnceLock},
};

/// A value that exists once start-up has got far enough; clones share it.
pub struct StartCell<T> {
    value: Arc<OnceLock<T>>,
}

impl<T> StartCell<T> {
    pub fn new() -> Self {
        StartCell {
            value: Arc::new(OnceLock::new()),
        }
    }

    /// Sets the value; a later call changes nothing and returns false.
    pub fn set(&self, value: T) -> bool {
        self.value.set(value).is_ok()
    }

    /// The value, or [`Starting`] until it is set.
    pub fn get(&self) -> Result<&T, Starting> {
        self.value.get().ok_or(Starting)
    }
}

impl<T> Default for StartCell<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Clone for StartCell<T> {
    fn clone(&self) -> Self {
        StartCell {
            value: Arc::clone(&self.value),
        }
    }
}

impl<T: fmt::Debug> fmt::Debug for StartCell<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("StartCell").field(&self.value.get()).finish()
    }
}

/// The server is starting up: what a [`StartCell`] reads as until it is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Starting;

impl fmt::Display for Starting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("tracedb is starting up; retry later")
    }
}

impl std::error::Error for Starting {}

impl From<Starting> for tonic::Status {
    fn from(starting: Starting) -> Self {
        tonic::Status::unavailable(starting.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starting_until_set_once_and_shared_by_clones() {
        let cell = StartCell::new();
        let clone = cell.clone();
        assert_eq!(clone.get(), Err(Starting));
        let status = tonic::Status::from(clone.get().expect_err("not set"));
        assert_eq!(status.code(), tonic::Code::Unavailable);
        assert_eq!(status.message(), "tracedb is starting up; retry later");
        assert!(cell.set(1));
        assert!(!cell.set(2), "set once");
        assert_eq!(clone.get(), Ok(&1));
    }
}
