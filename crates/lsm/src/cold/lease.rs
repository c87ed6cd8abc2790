//! One node per prefix: the object `PREFIX/lease` names the node that
//! writes under the prefix and until when (Unix ms), renewed by its cold
//! worker at a third of the lease's length and deleted at a clean stop.
//!
//! A node starts only if the lease is absent (created with a conditional
//! PUT), its own (the same `DATA_DIR/NODE`), or expired; it then reads the
//! lease back and gives up if another node's write won. A node that finds
//! at renewal that the lease is another's stops uploading and deleting
//! (it is fenced) and says so in its log; reads go on.

use std::{
    sync::atomic::{AtomicBool, Ordering},
    time::Duration,
};

use bytes::Bytes;

use super::Bucket;
use crate::{
    error::{Error, Result},
    layout::OBJECT_LEASE,
};

/// A lease this node holds.
#[derive(Debug)]
pub struct Lease {
    bucket: Bucket,
    holder: String,
    ttl: Duration,
    lost: AtomicBool,
}

/// The lease object's text: holder, then expiry in Unix ms.
fn body(holder: &str, until_ms: u64) -> Bytes {
    Bytes::from(format!("{holder}\n{until_ms}\n"))
}

fn parse(bytes: &[u8]) -> Option<(String, u64)> {
    let text = std::str::from_utf8(bytes).ok()?;
    let mut lines = text.lines();
    let holder = lines.next()?.to_owned();
    let until = lines.next()?.trim().parse().ok()?;
    Some((holder, until))
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Lease {
    /// Takes the lease of `bucket`'s prefix for `holder`, or
    /// [`Error::LeaseHeld`] naming the node that has it.
    pub fn acquire(bucket: &Bucket, holder: &str, ttl: Duration) -> Result<Lease> {
        let until = now_ms() + ttl.as_millis() as u64;
        if !bucket.put_if_absent(OBJECT_LEASE, body(holder, until))? {
            let current = bucket.get(OBJECT_LEASE)?;
            if let Some((other, other_until)) = current.as_deref().and_then(parse) {
                if other != holder && other_until > now_ms() {
                    return Err(held(bucket, other, other_until));
                }
            }
            bucket.put(OBJECT_LEASE, body(holder, until))?;
            // Two nodes that both found the lease expired both wrote it:
            // the last write holds, and the other finds out here.
            if let Some((other, other_until)) = bucket.get(OBJECT_LEASE)?.as_deref().and_then(parse)
            {
                if other != holder {
                    return Err(held(bucket, other, other_until));
                }
            }
        }
        tracing::info!(bucket = %bucket, holder, "holding the object store's lease");
        Ok(Lease {
            bucket: bucket.clone(),
            holder: holder.to_owned(),
            ttl,
            lost: AtomicBool::new(false),
        })
    }

    /// Whether another node took the lease: this one must not write.
    pub fn is_lost(&self) -> bool {
        self.lost.load(Ordering::Acquire)
    }

    /// Extends the lease; `Ok(false)` (and lost from then on) when another
    /// node holds it now.
    pub fn renew(&self) -> Result<bool> {
        if self.is_lost() {
            return Ok(false);
        }
        if let Some((other, until)) = self.bucket.get(OBJECT_LEASE)?.as_deref().and_then(parse) {
            if other != self.holder && until > now_ms() {
                self.lost.store(true, Ordering::Release);
                tracing::error!(bucket = %self.bucket, holder = other, "another node took the object store's lease; this node stops writing to it");
                return Ok(false);
            }
        }
        let until = now_ms() + self.ttl.as_millis() as u64;
        self.bucket.put(OBJECT_LEASE, body(&self.holder, until))?;
        Ok(true)
    }

    /// How often [`Lease::renew`] should run.
    pub fn renew_every(&self) -> Duration {
        self.ttl / 3
    }

    /// Gives the lease up (a clean stop), if it is still this node's.
    pub fn release(&self) {
        if self.is_lost() {
            return;
        }
        let ours = matches!(
            self.bucket.get(OBJECT_LEASE).ok().flatten().as_deref().and_then(parse),
            Some((holder, _)) if holder == self.holder
        );
        if ours {
            if let Err(e) = self.bucket.delete(OBJECT_LEASE) {
                tracing::warn!(error = %e, "giving up the object store's lease");
            }
        }
    }
}

fn held(bucket: &Bucket, holder: String, until_unix_ms: u64) -> Error {
    Error::LeaseHeld {
        object: format!("{bucket}/{OBJECT_LEASE}"),
        holder,
        until_unix_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cold::BucketConfig;

    #[test]
    fn a_lease_keeps_other_nodes_out_until_it_expires_or_is_released() {
        let bucket = Bucket::open(&BucketConfig {
            url: "memory://leases/p".into(),
            endpoint: None,
            region: None,
        })
        .expect("bucket");
        let a = Lease::acquire(&bucket, "a", Duration::from_millis(300)).expect("a takes it");
        let again = Lease::acquire(&bucket, "a", Duration::from_millis(300));
        assert!(
            again.is_ok(),
            "a node takes its own lease back after a restart"
        );
        match Lease::acquire(&bucket, "b", Duration::from_millis(300)) {
            Err(Error::LeaseHeld { holder, .. }) => assert_eq!(holder, "a"),
            other => panic!("b must be refused: {other:?}"),
        }
        std::thread::sleep(Duration::from_millis(400));
        let b = Lease::acquire(&bucket, "b", Duration::from_secs(60)).expect("expired: b takes it");
        assert!(!a.renew().expect("renew"), "a finds it lost");
        assert!(a.is_lost());
        a.release();
        assert!(
            b.renew().expect("renew"),
            "a's release left b's lease alone"
        );
        b.release();
        Lease::acquire(&bucket, "c", Duration::from_secs(60)).expect("released: c takes it");
    }
}
