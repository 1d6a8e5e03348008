//! The rank-table task: the state of its watches (`inputs.rs`) kept in
//! memory, and writes of the `hccl.json` key. Events arriving together are
//! applied together and each job is then reconciled once, so a restart that
//! deletes 64 pods costs one reset write, not 64. Only the leader writes;
//! errors are logged, counted and retried on the next second's tick.

use super::inputs::{In, Tasks, watches};
use super::objects::{self, JobEntry, JobKey, JobKind, PodEntry};
use super::recovery::{self, RECOVERED_AT_ANNOTATION, RECOVERED_RESTART_ANNOTATION, TableState};
use super::table::{self, CONFIGMAP_PREFIX, DATA_KEY, Format, Status};
use crate::k8s::leader::Leadership;
use crate::metrics::{KindLabels, Metrics, StatusLabels};
use crate::recover::{Events, Notice, reasons};
use crate::workload::JobRef;
use chrono::{DateTime, SecondsFormat, Utc};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::watcher::Event;
use kube::{Client, ResourceExt};
use serde_json::json;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::Duration;
use tokio::sync::{mpsc, watch as tw};

/// What the task needs from the controller.
#[derive(Clone)]
pub struct Deps {
    pub client: Client,
    pub format: Format,
    pub leader: Leadership,
    pub metrics: Metrics,
    pub events: Events,
}

/// Why a write failed (logged and retried, never fatal).
#[derive(Debug, thiserror::Error)]
enum WriteError {
    #[error("cannot patch ConfigMap {namespace}/{name}: {source}")]
    ConfigMap {
        namespace: String,
        name: String,
        source: kube::Error,
    },
    #[error("cannot record the recovery on {job}: {source}")]
    Job { job: String, source: kube::Error },
}

/// Start the task; it stops when `shutdown` turns true (its watches with it).
pub fn spawn(deps: Deps, mut shutdown: tw::Receiver<bool>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let (tx, mut rx) = mpsc::channel::<In>(1024);
        let mut tasks = Tasks(watches(&deps.client, &deps.metrics, &tx).await);
        let ttx = tx.clone();
        tasks.0.push(tokio::spawn(async move {
            let mut iv = tokio::time::interval(Duration::from_secs(1));
            loop {
                iv.tick().await;
                if ttx.send(In::Tick).await.is_err() {
                    return;
                }
            }
        }));
        let mut lead = deps.leader.subscribe();
        let ltx = tx.clone();
        tasks.0.push(tokio::spawn(async move {
            while lead.changed().await.is_ok() {
                let now = *lead.borrow();
                if ltx.send(In::Leader(now)).await.is_err() {
                    return;
                }
            }
        }));
        drop(tx);
        let mut state = State::new(deps);
        loop {
            tokio::select! {
                biased;
                _ = shutdown.changed() => break,
                msg = rx.recv() => match msg {
                    Some(m) => state.apply(m),
                    None => break,
                },
            }
            // Everything already queued is applied before any write.
            while let Ok(m) = rx.try_recv() {
                state.apply(m);
            }
            state.reconcile().await;
        }
        drop(tasks);
    })
}

type ObjKey = (String, String);

struct State {
    deps: Deps,
    jobs: HashMap<JobKey, JobEntry>,
    pods: HashMap<ObjKey, PodEntry>,
    by_job: HashMap<JobKey, BTreeSet<ObjKey>>,
    /// `hccl.json` of each labelled `rings-config-*` ConfigMap (None: no key).
    maps: HashMap<ObjKey, Option<String>>,
    /// What this replica wrote last (the watch may not show it yet).
    written: HashMap<JobKey, String>,
    /// When a pod of the job was last seen going.
    last_reset: HashMap<JobKey, DateTime<Utc>>,
    /// A member of a completed table went: write `initializing` first.
    needs_reset: HashSet<JobKey>,
    /// Restart counts reported recovered (the job watch may lag).
    reported: HashMap<JobKey, u64>,
    dirty: BTreeSet<JobKey>,
    retry: BTreeSet<JobKey>,
    /// Pods (uid) whose bad annotation was logged already.
    warned: HashSet<String>,
    relist_pods: Option<HashSet<ObjKey>>,
    relist_maps: Option<HashSet<ObjKey>>,
    relist_jobs: HashMap<JobKind, HashSet<JobKey>>,
}

impl State {
    fn new(deps: Deps) -> State {
        State {
            deps,
            jobs: HashMap::new(),
            pods: HashMap::new(),
            by_job: HashMap::new(),
            maps: HashMap::new(),
            written: HashMap::new(),
            last_reset: HashMap::new(),
            needs_reset: HashSet::new(),
            reported: HashMap::new(),
            dirty: BTreeSet::new(),
            retry: BTreeSet::new(),
            warned: HashSet::new(),
            relist_pods: None,
            relist_maps: None,
            relist_jobs: HashMap::new(),
        }
    }

    fn apply(&mut self, input: In) {
        match input {
            In::Pod(Event::Init) => self.relist_pods = Some(HashSet::new()),
            In::Pod(Event::InitApply(p)) => {
                if let Some(k) = self.pod_applied(&p)
                    && let Some(s) = self.relist_pods.as_mut()
                {
                    s.insert(k);
                }
            }
            In::Pod(Event::Apply(p)) => {
                self.pod_applied(&p);
            }
            In::Pod(Event::Delete(p)) => {
                let k = (p.namespace().unwrap_or_default(), p.name_any());
                self.pod_gone(&k);
            }
            In::Pod(Event::InitDone) => {
                if let Some(seen) = self.relist_pods.take() {
                    let gone: Vec<ObjKey> = self
                        .pods
                        .keys()
                        .filter(|k| !seen.contains(*k))
                        .cloned()
                        .collect();
                    for k in gone {
                        self.pod_gone(&k);
                    }
                }
            }
            In::ConfigMap(Event::Init) => self.relist_maps = Some(HashSet::new()),
            In::ConfigMap(Event::InitApply(c) | Event::Apply(c)) => {
                let k = (c.namespace().unwrap_or_default(), c.name_any());
                if !k.1.starts_with(CONFIGMAP_PREFIX) {
                    return;
                }
                let data = c.data.as_ref().and_then(|d| d.get(DATA_KEY)).cloned();
                self.maps.insert(k.clone(), data);
                if let Some(s) = self.relist_maps.as_mut() {
                    s.insert(k.clone());
                }
                self.dirty_for_map(&k);
            }
            In::ConfigMap(Event::Delete(c)) => {
                self.maps
                    .remove(&(c.namespace().unwrap_or_default(), c.name_any()));
            }
            In::ConfigMap(Event::InitDone) => {
                if let Some(seen) = self.relist_maps.take() {
                    self.maps.retain(|k, _| seen.contains(k));
                }
            }
            In::Job(kind, Event::Init) => {
                self.relist_jobs.insert(kind, HashSet::new());
            }
            In::Job(kind, Event::InitApply(o) | Event::Apply(o)) => {
                if let Some(j) = objects::job_entry(kind, &o) {
                    if let Some(s) = self.relist_jobs.get_mut(&kind) {
                        s.insert(j.key.clone());
                    }
                    self.dirty.insert(j.key.clone());
                    self.jobs.insert(j.key.clone(), j);
                }
            }
            In::Job(kind, Event::Delete(o)) => {
                if let Some(j) = objects::job_entry(kind, &o) {
                    self.forget_job(&j.key);
                }
            }
            In::Job(kind, Event::InitDone) => {
                if let Some(seen) = self.relist_jobs.remove(&kind) {
                    let gone: Vec<JobKey> = self
                        .jobs
                        .keys()
                        .filter(|k| k.kind == kind && !seen.contains(*k))
                        .cloned()
                        .collect();
                    for k in gone {
                        self.forget_job(&k);
                    }
                }
            }
            In::Leader(true) => self.dirty.extend(self.jobs.keys().cloned()),
            In::Leader(false) => {}
            In::Tick => {
                let r = std::mem::take(&mut self.retry);
                self.dirty.extend(r);
            }
        }
    }

    fn forget_job(&mut self, k: &JobKey) {
        self.jobs.remove(k);
        self.written.remove(k);
        self.last_reset.remove(k);
        self.needs_reset.remove(k);
        self.reported.remove(k);
        self.retry.remove(k);
    }

    fn dirty_for_map(&mut self, k: &ObjKey) {
        let Some(job) = k.1.strip_prefix(CONFIGMAP_PREFIX) else {
            return;
        };
        for kind in [JobKind::Volcano, JobKind::Batch, JobKind::Deployment] {
            let key = JobKey {
                kind,
                namespace: k.0.clone(),
                name: job.to_string(),
            };
            if self.jobs.contains_key(&key) {
                self.dirty.insert(key);
            }
        }
    }

    /// Returns the pod's key when it belongs to a job kind we know.
    fn pod_applied(&mut self, p: &Pod) -> Option<ObjKey> {
        let e = objects::pod_entry(p)?;
        let k = (e.job.namespace.clone(), e.name.clone());
        let job = e.job.clone();
        let now_deleting = e.deleting;
        let old = self.pods.insert(k.clone(), e);
        if let Some(o) = &old
            && o.job != job
            && let Some(set) = self.by_job.get_mut(&o.job)
        {
            set.remove(&k);
        }
        if now_deleting && old.as_ref().is_none_or(|o| !o.deleting) {
            self.went(&job);
        }
        self.by_job
            .entry(job.clone())
            .or_default()
            .insert(k.clone());
        self.dirty.insert(job);
        Some(k)
    }

    fn pod_gone(&mut self, k: &ObjKey) {
        let Some(old) = self.pods.remove(k) else {
            return;
        };
        self.warned.remove(&old.uid);
        if let Some(set) = self.by_job.get_mut(&old.job) {
            set.remove(k);
            if set.is_empty() {
                self.by_job.remove(&old.job);
            }
        }
        if !old.deleting {
            self.went(&old.job);
        }
        self.dirty.insert(old.job);
    }

    /// A pod of the job went (deleted or being deleted).
    fn went(&mut self, job: &JobKey) {
        if !self.jobs.contains_key(job) {
            return;
        }
        self.last_reset.insert(job.clone(), Utc::now());
        if self.status(job) == Some(Status::Completed) {
            self.needs_reset.insert(job.clone());
        }
    }

    fn map_key(job: &JobKey) -> ObjKey {
        (
            job.namespace.clone(),
            format!("{CONFIGMAP_PREFIX}{}", job.name),
        )
    }

    /// The table as last written by us, else as the ConfigMap shows it.
    fn current(&self, job: &JobKey) -> Option<&str> {
        self.written.get(job).map(String::as_str).or_else(|| {
            self.maps
                .get(&Self::map_key(job))
                .and_then(|d| d.as_deref())
        })
    }

    fn status(&self, job: &JobKey) -> Option<Status> {
        self.current(job).and_then(table::status_of)
    }

    async fn reconcile(&mut self) {
        // A reset write re-queues its job for the rebuilt table: a few rounds.
        for _ in 0..3 {
            let keys = std::mem::take(&mut self.dirty);
            if keys.is_empty() {
                return;
            }
            for k in keys {
                if let Err(e) = self.reconcile_one(&k).await {
                    tracing::warn!(job = %k, error = %e, "rank table not written; retrying");
                    self.retry.insert(k);
                }
            }
        }
    }

    async fn reconcile_one(&mut self, key: &JobKey) -> Result<(), WriteError> {
        let Some(job) = self.jobs.get(key) else {
            return Ok(());
        };
        let map = Self::map_key(key);
        if !self.maps.contains_key(&map) {
            tracing::debug!(job = %key, configmap = %map.1, "no labelled ConfigMap for the rank table yet");
            return Ok(());
        }
        let mut bad = Vec::new();
        let pods = self
            .by_job
            .get(key)
            .into_iter()
            .flatten()
            .filter_map(|k| self.pods.get(k));
        let members = objects::members(job, pods, |p, e| {
            bad.push((p.uid.clone(), p.name.clone(), e));
        });
        for (uid, name, e) in bad {
            if self.warned.insert(uid) {
                self.deps
                    .metrics
                    .parse_errors
                    .get_or_create(&KindLabels { kind: "Pod".into() })
                    .inc();
                tracing::warn!(job = %key, pod = %name, error = %e, "pod left out of the rank table");
            }
        }
        let reset_first =
            self.needs_reset.remove(key) && self.status(key) == Some(Status::Completed);
        let desired = if reset_first {
            table::build(self.deps.format, &key.name, &job.groups, &[])
        } else {
            table::build(self.deps.format, &key.name, &job.groups, &members)
        };
        if table::needs_write(self.current(key), &desired) {
            if !self.deps.leader.is_leader() {
                return Ok(());
            }
            let api: Api<ConfigMap> = Api::namespaced(self.deps.client.clone(), &key.namespace);
            let patch = json!({"data": {DATA_KEY: &desired.json}});
            let r = api
                .patch(&map.1, &PatchParams::default(), &Patch::Merge(&patch))
                .await;
            self.deps.metrics.request("patch", r.is_ok());
            if let Err(source) = r {
                if reset_first {
                    self.needs_reset.insert(key.clone());
                }
                return Err(WriteError::ConfigMap {
                    namespace: key.namespace.clone(),
                    name: map.1,
                    source,
                });
            }
            self.deps
                .metrics
                .rank_table_writes
                .get_or_create(&StatusLabels {
                    status: desired.status.as_str().into(),
                })
                .inc();
            tracing::info!(job = %key, configmap = %map.1, status = desired.status.as_str(), pods = members.len(), "rank table written");
            self.written.insert(key.clone(), desired.json);
            if reset_first {
                self.dirty.insert(key.clone());
                return Ok(());
            }
        }
        self.check_recovery(key).await
    }

    /// Report the job recovered once its table is complete again after
    /// rebound's last restart: annotation first (the record that stops a
    /// second report), then the Event and the metric.
    async fn check_recovery(&mut self, key: &JobKey) -> Result<(), WriteError> {
        let Some(job) = self.jobs.get(key) else {
            return Ok(());
        };
        let Some(kind) = key.kind.workload() else {
            return Ok(());
        };
        let mut restart = recovery::last_restart(&job.annotations);
        if let (Some(r), Some(mine)) = (restart.as_mut(), self.reported.get(key)) {
            r.reported = Some(r.reported.unwrap_or(0).max(*mine));
        }
        let oldest_pod = self
            .by_job
            .get(key)
            .into_iter()
            .flatten()
            .filter_map(|k| self.pods.get(k))
            .filter(|p| objects::current(job, p))
            .filter_map(|p| p.created)
            .min();
        let state = TableState {
            completed: self.status(key) == Some(Status::Completed),
            last_reset: self.last_reset.get(key).copied(),
            oldest_pod,
        };
        let (Some(n), Some(r)) = (recovery::recovered(restart, state), restart) else {
            return Ok(());
        };
        if !self.deps.leader.is_leader() {
            return Ok(());
        }
        let job_ref = JobRef::new(
            kind,
            key.namespace.clone(),
            key.name.clone(),
            job.uid.clone(),
        );
        let now = Utc::now();
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.deps.client.clone(),
            &key.namespace,
            &job_ref.api_resource(),
        );
        let patch = json!({"metadata": {"annotations": {
            RECOVERED_RESTART_ANNOTATION: n.to_string(),
            RECOVERED_AT_ANNOTATION: now.to_rfc3339_opts(SecondsFormat::Millis, true),
        }}});
        let res = api
            .patch(&key.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await;
        self.deps.metrics.request("patch", res.is_ok());
        res.map_err(|source| WriteError::Job {
            job: key.to_string(),
            source,
        })?;
        self.reported.insert(key.clone(), n);
        let secs = (now - r.at).num_milliseconds().max(0) as f64 / 1000.0;
        self.deps.metrics.recovery.observe(secs);
        let note = format!(
            "Recovered from restart {n}: rank table {CONFIGMAP_PREFIX}{} is completed again, {secs:.1}s after the restart",
            key.name
        );
        self.deps
            .events
            .job(
                &job_ref,
                &Notice::normal(reasons::RECOVERY_COMPLETE, "Recover", note.clone()),
            )
            .await;
        tracing::info!(job = %key, "{note}");
        Ok(())
    }
}
