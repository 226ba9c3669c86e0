//! Release notices as the subscriptions deliver them: a wake-up at the first copy of each
//! notice, the successor it names, and how many nodes have sent it. Every node publishes the
//! notice as it deletes the key there, so a quorum of copies means the key is gone on a quorum.

use std::sync::Mutex;

use tokio::sync::Notify;

use super::candidates;

/// The notices of one lease, fed by every node's subscription ([`super::node::Node::subscribe`]).
pub struct Notices {
    /// Wakes the elector at the first copy of a notice.
    notify: Notify,
    /// Wakes a waiting named successor when a quorum of copies has arrived.
    quorum_reached: Notify,
    /// Copies that mean "gone on a quorum".
    quorum: usize,
    /// The latest notice and its copies so far.
    latest: Mutex<Latest>,
}

/// The latest notice: copies of one notice arrive from every node, and a new payload starts
/// the count again.
#[derive(Default)]
struct Latest {
    /// Its payload, to tell a copy from a new notice.
    payload: String,
    /// The successor it names, if any.
    successor: Option<String>,
    /// How often the shard it hands over has moved in a rollout, if it says.
    moved: Option<u8>,
    /// Copies received.
    copies: usize,
}

impl Notices {
    /// Notices for a lease over nodes with this quorum.
    pub fn new(quorum: usize) -> Self {
        Notices {
            notify: Notify::new(),
            quorum_reached: Notify::new(),
            quorum,
            latest: Mutex::new(Latest::default()),
        }
    }

    /// The latest notice. A poisoned lock only means a panic elsewhere mid-update; the data is
    /// plain.
    fn latest(&self) -> std::sync::MutexGuard<'_, Latest> {
        self.latest.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Record one node's copy of a notice; wake the elector at the first copy, a waiting named
    /// successor at the quorum-th.
    pub fn post(&self, payload: &str) {
        let copies = {
            let mut latest = self.latest();
            if latest.payload == payload {
                latest.copies += 1;
            } else {
                *latest = Latest {
                    payload: payload.to_string(),
                    successor: candidates::notice_successor(payload).map(String::from),
                    moved: candidates::notice_moved(payload),
                    copies: 1,
                };
            }
            latest.copies
        };
        if copies == 1 {
            self.notify.notify_one();
        }
        if copies == self.quorum {
            self.quorum_reached.notify_one();
        }
    }

    /// Resolves at the first copy of the next notice.
    pub async fn notified(&self) {
        self.notify.notified().await
    }

    /// Resolves when a quorum of copies has arrived (possibly of an earlier notice: check
    /// [`Notices::copies`]).
    pub async fn quorum_reached(&self) {
        self.quorum_reached.notified().await
    }

    /// The successor the latest notice named, if any.
    pub fn successor(&self) -> Option<String> {
        self.latest().successor.clone()
    }

    /// How often the shard has moved in a rollout, as the latest notice told `identity`, if it
    /// named `identity` and said ([`candidates::notice_moved`]).
    pub fn moved_for(&self, identity: &str) -> Option<u8> {
        let latest = self.latest();
        latest
            .moved
            .filter(|_| latest.successor.as_deref() == Some(identity))
    }

    /// How many nodes have sent the latest notice.
    pub fn copies(&self) -> usize {
        self.latest().copies
    }

    /// Copies that mean the key is gone on a quorum.
    pub fn quorum(&self) -> usize {
        self.quorum
    }
}
