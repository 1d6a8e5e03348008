//! The controller's watches: pods (compacted in their task), nodes, fault
//! Events, device-plugin ConfigMaps, policies, classifications, and one
//! watch per installed job kind. Job kinds are discovered, not assumed:
//! a discovery that fails is retried with backoff (the core decides
//! nothing until it answered), and CRDs installed or removed later start
//! or stop their kind's watch.

use super::config::ControllerArgs;
use super::core::input::{Change, Input, PodSeen};
use super::core::pods::{Interner, ProgressKeys};
use crate::api::{FaultClassification, RecoveryPolicy, WorkloadKind};
use crate::k8s::watch::{self, Change as W, Stamp};
use k8s_openapi::api::core::v1::{ConfigMap, Event, Node, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject};
use kube::discovery::ApiResource;
use kube::runtime::watcher::watcher;
use std::collections::{BTreeSet, HashMap};
use std::time::Duration;
use tokio::sync::mpsc;

/// Where watch tasks send their inputs, stamped with arrival.
pub type Tx = mpsc::Sender<(Input, Stamp)>;

/// A watch change as the core takes it; `Err` for a stream error.
fn core_change<K>(c: W<K>) -> Result<Change<K>, String> {
    match c {
        W::Apply(o) => Ok(Change::Apply(o)),
        W::Delete(o) => Ok(Change::Delete(o)),
        W::Relist => Ok(Change::Relist),
        W::Synced => Ok(Change::Synced),
        W::Error(e) => Err(e),
    }
}

fn wrap<K>(
    name: &'static str,
    f: impl Fn(Change<K>) -> Input,
) -> impl FnMut(W<K>) -> Option<Input> {
    move |c| {
        Some(match core_change(c) {
            Ok(c) => f(c),
            Err(_) => Input::WatchError(name),
        })
    }
}

/// Start the watches of everything but the job kinds.
pub fn spawn_base(
    client: &kube::Client,
    args: &ControllerArgs,
    tx: &Tx,
    progress_keys: &ProgressKeys,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    let mut pod_cfg = watch::config();
    if let Some(sel) = &args.pod_selector {
        pod_cfg = pod_cfg.labels(sel);
    }
    let max_age = args.fault_max_age;
    let keys = progress_keys.clone();
    let mut pool = Interner::default();
    tasks.push(watch::spawn(
        "pods",
        watcher(Api::<Pod>::all(client.clone()), pod_cfg),
        tx.clone(),
        move |c: W<Pod>| {
            Some(match core_change(c) {
                Ok(Change::Apply(p)) => Input::Pod(Change::Apply(PodSeen::read(
                    &p,
                    max_age,
                    &keys.get(),
                    &mut pool,
                    chrono::Utc::now(),
                ))),
                Ok(Change::Delete(p)) => Input::Pod(Change::Delete(PodSeen::gone(&p, &mut pool))),
                Ok(Change::Relist) => Input::Pod(Change::Relist),
                Ok(Change::Synced) => Input::Pod(Change::Synced),
                Err(_) => Input::WatchError("pods"),
            })
        },
    ));
    tasks.push(watch::spawn(
        "nodes",
        watcher(Api::<Node>::all(client.clone()), watch::config()),
        tx.clone(),
        wrap("nodes", |c| Input::Node(c.boxed())),
    ));
    tasks.push(watch::spawn(
        "events",
        watcher(Api::<Event>::all(client.clone()), watch::config()),
        tx.clone(),
        wrap("events", |c| Input::Event(c.boxed())),
    ));
    tasks.push(watch::spawn(
        "configmaps",
        watcher(
            Api::<ConfigMap>::namespaced(client.clone(), "kube-system"),
            watch::config(),
        ),
        tx.clone(),
        wrap("configmaps", |c| Input::DeviceInfo(c.boxed())),
    ));
    tasks.push(watch::spawn(
        "policies",
        watcher(Api::<RecoveryPolicy>::all(client.clone()), watch::config()),
        tx.clone(),
        wrap("policies", |c| Input::Policy(c.boxed())),
    ));
    tasks.push(watch::spawn(
        "classifications",
        watcher(
            Api::<FaultClassification>::all(client.clone()),
            watch::config(),
        ),
        tx.clone(),
        wrap("classifications", |c| Input::Classification(c.boxed())),
    ));
    tasks
}

/// Watch the DRA objects device scope reads (docs/devices.md), where the
/// server serves them: ResourceSlices and ResourceClaims
/// (`resource.k8s.io/v1`, Kubernetes 1.34+) and rebound's own
/// DeviceTaintRules (`resource.k8s.io/v1beta2`, 1.36 with the API on).
/// Without them faults keep the node as their scope. Asked once at start;
/// a cluster that turns DRA on later needs a controller restart.
pub fn spawn_dra(client: kube::Client, tx: Tx) -> tokio::task::JoinHandle<()> {
    use super::core::input::DraChange;
    use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
    use k8s_openapi::api::resource::v1beta2::DeviceTaintRule;
    tokio::spawn(async move {
        // What a group version serves: its resources' names, none when the
        // server answers 404 (not served); any other error (the server
        // down, a timeout) is asked again with backoff, so that a hiccup at
        // start does not turn device scope off until the next restart.
        let served_names = |version: &'static str| {
            let client = client.clone();
            async move {
                let mut wait = Duration::from_secs(1);
                loop {
                    match client.list_api_group_resources(version).await {
                        Ok(l) => {
                            return l.resources.into_iter().map(|r| r.name).collect::<Vec<_>>();
                        }
                        Err(kube::Error::Api(e)) if e.code == 404 => return Vec::new(),
                        Err(e) => {
                            tracing::warn!(version, error = %e, retry_in = ?wait, "asking which DRA resources are served failed; asked again");
                            tokio::time::sleep(wait).await;
                            wait = (wait * 2).min(Duration::from_secs(30));
                        }
                    }
                }
            }
        };
        let v1 = served_names("resource.k8s.io/v1").await;
        let claims = ["resourceclaims", "resourceslices"]
            .iter()
            .all(|n| v1.iter().any(|r| r == n));
        let rules = served_names("resource.k8s.io/v1beta2")
            .await
            .iter()
            .any(|r| r == "devicetaintrules");
        tracing::info!(
            claims,
            rules,
            "Dynamic Resource Allocation: device scope {}, device isolation {}",
            if claims {
                "on"
            } else {
                "off (resource.k8s.io/v1 not served)"
            },
            if claims && rules {
                "possible"
            } else {
                "off (DeviceTaintRules not served)"
            }
        );
        let served = Input::Dra(DraChange::Served { claims, rules });
        if tx.send((served, Stamp::now())).await.is_err() {
            return;
        }
        let mut tasks = Vec::new();
        if claims {
            tasks.push(watch::spawn(
                "resourceslices",
                watcher(Api::<ResourceSlice>::all(client.clone()), watch::config()),
                tx.clone(),
                wrap("resourceslices", |c| {
                    Input::Dra(DraChange::Slice(c.boxed()))
                }),
            ));
            tasks.push(watch::spawn(
                "resourceclaims",
                watcher(Api::<ResourceClaim>::all(client.clone()), watch::config()),
                tx.clone(),
                wrap("resourceclaims", |c| {
                    Input::Dra(DraChange::Claim(c.boxed()))
                }),
            ));
        }
        if claims && rules {
            let sel = format!(
                "{}={}",
                super::core::store::dra::MANAGED_BY.0,
                super::core::store::dra::MANAGED_BY.1
            );
            tasks.push(watch::spawn(
                "devicetaintrules",
                watcher(
                    Api::<DeviceTaintRule>::all(client.clone()),
                    watch::config().labels(&sel),
                ),
                tx.clone(),
                wrap("devicetaintrules", |c| {
                    Input::Dra(DraChange::Rule(c.boxed()))
                }),
            ));
        }
        for t in tasks {
            let _ = t.await;
        }
    })
}

/// The workload kind of a discovered job resource.
pub fn kind_of(ar: &ApiResource) -> Option<WorkloadKind> {
    if ar.group == "batch.volcano.sh" {
        return Some(WorkloadKind::VolcanoJob);
    }
    ar.kind.parse().ok()
}

/// Discover the installed job kinds now and whenever a CRD of one of their
/// groups changes; a failed discovery is retried with backoff (1 s doubling
/// to 30 s), and nothing is sent until one succeeded.
pub fn spawn_kinds(client: kube::Client, tx: Tx) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let (changed_tx, mut changed) = mpsc::channel::<((), Stamp)>(16);
        let groups: BTreeSet<&str> = crate::k8s::discover::JOB_KINDS
            .iter()
            .map(|(g, _)| *g)
            .collect();
        let crds = watch::spawn(
            "crds",
            watcher(
                Api::<kube::core::PartialObjectMeta<CustomResourceDefinition>>::all(client.clone()),
                watch::config(),
            ),
            changed_tx,
            move |c: W<kube::core::PartialObjectMeta<CustomResourceDefinition>>| match c {
                W::Apply(o) | W::Delete(o) => {
                    let name = o.metadata.name.unwrap_or_default();
                    let group = name.split_once('.').map(|(_, g)| g).unwrap_or_default();
                    groups.contains(group).then_some(())
                }
                W::Synced => Some(()),
                _ => None,
            },
        );
        let mut last: Option<Vec<(WorkloadKind, ApiResource)>> = None;
        let mut wait = Duration::from_secs(1);
        loop {
            match crate::k8s::discover::job_kinds(&client).await {
                Ok(found) => {
                    wait = Duration::from_secs(1);
                    let kinds: Vec<(WorkloadKind, ApiResource)> = found
                        .into_iter()
                        .filter_map(|ar| kind_of(&ar).map(|k| (k, ar)))
                        .collect();
                    let names = |v: &Vec<(WorkloadKind, ApiResource)>| {
                        v.iter()
                            .map(|(k, ar)| (*k, ar.api_version.clone()))
                            .collect::<Vec<_>>()
                    };
                    if last.as_ref().map(names) != Some(names(&kinds)) {
                        for (k, ar) in &kinds {
                            tracing::info!(kind = %k.as_str(), group = %ar.group, version = %ar.version, "job kind installed");
                        }
                        last = Some(kinds.clone());
                        if tx
                            .send((Input::JobKinds(kinds), Stamp::now()))
                            .await
                            .is_err()
                        {
                            crds.abort();
                            return;
                        }
                    }
                    // Wait for a CRD of a job group to change.
                    let Some((_, _)) = changed.recv().await else {
                        crds.abort();
                        return;
                    };
                    // Several changes come together (a CRD and its status).
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    while changed.try_recv().is_ok() {}
                }
                Err(e) => {
                    tracing::warn!(error = %e, retry_in = ?wait, "job kind discovery failed; decisions wait until it succeeds");
                    if tx
                        .send((Input::WatchError("discovery"), Stamp::now()))
                        .await
                        .is_err()
                    {
                        crds.abort();
                        return;
                    }
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(Duration::from_secs(30));
                }
            }
        }
    })
}

/// The watches of the installed job kinds, started and stopped as kinds
/// come and go.
#[derive(Default)]
pub struct JobWatches {
    tasks: HashMap<WorkloadKind, (String, tokio::task::JoinHandle<()>)>,
}

impl JobWatches {
    /// Watch exactly these kinds.
    pub fn sync(&mut self, client: &kube::Client, tx: &Tx, kinds: &[(WorkloadKind, ApiResource)]) {
        self.tasks.retain(|k, (version, task)| {
            let keep = kinds
                .iter()
                .any(|(kk, ar)| kk == k && &ar.api_version == version);
            if !keep {
                task.abort();
            }
            keep
        });
        for (kind, ar) in kinds {
            if self.tasks.contains_key(kind) {
                continue;
            }
            tracing::info!(kind = %kind.as_str(), "watching job kind");
            let api: Api<DynamicObject> = Api::all_with(client.clone(), ar);
            let k = *kind;
            let task = watch::spawn(
                "jobs",
                watcher(api, watch::config()),
                tx.clone(),
                wrap("jobs", move |c| Input::Job(k, c)),
            );
            self.tasks.insert(*kind, (ar.api_version.clone(), task));
        }
    }

    /// Stop every job watch.
    pub fn abort_all(&mut self) {
        for (_, (_, t)) in self.tasks.drain() {
            t.abort();
        }
    }
}
