//! The fan-in of a fan-out: what each node said ([`Outcome`]), every
//! node's outcome by group ([`Gathered`]) and what an answer made of them
//! is (whole, partial, not found, unavailable), when a fan-out has its
//! answer ([`Wait`]), and running the calls together ([`join_in_order`]).

use std::{future::Future, pin::Pin, sync::Arc, task::Poll};

use super::Node;
use crate::{error::Error, read::Answer};

/// What one node said.
pub(super) enum Outcome<T> {
    /// An answer; the node's own partial reason, if it gave one.
    Answered(T, Option<String>),
    NotFound,
    /// Failed or timed out: why.
    Failed(String),
}

/// A node and what it said.
pub(super) type NodeOutcome<T> = (Arc<Node>, Outcome<T>);

/// Every node's outcome, by group.
pub(super) struct Gathered<T> {
    pub(super) groups: Vec<Vec<NodeOutcome<T>>>,
    /// Per group, why it is known to lack nodes ([`Group::missing`]).
    pub(super) missing: Vec<Vec<String>>,
}

impl<T> Gathered<T> {
    /// Whether some group answered in full: every node answered (or said
    /// not found) and none was partial.
    pub(super) fn has_full_group(&self) -> bool {
        self.full_group().is_some()
    }

    pub(super) fn full_group(&self) -> Option<usize> {
        (0..self.groups.len()).find(|&i| self.is_full(i))
    }

    /// Whether group `i` lacks no node and every node of it answered (or
    /// said not found), none partial.
    pub(super) fn is_full(&self, i: usize) -> bool {
        self.missing[i].is_empty()
            && self.groups[i].iter().all(|(_, o)| match o {
                Outcome::Answered(_, partial) => partial.is_none(),
                Outcome::NotFound => true,
                Outcome::Failed(_) => false,
            })
    }

    /// Why the answer may be incomplete: empty if some group answered in full.
    pub(super) fn partial(&self) -> Vec<String> {
        if self.has_full_group() {
            return Vec::new();
        }
        self.reasons(true)
    }

    /// Every group's missing nodes, then every node that failed (and, with
    /// `partials`, that answered partial), each with why.
    pub(super) fn reasons(&self, partials: bool) -> Vec<String> {
        let nodes = self
            .groups
            .iter()
            .flatten()
            .filter_map(|(node, o)| match o {
                Outcome::Failed(why) => Some(format!("node {}: {why}", node.addr)),
                Outcome::Answered(_, Some(why)) if partials => {
                    Some(format!("node {}: {why}", node.addr))
                }
                _ => None,
            });
        self.missing
            .iter()
            .flatten()
            .cloned()
            .chain(nodes)
            .collect()
    }

    /// Whether every node said NOT_FOUND and no group lacks a node.
    pub(super) fn all_not_found(&self) -> bool {
        self.missing.iter().all(Vec::is_empty)
            && self
                .groups
                .iter()
                .flatten()
                .all(|(_, o)| matches!(o, Outcome::NotFound))
    }

    pub(super) fn answered(&self) -> impl Iterator<Item = &T> {
        self.groups.iter().flatten().filter_map(|(_, o)| match o {
            Outcome::Answered(v, _) => Some(v),
            _ => None,
        })
    }

    pub(super) fn none_answered(&self) -> bool {
        self.groups
            .iter()
            .flatten()
            .all(|(_, o)| matches!(o, Outcome::Failed(_)))
    }

    /// The reasons every node failed, for [`Error::Unavailable`].
    pub(super) fn unavailable(&self) -> Error {
        Error::Unavailable(crate::read::describe(&self.reasons(false)))
    }

    /// A union-style answer: UNAVAILABLE when no node answered at all.
    pub(super) fn answer<V>(&self, value: impl FnOnce(&Self) -> V) -> Result<Answer<V>, Error> {
        if self.none_answered() {
            return Err(self.unavailable());
        }
        Ok(Answer {
            value: value(self),
            partial: self.partial(),
        })
    }
}

/// When a fan-out has its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Wait {
    /// Once one group has answered in full with something found (a full
    /// copy), or else once every node has answered or timed out.
    FirstFullGroup,
    /// Once every node has answered or timed out: for dependencies, where a
    /// group holding a trace split over two of its nodes misses the calls
    /// between the parts, and another group may have them.
    Every,
}

/// Whether every node of a group has answered, none partial and none
/// failed, and some found something: the group's answer is whole. A group
/// where every node said NOT_FOUND does not end the wait: NOT_FOUND is
/// answered only when every node of every group said so.
pub(super) fn found_in_full<T>(group: &[Option<NodeOutcome<T>>]) -> bool {
    let mut found = false;
    for outcome in group {
        match outcome {
            Some((_, Outcome::Answered(_, None))) => found = true,
            Some((_, Outcome::NotFound)) => {}
            _ => return false,
        }
    }
    found
}

/// The outputs of `futures`, run concurrently on this task, in their order.
pub(super) async fn join_in_order<F: Future>(
    futures: impl IntoIterator<Item = F>,
) -> Vec<F::Output> {
    let mut futures: Vec<Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, output) in futures.iter_mut().zip(outputs.iter_mut()) {
            // A future that finished is not polled again.
            if output.is_none() {
                match future.as_mut().poll(cx) {
                    Poll::Ready(value) => *output = Some(value),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    outputs
        .into_iter()
        .map(|o| o.expect("every future finished"))
        .collect()
}

/// Tells a fan-out's calls that its caller went away: dropped before
/// [`CallerGone::answered`], it wakes every [`CallerGone::watch`], whose
/// calls then drop their requests (and the nodes stop their queries,
/// [`crate::cancel`]). Once answered, the calls still running run on.
pub(super) struct CallerGone(Option<tokio::sync::watch::Sender<bool>>);

impl CallerGone {
    pub(super) fn new() -> Self {
        CallerGone(Some(tokio::sync::watch::channel(false).0))
    }

    /// Resolves when the caller went away; never once it was answered.
    pub(super) fn watch(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut gone = self
            .0
            .as_ref()
            .expect("watched before answered")
            .subscribe();
        async move {
            if gone.wait_for(|gone| *gone).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// The caller has its answer: the calls still running may finish.
    pub(super) fn answered(mut self) {
        self.0.take();
    }
}

impl Drop for CallerGone {
    fn drop(&mut self) {
        if let Some(gone) = self.0.take() {
            let _ = gone.send(true);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::CallerGone;

    #[tokio::test]
    async fn calls_hear_that_the_caller_went_away_but_not_that_it_was_answered() {
        let answered = CallerGone::new();
        let call = answered.watch();
        answered.answered();
        let heard = tokio::time::timeout(Duration::from_millis(50), call).await;
        assert!(heard.is_err(), "an answered caller is not gone");

        let dropped = CallerGone::new();
        let call = dropped.watch();
        drop(dropped);
        tokio::time::timeout(Duration::from_secs(10), call)
            .await
            .expect("a dropped caller is gone");
    }
}
