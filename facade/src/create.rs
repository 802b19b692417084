//! One creator at a time per session id, within a process.
//!
//! [`Forge::create_session`](crate::Forge::create_session) checks that the id is free
//! and writes the session under its projector's claim on the session. The claim keeps
//! other processes out (their claim is refused, or fences this one's write); the
//! projector's writers within one process share one claim, so creators of one id in the
//! same process take turns here.

use std::collections::HashMap;
use std::sync::Arc;

use forge_core::{SessionId, TenantId};
use parking_lot::Mutex;
use tokio::sync::OwnedMutexGuard;

type Key = (TenantId, SessionId);

/// The sessions being created now, each with the lock its creators queue on.
#[derive(Debug, Default)]
pub(crate) struct Creating {
    locks: Mutex<HashMap<Key, Arc<tokio::sync::Mutex<()>>>>,
}

impl Creating {
    /// Waits until no other creator of `session` in `tenant` is running, and holds that
    /// until the guard is dropped.
    pub(crate) async fn lock(
        self: &Arc<Self>,
        tenant: &TenantId,
        session: &SessionId,
    ) -> CreateGuard {
        let key = (tenant.clone(), session.clone());
        let lock = Arc::clone(self.locks.lock().entry(key.clone()).or_default());
        let held = lock.lock_owned().await;
        CreateGuard {
            creating: Arc::clone(self),
            key,
            held: Some(held),
        }
    }

    /// How many ids have creators now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.locks.lock().len()
    }
}

/// A creator's turn; the last one out forgets the id.
pub(crate) struct CreateGuard {
    creating: Arc<Creating>,
    key: Key,
    held: Option<OwnedMutexGuard<()>>,
}

impl Drop for CreateGuard {
    fn drop(&mut self) {
        drop(self.held.take());
        let mut locks = self.creating.locks.lock();
        // Only the map holds it: nobody waits for it.
        if locks
            .get(&self.key)
            .is_some_and(|l| Arc::strong_count(l) == 1)
        {
            locks.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn creators_of_one_id_take_turns_and_the_id_is_forgotten_after() {
        let creating = Arc::new(Creating::default());
        let tenant = TenantId::default_tenant();
        let a = SessionId::from("ses_a");
        let first = creating.lock(&tenant, &a).await;
        let waiting = {
            let creating = Arc::clone(&creating);
            let (tenant, a) = (tenant.clone(), a.clone());
            tokio::spawn(async move {
                let _turn = creating.lock(&tenant, &a).await;
            })
        };
        // Another id is not held up.
        drop(creating.lock(&tenant, &SessionId::from("ses_b")).await);
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(
            !waiting.is_finished(),
            "a second creator ran during the first"
        );
        drop(first);
        waiting.await.unwrap();
        assert_eq!(creating.len(), 0);
    }
}
