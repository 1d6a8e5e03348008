//! Events folded into a series only when they say the same thing.
//!
//! kube's `Recorder` folds repeats of an Event within six minutes into one
//! Event with a series count, keyed by type, reason, action and object but
//! not the note: a `JobRestarted` for XID 79 after one for a pod exit
//! became "count 2" of the pod exit, and the second cause and its logs
//! ConfigMap were lost (issue 32 item 7). This is the same recorder with
//! the note in its key (its Event fields and cache time as kube's), and a
//! bound on what it remembers.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as K8sEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use tokio::sync::Mutex;

/// How long a repeat folds into the Event before it (kube's `CACHE_TTL`).
const FOLD_WITHIN: SignedDuration = SignedDuration::from_mins(6);
/// Events remembered for folding at most; past it the oldest go (a repeat
/// of one of them is a new Event, never a lost one).
const REMEMBERED: usize = 4096;

/// What makes two Events one series.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    warning: bool,
    reason: String,
    action: String,
    note: String,
    /// apiVersion, kind, namespace, name, uid of the object.
    regarding: [Option<String>; 5],
}

/// One Event to publish.
pub struct Draft<'a> {
    pub warning: bool,
    pub reason: &'a str,
    pub action: &'a str,
    pub note: String,
}

/// Publishes Events as `controller`/`instance`, folding repeats.
#[derive(Clone)]
pub struct Series {
    client: Client,
    controller: String,
    instance: String,
    cache: Arc<Mutex<Remembered>>,
}

/// The Events remembered for folding, with an index by when each was last
/// seen: expiry and eviction take the oldest in O(log n), never a scan of
/// all [`REMEMBERED`] (a storm of Events on a busy cluster keeps it full).
#[derive(Default)]
struct Remembered {
    events: HashMap<Key, (K8sEvent, (Timestamp, u64))>,
    by_age: BTreeMap<(Timestamp, u64), Key>,
    next: u64,
}

impl Remembered {
    /// Forget what was last seen [`FOLD_WITHIN`] or more before `now`.
    fn expire(&mut self, now: Timestamp) {
        while let Some(entry) = self.by_age.first_entry() {
            if entry.key().0 + FOLD_WITHIN > now {
                break;
            }
            let key = entry.remove();
            self.events.remove(&key);
        }
    }

    fn get(&self, key: &Key) -> Option<&K8sEvent> {
        self.events.get(key).map(|(e, _)| e)
    }

    /// Remember `event` under `key` as seen at `at`; at [`REMEMBERED`] the
    /// oldest goes (a repeat of it is a new Event, never a lost one).
    fn put(&mut self, key: Key, event: K8sEvent, at: Timestamp) {
        if let Some((_, age)) = self.events.remove(&key) {
            self.by_age.remove(&age);
        } else if self.events.len() >= REMEMBERED
            && let Some((_, oldest)) = self.by_age.pop_first()
        {
            self.events.remove(&oldest);
        }
        let age = (at, self.next);
        self.next += 1;
        self.by_age.insert(age, key.clone());
        self.events.insert(key, (event, age));
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.events.len()
    }
}

impl Series {
    pub fn new(client: Client, controller: &str, instance: Option<String>) -> Series {
        Series {
            client,
            controller: controller.to_string(),
            instance: instance.unwrap_or_else(|| controller.to_string()),
            cache: Arc::default(),
        }
    }

    /// Create the Event, or raise the series of the same Event published
    /// within [`FOLD_WITHIN`].
    pub async fn publish(
        &self,
        d: Draft<'_>,
        reference: &ObjectReference,
    ) -> Result<(), kube::Error> {
        let now = Timestamp::now();
        let key = Key {
            warning: d.warning,
            reason: d.reason.to_string(),
            action: d.action.to_string(),
            note: d.note.clone(),
            regarding: [
                reference.api_version.clone(),
                reference.kind.clone(),
                reference.namespace.clone(),
                reference.name.clone(),
                reference.uid.clone(),
            ],
        };
        let event = {
            let mut cache = self.cache.lock().await;
            cache.expire(now);
            match cache.get(&key) {
                Some(e) => {
                    let mut e = e.clone();
                    e.series = Some(EventSeries {
                        count: e.series.as_ref().map_or(2, |s| s.count + 1),
                        last_observed_time: MicroTime(now),
                    });
                    e
                }
                None => self.fresh(&d, reference, now),
            }
        };
        let ns = reference.namespace.as_deref().unwrap_or("default");
        let api: Api<K8sEvent> = Api::namespaced(self.client.clone(), ns);
        if event.series.is_some() {
            api.patch(
                &event.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&event),
            )
            .await?;
        } else {
            api.create(&PostParams::default(), &event).await?;
        }
        let at = last_seen(&event).unwrap_or(now);
        self.cache.lock().await.put(key, event, at);
        Ok(())
    }

    fn fresh(&self, d: &Draft<'_>, reference: &ObjectReference, now: Timestamp) -> K8sEvent {
        K8sEvent {
            action: Some(d.action.to_string()),
            reason: Some(d.reason.to_string()),
            event_time: Some(MicroTime(now)),
            regarding: Some(reference.clone()),
            note: Some(d.note.clone()),
            metadata: ObjectMeta {
                namespace: reference.namespace.clone(),
                name: Some(format!(
                    "{}.{:x}",
                    reference.name.as_deref().unwrap_or(&self.controller),
                    now.as_nanosecond()
                )),
                ..ObjectMeta::default()
            },
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            series: None,
            type_: Some(if d.warning { "Warning" } else { "Normal" }.into()),
            ..K8sEvent::default()
        }
    }
}

/// When the Event was last seen: its series' time, else its own.
fn last_seen(e: &K8sEvent) -> Option<Timestamp> {
    e.series
        .as_ref()
        .map(|s| s.last_observed_time.0)
        .or_else(|| e.event_time.as_ref().map(|t| t.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: usize) -> Key {
        Key {
            warning: false,
            reason: "JobRestarted".into(),
            action: "Restart".into(),
            note: format!("note {n}"),
            regarding: Default::default(),
        }
    }

    #[test]
    fn the_oldest_go_first_and_expired_ones_go_at_once() {
        let t0 = Timestamp::UNIX_EPOCH;
        let s = |n: i64| t0 + SignedDuration::from_secs(n);
        let mut r = Remembered::default();
        for n in 0..REMEMBERED {
            r.put(key(n), K8sEvent::default(), s(n as i64));
        }
        assert_eq!(r.len(), REMEMBERED);
        // Seen again: now the newest, so not the one evicted next.
        r.put(key(0), K8sEvent::default(), s(10_000));
        r.put(key(REMEMBERED), K8sEvent::default(), s(10_001));
        assert_eq!(r.len(), REMEMBERED);
        assert!(r.get(&key(0)).is_some(), "refreshed, kept");
        assert!(r.get(&key(1)).is_none(), "the oldest went");
        assert!(r.get(&key(2)).is_some());
        // Six minutes after 10,000 s only what was seen since stays.
        r.expire(s(10_000) + FOLD_WITHIN);
        assert_eq!(r.len(), 1);
        assert!(r.get(&key(REMEMBERED)).is_some());
        assert_eq!(r.by_age.len(), 1, "the index follows");
    }
}
