//! The memory budget: the one count of the bytes a server holds for the data
//! passing through it, and the one place that decides whether more may come.
//!
//! [`MemoryBudget`] owns two counters, of different bytes, against one limit
//! (`--max-memory`'s data share in the server):
//! - *in flight*: bodies of export requests being read, decompressed,
//!   converted, scanned or written. Each request holds a [`Permit`] for its
//!   bytes, taken with one compare-and-swap before the work
//!   ([`MemoryBudget::acquire`]) and given back when it drops. The ingest layer
//!   asks for these.
//! - *buffered*: spans the storage engine holds in memory (memtable and sealed
//!   buffers, and writes admitted but not yet buffered). Their payloads are
//!   slices of the request bodies, so they keep those bodies alive. The
//!   engine reserves a write's bytes here before logging it
//!   ([`MemoryBudget::reserve`]) and gives a sealed buffer's bytes back once
//!   the buffer is in a file ([`MemoryBudget::release`]). This is the only
//!   count of those bytes: the ingest layer reads it, it keeps no copy.
//!
//! Two questions are asked of it, both answered here and at once (nothing
//! queues: a full budget answers at once instead of waiting, which keeps
//! memory bounded however many clients send):
//! - may a request of `n` bytes be read? Yes while in flight plus buffered
//!   plus `n` fits [`MemoryBudget::admit_limit`]; otherwise [`Overloaded`],
//!   which the ingest layer answers with a retryable status.
//! - may the engine take a write of `n` bytes? Yes while buffered plus `n`
//!   fits the configured limit, or nothing is buffered (so no write is refused
//!   forever); otherwise [`Overloaded`], which the engine reports as
//!   [`crate::Error::Backpressure`]. This is the backstop for writes that do
//!   not come through the ingest layer.
//!
//! The budget counts request and span bytes, and what background work
//! says it holds: the index cache (bounded by its own share of the limit),
//! the allocator's free but unreturned pages and each allocation's rounding
//! are outside it. Given the whole
//! process's limit ([`MemoryBudget::with_process_limit`]), requests are also
//! admitted only up to what that limit leaves: each sample of the process's
//! resident memory ([`MemoryBudget::set_resident`], from the server's
//! sampler) takes the part the budget does not count, and
//! [`MemoryBudget::admit_limit`] is the process limit minus the most that
//! part was in the last [`UNCOUNTED_WINDOW`] samples, minus room for
//! background work. The rest comes and goes in spikes: admission that
//! followed the last sample let buffered spans fill the room between two
//! spikes, which the next spike then took the process past its limit from,
//! since buffered spans leave only by a flush. A floor keeps ingest going
//! (and a largest request admissible) however much the rest holds.
//!
//! *Background work* (a merge: its inputs' index sidecars, its outputs'
//! summaries and metrics cells; and the buffers' search summaries while
//! they are cached) is the largest of the rest: at max ingest a level-0
//! merge holds 150-200 MiB for the 15-35 s it runs, one starting every 20 s
//! or so, on top of buffered spans. It is counted with a [`Work`], which
//! holds two figures: what the work expects to need at most (taken before
//! it starts) and what it holds now (measured as it runs). Admission keeps room for the
//! most any work expected over the last [`WORK_WINDOW`] samples, and for the
//! work under way, so the next merge finds its room already made; the first
//! one waits until [`MemoryBudget::has_room_for_work`] says it is there.

use std::{
    collections::VecDeque,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex, PoisonError,
    },
};

/// Samples of the uncounted memory admission remembers the most of: 10 s
/// at the server's sampling interval (100 ms), longer than the time between
/// two merges at max ingest.
pub const UNCOUNTED_WINDOW: usize = 100;

/// Samples of the background work held that admission keeps room for the
/// most of: 60 s at the server's sampling interval, longer than the time
/// between two level-0 merges at max ingest (about 20 s).
pub const WORK_WINDOW: usize = 600;

/// The byte budget for in-flight requests plus buffered spans.
#[derive(Debug)]
pub struct MemoryBudget {
    limit: usize,
    /// The whole process's limit; 0 when only the budget's own bytes count.
    process_limit: usize,
    /// The admission limit never narrows below this.
    floor: usize,
    /// Bytes held by live [`Permit`]s.
    in_flight: AtomicUsize,
    /// Bytes of spans the engine holds in memory: reserved when a write is
    /// admitted, released when the sealed buffer holding them is in a file.
    buffered: AtomicUsize,
    /// The process's resident memory, as last sampled.
    resident: AtomicUsize,
    /// The most of it the budget did not count over the last
    /// [`UNCOUNTED_WINDOW`] samples.
    uncounted: AtomicUsize,
    /// Bytes background work expects to hold at most ([`Work`]), for the
    /// work under way.
    work_expected: AtomicUsize,
    /// Bytes background work holds now, as it measures them.
    work_held: AtomicUsize,
    /// The most `work_expected` was since the last sample (never less than
    /// it is now).
    work_high: AtomicUsize,
    /// The most it was over the last [`WORK_WINDOW`] samples.
    work_room: AtomicUsize,
    /// The samples' uncounted bytes and expected work, oldest first.
    recent: Mutex<Recent>,
}

/// The last samples of what admission leaves room for.
#[derive(Debug)]
struct Recent {
    uncounted: Window,
    work: Window,
}

/// The last `len` samples of one figure, oldest first.
#[derive(Debug)]
struct Window {
    samples: VecDeque<usize>,
    len: usize,
}

impl Window {
    fn new(len: usize) -> Window {
        Window {
            samples: VecDeque::with_capacity(len),
            len,
        }
    }

    /// Adds a sample, dropping the oldest past `len`; the most of them.
    fn push(&mut self, sample: usize) -> usize {
        if self.samples.len() == self.len {
            self.samples.pop_front();
        }
        self.samples.push_back(sample);
        self.samples.iter().copied().max().unwrap_or(sample)
    }
}

/// Why the budget refused: `needed` more bytes do not fit in `limit` with
/// `in_use` already counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overloaded {
    pub needed: usize,
    pub in_use: usize,
    pub limit: usize,
}

impl MemoryBudget {
    /// A budget of `limit` bytes, whatever the rest of the process holds.
    pub fn new(limit: usize) -> Arc<Self> {
        Self::with_process_limit(limit, 0, limit)
    }

    /// A budget of at most `limit` bytes that also keeps the process's
    /// resident memory, as sampled, within `process_limit` (0: no process
    /// limit), narrowing to no less than `floor`.
    pub fn with_process_limit(limit: usize, process_limit: usize, floor: usize) -> Arc<Self> {
        Arc::new(MemoryBudget {
            limit,
            process_limit,
            floor: floor.min(limit),
            in_flight: AtomicUsize::new(0),
            buffered: AtomicUsize::new(0),
            resident: AtomicUsize::new(0),
            uncounted: AtomicUsize::new(0),
            work_expected: AtomicUsize::new(0),
            work_held: AtomicUsize::new(0),
            work_high: AtomicUsize::new(0),
            work_room: AtomicUsize::new(0),
            recent: Mutex::new(Recent {
                uncounted: Window::new(UNCOUNTED_WINDOW),
                work: Window::new(WORK_WINDOW),
            }),
        })
    }

    /// The configured budget.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// What requests are admitted up to now: the configured budget, or less
    /// when the rest of the process and the room kept for background work
    /// leave less of its limit.
    pub fn admit_limit(&self) -> usize {
        if self.process_limit == 0 {
            return self.limit;
        }
        let room = self
            .process_limit
            .saturating_sub(self.uncounted.load(Ordering::Relaxed))
            .saturating_sub(self.work_room());
        room.clamp(self.floor, self.limit)
    }

    /// The room admission keeps for background work: the most it expected
    /// over the last [`WORK_WINDOW`] samples, or since the last if more.
    pub fn work_room(&self) -> usize {
        self.work_room
            .load(Ordering::Relaxed)
            .max(self.work_high.load(Ordering::Relaxed))
    }

    /// Bytes background work holds now, as it measured them.
    pub fn work_held(&self) -> usize {
        self.work_held.load(Ordering::Relaxed)
    }

    /// Counts background work that expects to hold up to `expected` bytes
    /// (nothing yet): admission makes room for it from now on. Never
    /// refused; see [`MemoryBudget::has_room_for_work`].
    pub fn work(self: &Arc<Self>, expected: usize) -> Work {
        let now = self.work_expected.fetch_add(expected, Ordering::AcqRel) + expected;
        self.work_high.fetch_max(now, Ordering::AcqRel);
        Work {
            budget: Arc::clone(self),
            expected,
            held: 0,
        }
    }

    /// Whether the process, as last sampled, leaves room for the background
    /// work counted now beside the requests and spans it holds: when it does
    /// not, admission is already narrowed, and work that can wait waits for
    /// flushes to give memory back. Always with no process limit.
    pub fn has_room_for_work(&self) -> bool {
        if self.process_limit == 0 {
            return true;
        }
        self.uncounted
            .load(Ordering::Relaxed)
            .saturating_add(self.in_use())
            .saturating_add(self.work_expected.load(Ordering::Relaxed))
            <= self.process_limit
    }

    /// The process's resident memory, as last sampled (0 before any sample).
    pub fn resident(&self) -> usize {
        self.resident.load(Ordering::Relaxed)
    }

    /// Takes a sample of the process's resident memory: what the budget does
    /// not count of it narrows [`MemoryBudget::admit_limit`] for the next
    /// [`UNCOUNTED_WINDOW`] samples, and the most background work expected
    /// since the last sample for the next [`WORK_WINDOW`].
    pub fn set_resident(&self, bytes: usize) {
        self.resident.store(bytes, Ordering::Relaxed);
        let uncounted = bytes
            .saturating_sub(self.in_use())
            .saturating_sub(self.work_held());
        let expected = self.work_expected.load(Ordering::Relaxed);
        let work = self
            .work_high
            .swap(expected, Ordering::AcqRel)
            .max(expected);
        let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        let most = recent.uncounted.push(uncounted);
        self.uncounted.store(most, Ordering::Relaxed);
        let most = recent.work.push(work);
        self.work_room.store(most, Ordering::Relaxed);
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Bytes of spans the engine holds in memory (see the module docs).
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
        self.in_use() < self.admit_limit()
    }

    /// Whether the spans in the memtable (`memtable_bytes`) fill more than
    /// half of what is admitted: then they are worth flushing early, so the
    /// budget frees up without waiting for a buffer to fill or age.
    pub fn wants_early_flush(&self, memtable_bytes: usize) -> bool {
        memtable_bytes > self.admit_limit() / 2
    }

    /// Takes `bytes` of a request from the budget, or says why not.
    pub fn acquire(self: &Arc<Self>, bytes: usize) -> Result<Permit, Overloaded> {
        let mut permit = Permit {
            budget: Arc::clone(self),
            bytes: 0,
        };
        permit.grow(bytes)?;
        Ok(permit)
    }

    fn try_add(&self, bytes: usize) -> Result<(), Overloaded> {
        let buffered = self.buffered();
        let limit = self.admit_limit();
        let mut current = self.in_flight.load(Ordering::Relaxed);
        loop {
            let in_use = current.saturating_add(buffered);
            if in_use.saturating_add(bytes) > limit {
                return Err(Overloaded {
                    needed: bytes,
                    in_use,
                    limit,
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

    /// Reserves `bytes` of spans the engine is about to take, or says why
    /// not (`in_use` is then what was buffered). A write into an empty budget
    /// is always taken, however large, so no write is refused forever.
    pub fn reserve(&self, bytes: usize) -> Result<Reservation<'_>, Overloaded> {
        let before = self.buffered.fetch_add(bytes, Ordering::AcqRel);
        if before > 0 && before + bytes > self.limit {
            self.buffered.fetch_sub(bytes, Ordering::AcqRel);
            return Err(Overloaded {
                needed: bytes,
                in_use: before,
                limit: self.limit,
            });
        }
        Ok(Reservation {
            budget: self,
            bytes,
        })
    }

    /// Counts spans the engine holds without a reservation: those it
    /// replayed from the WAL at start-up.
    pub fn hold(&self, bytes: usize) {
        self.buffered.fetch_add(bytes, Ordering::AcqRel);
    }

    /// Gives back the bytes of spans that are now in a file.
    pub fn release(&self, bytes: usize) {
        self.buffered.fetch_sub(bytes, Ordering::AcqRel);
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
    pub fn grow(&mut self, more: usize) -> Result<(), Overloaded> {
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

/// Background work counted in the budget ([`MemoryBudget::work`]): the most
/// it expects to hold, which admission keeps room for, and what it holds
/// now, which the samples of the process's memory leave out of the part the
/// budget does not count. Given back on drop.
#[derive(Debug)]
pub struct Work {
    budget: Arc<MemoryBudget>,
    expected: usize,
    held: usize,
}

impl Work {
    /// The work now holds `bytes`; past what it expected, it expects that.
    pub fn holds(&mut self, bytes: usize) {
        let budget = &self.budget;
        if bytes > self.held {
            budget
                .work_held
                .fetch_add(bytes - self.held, Ordering::AcqRel);
        } else {
            budget
                .work_held
                .fetch_sub(self.held - bytes, Ordering::AcqRel);
        }
        self.held = bytes;
        if bytes > self.expected {
            let now = budget
                .work_expected
                .fetch_add(bytes - self.expected, Ordering::AcqRel)
                + (bytes - self.expected);
            budget.work_high.fetch_max(now, Ordering::AcqRel);
            self.expected = bytes;
        }
    }

    /// The most the work expects to hold.
    pub fn expected(&self) -> usize {
        self.expected
    }

    /// What the work holds now, as it last said.
    pub fn held(&self) -> usize {
        self.held
    }
}

impl Drop for Work {
    fn drop(&mut self) {
        let budget = &self.budget;
        budget.work_held.fetch_sub(self.held, Ordering::AcqRel);
        budget
            .work_expected
            .fetch_sub(self.expected, Ordering::AcqRel);
    }
}

/// Bytes of a write reserved as buffered; given back on drop unless the
/// spans reached the memtable ([`Reservation::keep`]), where the flush of
/// their buffer gives them back ([`MemoryBudget::release`]).
#[derive(Debug)]
pub struct Reservation<'a> {
    budget: &'a MemoryBudget,
    bytes: usize,
}

impl Reservation<'_> {
    /// The spans are buffered: their bytes stay counted until their flush.
    pub fn keep(mut self) {
        self.bytes = 0;
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if self.bytes > 0 {
            self.budget.release(self.bytes);
        }
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
        assert_eq!(
            err,
            Overloaded {
                needed: 50,
                in_use: 60,
                limit: 100
            }
        );
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
        budget.hold(90);
        assert!(budget.acquire(20).is_err());
        let mut p = budget.acquire(10).expect("fits");
        assert!(p.grow(1).is_err(), "a failed grow takes nothing");
        assert_eq!(p.bytes(), 10);
        budget.hold(5);
        assert_eq!(budget.in_use(), 105);
        budget.release(95);
        assert!(p.grow(50).is_ok());
    }

    #[test]
    fn the_engine_reserves_up_to_the_limit_and_an_empty_budget_takes_anything() {
        let budget = MemoryBudget::new(100);
        let big = budget
            .reserve(150)
            .expect("an empty budget takes any write");
        assert_eq!(
            budget.reserve(1).expect_err("full"),
            Overloaded {
                needed: 1,
                in_use: 150,
                limit: 100
            }
        );
        drop(big);
        assert_eq!(budget.buffered(), 0, "a dropped reservation gives back");
        budget.reserve(60).expect("fits").keep();
        let _in_flight = budget.acquire(40).expect("requests count apart");
        budget.reserve(40).expect("fits exactly").keep();
        assert!(budget.reserve(1).is_err());
        assert_eq!(budget.buffered(), 100, "kept until released");
        budget.release(100);
        assert_eq!(budget.buffered(), 0);
        assert!(!budget.wants_early_flush(50));
        assert!(budget.wants_early_flush(51));
    }

    #[test]
    fn the_rest_of_the_process_narrows_admission_down_to_the_floor() {
        // A 100-byte budget in a process limited to 150 bytes, never below 40.
        let budget = MemoryBudget::with_process_limit(100, 150, 40);
        assert_eq!(budget.admit_limit(), 100, "before any sample");
        let a = budget.acquire(30).expect("fits");
        // 110 resident, 30 of it counted: the other 80 leave 70 for requests.
        budget.set_resident(110);
        assert_eq!(budget.resident(), 110);
        assert_eq!(budget.admit_limit(), 70);
        let err = budget
            .acquire(41)
            .expect_err("over what the process leaves");
        assert_eq!(
            err,
            Overloaded {
                needed: 41,
                in_use: 30,
                limit: 70
            }
        );
        let b = budget.acquire(40).expect("fits the narrowed limit exactly");
        assert!(!budget.has_room());
        drop(b);
        // The rest grows past the process limit: admission keeps its floor.
        budget.set_resident(500);
        assert_eq!(budget.admit_limit(), 40);
        assert!(budget.acquire(10).is_ok());
        assert!(budget.acquire(11).is_err());
        // It shrinks again: admission stays narrowed while the spike is
        // among the last samples, then widens, never above the budget itself.
        for _ in 1..UNCOUNTED_WINDOW {
            budget.set_resident(30);
            assert_eq!(budget.admit_limit(), 40, "the spike is remembered");
        }
        budget.set_resident(30);
        assert_eq!(budget.admit_limit(), 100);
        drop(a);
        // Without a process limit, samples change nothing.
        let plain = MemoryBudget::new(100);
        plain.set_resident(1 << 40);
        assert_eq!(plain.admit_limit(), 100);
    }

    #[test]
    fn admission_keeps_room_for_background_work_before_it_holds_anything() {
        // A 100-byte budget in a process limited to 200 bytes, never below 10.
        let budget = MemoryBudget::with_process_limit(100, 200, 10);
        budget.set_resident(50);
        assert_eq!(budget.admit_limit(), 100, "150 left: the budget's own");
        let mut merge = budget.work(120);
        assert_eq!(budget.work_room(), 120);
        assert_eq!(
            budget.admit_limit(),
            30,
            "200 - 50 uncounted - 120 expected"
        );
        let request = budget.acquire(30).expect("fits what is left");
        assert!(budget.acquire(1).is_err());
        assert!(budget.has_room_for_work(), "50 + 30 + 120 fit 200 exactly");
        budget.hold(1);
        assert!(!budget.has_room_for_work(), "a buffered byte past it");
        budget.release(1);
        // What the work holds is not taken for the rest of the process.
        merge.holds(100);
        assert_eq!(budget.work_held(), 100);
        budget.set_resident(50 + 30 + 100);
        assert_eq!(budget.admit_limit(), 30);
        // Past what it expected, it expects that.
        merge.holds(130);
        assert_eq!((merge.expected(), merge.held()), (130, 130));
        assert_eq!(budget.admit_limit(), 20);
        drop(merge);
        assert_eq!(budget.work_held(), 0);
        // The room stays for the next merge while the most is among the
        // last samples, then goes.
        assert_eq!(budget.admit_limit(), 20, "the room is kept");
        for _ in 0..WORK_WINDOW {
            budget.set_resident(50 + 30);
            assert_eq!(budget.admit_limit(), 20, "the room is kept");
        }
        budget.set_resident(50 + 30);
        assert_eq!(budget.admit_limit(), 100);
        drop(request);
        // Without a process limit, work changes nothing.
        let plain = MemoryBudget::new(100);
        let _work = plain.work(1 << 40);
        assert_eq!(plain.admit_limit(), 100);
        assert!(plain.has_room_for_work());
    }

    #[test]
    fn concurrent_permits_never_exceed_the_limit() {
        let budget = MemoryBudget::new(1000);
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let budget = Arc::clone(&budget);
                std::thread::spawn(move || {
                    let mut granted = 0u32;
                    for _ in 0..10_000 {
                        if let Ok(p) = budget.acquire(300) {
                            assert!(budget.in_flight() <= 1000);
                            granted += 1;
                            drop(p);
                        }
                    }
                    granted
                })
            })
            .collect();
        let granted: Vec<u32> = threads
            .into_iter()
            .map(|t| t.join().expect("thread"))
            .collect();
        assert_eq!(budget.in_flight(), 0);
        // Three permits of 300 fit in 1,000 at once, so with four threads
        // at most one is refused at any moment: an acquire that always
        // refused (or granted nothing) would leave a thread at zero.
        assert!(
            granted.iter().all(|&g| g > 0),
            "every thread was granted permits: {granted:?}"
        );
        // A fifth permit does not fit beside three.
        let held: Vec<_> = (0..3).map(|_| budget.acquire(300).expect("fits")).collect();
        assert!(budget.acquire(300).is_err());
        drop(held);
        assert!(budget.acquire(300).is_ok());
    }
}
