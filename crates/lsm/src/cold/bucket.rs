//! A bucket and prefix of an object store, spoken to through the
//! `object_store` crate, with a blocking API for the engine's threads.
//!
//! The crate is asynchronous; the engine's flusher, compactors and readers
//! are plain threads, some of them inside the server's tokio runtime. So a
//! [`Bucket`] owns a small runtime of its own, and each call spawns its
//! future there and waits on a channel: that works from any thread, and
//! never nests one runtime's `block_on` in another's.
//!
//! Two clients share the bucket: reads time out fast and retry little (a
//! query that needs an unreachable object must answer partial in seconds,
//! not after minutes of retries), uploads get long timeouts (a file of
//! tens of MiB on a slow link) and the retries of the worker that calls
//! them.

use std::{
    fmt,
    future::Future,
    ops::Range,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use bytes::Bytes;
use object_store::{
    aws::AmazonS3Builder, memory::InMemory, path::Path as Key, BackoffConfig, ClientOptions,
    ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, RetryConfig,
};

use crate::error::{Error, Result};

/// Where the cold tier lives: `s3://bucket/prefix` (credentials and region
/// from the environment, as AWS tools take them), or `memory://name` (an
/// in-process store, for tests and trials; gone when the process ends).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketConfig {
    pub url: String,
    /// An S3-compatible server's address (`http://127.0.0.1:8333`); `None`
    /// for AWS.
    pub endpoint: Option<String>,
    /// The region; `None` takes `AWS_REGION` or `AWS_DEFAULT_REGION`, else
    /// `us-east-1`.
    pub region: Option<String>,
}

/// What the object store was asked, for `/metrics`.
#[derive(Debug, Default)]
pub struct BucketCounters {
    pub uploads: AtomicU64,
    pub upload_bytes: AtomicU64,
    pub gets: AtomicU64,
    pub get_bytes: AtomicU64,
    pub deletes: AtomicU64,
    pub lists: AtomicU64,
    pub errors: AtomicU64,
}

/// A snapshot of [`BucketCounters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BucketStats {
    pub uploads: u64,
    pub upload_bytes: u64,
    pub gets: u64,
    pub get_bytes: u64,
    pub deletes: u64,
    pub lists: u64,
    pub errors: u64,
}

struct Shared {
    read: Arc<dyn ObjectStore>,
    write: Arc<dyn ObjectStore>,
    /// `Some` until drop, which shuts it down without waiting (a drop may
    /// happen inside another runtime, where a blocking shutdown panics).
    runtime: Option<tokio::runtime::Runtime>,
    /// The URL without its prefix (`s3://bucket`), for messages.
    base: String,
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// One prefix of an object store; cheap to clone. [`Bucket::child`] is a
/// prefix under it (a tenant's), on the same clients.
#[derive(Clone)]
pub struct Bucket {
    shared: Arc<Shared>,
    /// No leading or trailing `/`; empty for the bucket's root.
    prefix: String,
    counters: Arc<BucketCounters>,
}

impl fmt::Debug for Bucket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Bucket({self})")
    }
}

impl fmt::Display for Bucket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.prefix.is_empty() {
            write!(f, "{}", self.shared.base)
        } else {
            write!(f, "{}/{}", self.shared.base, self.prefix)
        }
    }
}

/// Read requests give up after this long each ...
const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// ... and their retries after this long in all.
const READ_RETRY_TIMEOUT: Duration = Duration::from_secs(15);
/// Uploads and other writes.
const WRITE_TIMEOUT: Duration = Duration::from_secs(300);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

fn refused(url: &str, why: impl fmt::Display) -> Error {
    Error::Remote {
        op: "open",
        object: url.to_owned(),
        reason: why.to_string(),
    }
}

impl Bucket {
    /// Opens the store `config` names. Nothing is sent yet: a wrong bucket
    /// or credentials show at the first request (the engine's lease, at
    /// open).
    pub fn open(config: &BucketConfig) -> Result<Bucket> {
        let url = config.url.trim_end_matches('/');
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| refused(url, "expected s3://bucket/prefix"))?;
        let (name, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if name.is_empty() {
            return Err(refused(url, "no bucket name"));
        }
        let (read, write): (Arc<dyn ObjectStore>, Arc<dyn ObjectStore>) = match scheme {
            "s3" => (
                Arc::new(s3(config, name, READ_TIMEOUT, 2, READ_RETRY_TIMEOUT)?),
                Arc::new(s3(
                    config,
                    name,
                    WRITE_TIMEOUT,
                    5,
                    Duration::from_secs(600),
                )?),
            ),
            "memory" => {
                let store = Arc::new(InMemory::new());
                (store.clone(), store)
            }
            other => {
                return Err(refused(
                    url,
                    format!("unsupported scheme {other:?}: use s3://"),
                ))
            }
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("tracedb-objects")
            .enable_all()
            .build()
            .map_err(|e| refused(url, e))?;
        Ok(Bucket {
            shared: Arc::new(Shared {
                read,
                write,
                runtime: Some(runtime),
                base: format!("{scheme}://{name}"),
            }),
            prefix: prefix.trim_matches('/').to_owned(),
            counters: Arc::default(),
        })
    }

    /// The prefix `name` under this one (`tenants/acme`), with counters of
    /// its own.
    pub fn child(&self, name: &str) -> Bucket {
        let prefix = if self.prefix.is_empty() {
            name.to_owned()
        } else {
            format!("{}/{name}", self.prefix)
        };
        Bucket {
            shared: self.shared.clone(),
            prefix,
            counters: Arc::default(),
        }
    }

    pub fn stats(&self) -> BucketStats {
        let c = &*self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        BucketStats {
            uploads: get(&c.uploads),
            upload_bytes: get(&c.upload_bytes),
            gets: get(&c.gets),
            get_bytes: get(&c.get_bytes),
            deletes: get(&c.deletes),
            lists: get(&c.lists),
            errors: get(&c.errors),
        }
    }

    fn key(&self, name: &str) -> Key {
        if self.prefix.is_empty() {
            Key::from(name)
        } else {
            Key::from(format!("{}/{name}", self.prefix))
        }
    }

    /// Runs `fut` on the bucket's runtime and waits for it.
    fn run<T: Send + 'static>(&self, fut: impl Future<Output = T> + Send + 'static) -> T {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let rt = self
            .shared
            .runtime
            .as_ref()
            .expect("the runtime lives as long as the bucket");
        rt.spawn(async move {
            let _ = tx.send(fut.await);
        });
        rx.recv()
            .expect("the object store's runtime dropped a request")
    }

    fn failed(&self, op: &'static str, name: &str, e: object_store::Error) -> Error {
        self.counters.errors.fetch_add(1, Ordering::Relaxed);
        Error::Remote {
            op,
            object: format!("{self}/{name}"),
            reason: e.to_string(),
        }
    }

    /// Writes object `name` whole; returns its ETag as the store gave it.
    pub fn put(&self, name: &str, body: Bytes) -> Result<Option<String>> {
        let len = body.len() as u64;
        let (store, key) = (self.shared.write.clone(), self.key(name));
        match self.run(async move { store.put(&key, PutPayload::from(body)).await }) {
            Ok(r) => {
                self.counters.uploads.fetch_add(1, Ordering::Relaxed);
                self.counters.upload_bytes.fetch_add(len, Ordering::Relaxed);
                Ok(r.e_tag)
            }
            Err(e) => Err(self.failed("PUT", name, e)),
        }
    }

    /// Writes object `name` unless it exists: `false` when it did.
    pub fn put_if_absent(&self, name: &str, body: Bytes) -> Result<bool> {
        let (store, key) = (self.shared.write.clone(), self.key(name));
        let opts = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        match self.run(async move { store.put_opts(&key, PutPayload::from(body), opts).await }) {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. })
            | Err(object_store::Error::Precondition { .. }) => Ok(false),
            Err(e) => Err(self.failed("PUT", name, e)),
        }
    }

    /// Object `name` whole, or `None` when there is none.
    pub fn get(&self, name: &str) -> Result<Option<Bytes>> {
        let (store, key) = (self.shared.read.clone(), self.key(name));
        let got = self.run(async move {
            match store.get(&key).await {
                Ok(r) => r.bytes().await,
                Err(e) => Err(e),
            }
        });
        match got {
            Ok(b) => {
                self.counted_get(b.len());
                Ok(Some(b))
            }
            Err(object_store::Error::NotFound { .. }) => {
                self.counted_get(0);
                Ok(None)
            }
            Err(e) => Err(self.failed("GET", name, e)),
        }
    }

    fn counted_get(&self, len: usize) {
        self.counters.gets.fetch_add(1, Ordering::Relaxed);
        self.counters
            .get_bytes
            .fetch_add(len as u64, Ordering::Relaxed);
    }

    /// Bytes `range` of object `name`, with one ranged GET.
    pub fn get_range(&self, name: &str, range: Range<u64>) -> Result<Bytes> {
        let want = range.end - range.start;
        let (store, key) = (self.shared.read.clone(), self.key(name));
        match self.run(async move { store.get_range(&key, range).await }) {
            Ok(b) if b.len() as u64 == want => {
                self.counted_get(b.len());
                Ok(b)
            }
            Ok(b) => {
                self.counters.errors.fetch_add(1, Ordering::Relaxed);
                Err(Error::Remote {
                    op: "GET",
                    object: format!("{self}/{name}"),
                    reason: format!("asked for {want} bytes, got {}", b.len()),
                })
            }
            Err(e) => Err(self.failed("GET", name, e)),
        }
    }

    /// Size and ETag of object `name`, or `None` when there is none.
    pub fn head(&self, name: &str) -> Result<Option<(u64, Option<String>)>> {
        let (store, key) = (self.shared.read.clone(), self.key(name));
        match self.run(async move { store.head(&key).await }) {
            Ok(m) => Ok(Some((m.size, m.e_tag))),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.failed("HEAD", name, e)),
        }
    }

    /// Deletes object `name`; deleting one that is not there succeeds.
    pub fn delete(&self, name: &str) -> Result<()> {
        let (store, key) = (self.shared.write.clone(), self.key(name));
        match self.run(async move { store.delete(&key).await }) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {
                self.counters.deletes.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err(e) => Err(self.failed("DELETE", name, e)),
        }
    }

    /// Every object under `dir` (a folder of this prefix; `""` for all of
    /// it), as (name relative to this prefix, size). Listing is what the
    /// engine avoids: it runs only at start-up (orphan objects) and when a
    /// tenant's objects are deleted.
    pub fn list(&self, dir: &str) -> Result<Vec<(String, u64)>> {
        self.counters.lists.fetch_add(1, Ordering::Relaxed);
        let store = self.shared.read.clone();
        let under = self.key(dir.trim_end_matches('/'));
        let listed = self.run(async move {
            let mut stream = store.list(Some(&under));
            let mut out = Vec::new();
            while let Some(item) =
                std::future::poll_fn(|cx| futures_core::Stream::poll_next(stream.as_mut(), cx))
                    .await
            {
                let meta = item?;
                out.push((meta.location.to_string(), meta.size));
            }
            Ok::<_, object_store::Error>(out)
        });
        let skip = if self.prefix.is_empty() {
            0
        } else {
            self.prefix.len() + 1
        };
        match listed {
            Ok(all) => Ok(all
                .into_iter()
                .filter_map(|(k, size)| k.get(skip..).map(|n| (n.to_owned(), size)))
                .collect()),
            Err(e) => Err(self.failed("LIST", dir, e)),
        }
    }

    /// Runs `jobs` (blocking calls on this bucket) on up to `width` threads
    /// at once; the results in order.
    pub fn parallel<T: Send, J: Fn() -> Result<T> + Send + Sync>(
        jobs: &[J],
        width: usize,
    ) -> Vec<Result<T>> {
        let next = AtomicU64::new(0);
        let mut out: Vec<Option<Result<T>>> = (0..jobs.len()).map(|_| None).collect();
        let slots = parking_lot::Mutex::new(&mut out);
        std::thread::scope(|s| {
            for _ in 0..width.clamp(1, jobs.len().max(1)) {
                s.spawn(|| loop {
                    let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                    let Some(job) = jobs.get(i) else { break };
                    let r = job();
                    slots.lock()[i] = Some(r);
                });
            }
        });
        out.into_iter().map(|r| r.expect("every job ran")).collect()
    }
}

fn s3(
    config: &BucketConfig,
    bucket: &str,
    timeout: Duration,
    max_retries: usize,
    retry_timeout: Duration,
) -> Result<object_store::aws::AmazonS3> {
    let mut b = AmazonS3Builder::from_env().with_bucket_name(bucket);
    if let Some(region) = &config.region {
        b = b.with_region(region);
    }
    if let Some(endpoint) = &config.endpoint {
        b = b
            .with_endpoint(endpoint)
            .with_allow_http(endpoint.starts_with("http://"));
    }
    let client = ClientOptions::new()
        .with_timeout(timeout)
        .with_connect_timeout(CONNECT_TIMEOUT)
        .with_allow_http(
            config
                .endpoint
                .as_deref()
                .is_some_and(|e| e.starts_with("http://")),
        );
    b.with_client_options(client)
        .with_retry(RetryConfig {
            backoff: BackoffConfig::default(),
            max_retries,
            retry_timeout,
        })
        .build()
        .map_err(|e| refused(&config.url, e))
}
