//! The memory budget that admits export requests.
//!
//! Two kinds of memory count against one limit (`--max-memory`):
//! - *in flight*: bodies of requests being read, decompressed, converted,
//!   scanned or written. Each request holds a [`Permit`] for its bytes, taken
//!   with one compare-and-swap before the work and given back when it drops.
//! - *buffered*: spans acknowledged but not yet in a sorted file (memtable and
//!   sealed buffers). Their payloads are slices of the request bodies, so they
//!   keep those bodies alive. The engine knows this number; a sampler copies it
//!   here a few times a second ([`MemoryBudget::set_buffered`]), and each stored
//!   request adds its size at once ([`MemoryBudget::add_buffered`]) so a burst
//!   between two samples is not admitted twice.
//!
//! A request that does not fit gets [`Error::Overloaded`], a retryable status,
//! and nothing is read or stored. Admission is one atomic add per request and
//! never waits: a full budget answers at once instead of queueing, which keeps
//! memory bounded however many clients send.

use std::sync::{
    atomic::{AtomicUsize, Ordering},
    Arc,
};

use crate::error::Error;

/// The byte budget for in-flight requests plus buffered spans.
#[derive(Debug)]
pub struct MemoryBudget {
    limit: usize,
    /// Bytes held by live [`Permit`]s.
    in_flight: AtomicUsize,
    /// Bytes of acknowledged spans not yet flushed, as last sampled plus what
    /// was stored since.
    buffered: AtomicUsize,
}

impl MemoryBudget {
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(MemoryBudget {
            limit,
            in_flight: AtomicUsize::new(0),
            buffered: AtomicUsize::new(0),
        })
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    pub fn buffered(&self) -> usize {
        self.buffered.load(Ordering::Relaxed)
    }

    /// Bytes in use: in flight plus buffered.
    pub fn in_use(&self) -> usize {
        self.in_flight().saturating_add(self.buffered())
    }

    /// Whether at least one more byte fits; a cheap check before reading a body
    /// whose size is not known yet.
    pub fn has_room(&self) -> bool {
        self.in_use() < self.limit
    }

    /// Replaces the buffered figure with the engine's own count.
    pub fn set_buffered(&self, bytes: usize) {
        self.buffered.store(bytes, Ordering::Relaxed);
    }

    /// Counts a stored request until the next sample replaces the figure.
    pub fn add_buffered(&self, bytes: usize) {
        self.buffered.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Takes `bytes` from the budget, or says why not.
    pub fn acquire(self: &Arc<Self>, bytes: usize) -> Result<Permit, Error> {
        let mut permit = Permit {
            budget: Arc::clone(self),
            bytes: 0,
        };
        permit.grow(bytes)?;
        Ok(permit)
    }

    fn try_add(&self, bytes: usize) -> Result<(), Error> {
        let buffered = self.buffered();
        let mut current = self.in_flight.load(Ordering::Relaxed);
        loop {
            let in_use = current.saturating_add(buffered);
            if in_use.saturating_add(bytes) > self.limit {
                return Err(Error::Overloaded {
                    needed: bytes,
                    in_use,
                    limit: self.limit,
                });
            }
            match self.in_flight.compare_exchange_weak(
                current,
                current + bytes,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(()),
                Err(actual) => current = actual,
            }
        }
    }
}

/// Bytes of the budget held by one request; given back on drop.
#[derive(Debug)]
pub struct Permit {
    budget: Arc<MemoryBudget>,
    bytes: usize,
}

impl Permit {
    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Takes `more` bytes for the same request (a body read in full, a
    /// decompressed copy), or says the budget cannot hold them.
    pub fn grow(&mut self, more: usize) -> Result<(), Error> {
        self.budget.try_add(more)?;
        self.bytes += more;
        Ok(())
    }

    /// Gives back what the request no longer holds (a compressed body once it is
    /// decompressed).
    pub fn shrink(&mut self, less: usize) {
        let less = less.min(self.bytes);
        self.budget.in_flight.fetch_sub(less, Ordering::AcqRel);
        self.bytes -= less;
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.budget
            .in_flight
            .fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_until_full_and_frees_on_drop() {
        let budget = MemoryBudget::new(100);
        let a = budget.acquire(60).expect("fits");
        let err = budget.acquire(50).expect_err("over budget");
        assert!(matches!(
            err,
            Error::Overloaded {
                needed: 50,
                in_use: 60,
                limit: 100
            }
        ));
        let mut b = budget.acquire(40).expect("fits exactly");
        assert_eq!(budget.in_flight(), 100);
        assert!(!budget.has_room());
        b.shrink(30);
        assert_eq!(budget.in_flight(), 70);
        drop(a);
        drop(b);
        assert_eq!(budget.in_flight(), 0);
        assert!(budget.has_room());
    }

    #[test]
    fn buffered_spans_count_against_the_limit() {
        let budget = MemoryBudget::new(100);
        budget.set_buffered(90);
        assert!(budget.acquire(20).is_err());
        let mut p = budget.acquire(10).expect("fits");
        assert!(p.grow(1).is_err(), "a failed grow takes nothing");
        assert_eq!(p.bytes(), 10);
        budget.add_buffered(5);
        assert_eq!(budget.in_use(), 105);
        budget.set_buffered(0);
        assert!(p.grow(50).is_ok());
    }

    #[test]
    fn concurrent_permits_never_exceed_the_limit() {
        let budget = MemoryBudget::new(1000);
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let budget = Arc::clone(&budget);
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        if let Ok(p) = budget.acquire(300) {
                            assert!(budget.in_flight() <= 1000);
                            drop(p);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("thread");
        }
        assert_eq!(budget.in_flight(), 0);
    }
}
