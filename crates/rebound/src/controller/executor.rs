//! The executor: carries the core's effects out against the API and feeds
//! each outcome back as an input. Actions are rate limited first, records
//! (Events) after them; leadership is checked right before every request;
//! in-flight work is tracked so that a shutdown lets it finish before the
//! Lease is released.

use super::core::effect::{About, DeleteAll, Effect, EffectKind, Outcome, StatusTarget};
use super::core::input::Input;
use super::throttle::{Lane, Throttle};
use crate::api::{FaultClassification, RecoveryPolicy, WorkloadKind};
use crate::k8s::leader::Leadership;
use crate::metrics::Metrics;
use crate::recover::{self, Events, Notice, RecoverError, reasons};
use kube::api::{Api, Patch, PatchParams};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// When an effect's cause arrived, and its path before the executor.
type Path = (Option<Instant>, Option<super::core::effect::PathTrace>);

/// An action whose request went out, with the path that led to it.
struct Sent {
    action: &'static str,
    trace: super::core::effect::PathTrace,
    dispatched: Duration,
    at: Instant,
}

/// What every effect task needs.
#[derive(Clone)]
pub struct Executor {
    pub client: kube::Client,
    pub throttle: Arc<Throttle>,
    pub leader: Leadership,
    pub metrics: Metrics,
    pub events: Events,
    pub tx: super::watches::Tx,
    /// Effects started and not finished.
    in_flight: Arc<AtomicUsize>,
}

/// Map a failed action to an outcome: the object decided for is gone or
/// another one now (404, a failed uid or resourceVersion precondition on
/// a delete, an immutable uid on a patch), or the request failed.
fn failed(e: RecoverError) -> Outcome {
    if matches!(e, RecoverError::Superseded { .. }) {
        return Outcome::Gone(e.to_string());
    }
    match e.status_code() {
        Some(404) => Outcome::Gone(e.to_string()),
        Some(422) if e.to_string().contains("uid") => Outcome::Gone(e.to_string()),
        _ => Outcome::Failed(e.to_string()),
    }
}

impl Executor {
    /// An executor reporting outcomes to `tx`.
    pub fn new(
        client: kube::Client,
        throttle: Arc<Throttle>,
        leader: Leadership,
        metrics: Metrics,
        events: Events,
        tx: super::watches::Tx,
    ) -> Executor {
        Executor {
            client,
            throttle,
            leader,
            metrics,
            events,
            tx,
            in_flight: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Carry out an effect in a task of its own.
    pub fn run(&self, e: Effect) {
        if matches!(e.kind, EffectKind::Decision(_)) {
            return;
        }
        let ex = self.clone();
        ex.in_flight.fetch_add(1, Ordering::AcqRel);
        tokio::spawn(async move {
            let id = e.id;
            let reports = !matches!(
                e.kind,
                EffectKind::Event { .. }
                    | EffectKind::SaveLogs { .. }
                    | EffectKind::MarkBudgetExhausted { .. }
                    | EffectKind::MarkEnded { .. }
                    | EffectKind::ReadRecords { .. }
                    | EffectKind::ReadNodes { .. }
            );
            // A request that hangs must not hold its step forever: the
            // core retries a failed step (idempotently). One still under
            // way when its term ends is dropped (fence.rs).
            let term = e.term;
            let work = super::fence::fenced(&ex.leader, term, ex.carry_out(e));
            let outcome = match tokio::time::timeout(EFFECT_TIMEOUT, work).await {
                Ok(o) => o,
                Err(_) => Outcome::Failed(format!("no answer within {EFFECT_TIMEOUT:?}")),
            };
            if reports {
                let _ = ex
                    .tx
                    .send((Input::Done(id, outcome), crate::k8s::watch::Stamp::now()))
                    .await;
            }
            ex.in_flight.fetch_sub(1, Ordering::AcqRel);
        });
    }

    /// Wait until no effect is in flight, at most `within`.
    pub async fn drain(&self, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        while self.in_flight.load(Ordering::Acquire) > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Effects in flight now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    /// Take an action token, then check leadership: the last thing before
    /// a request.
    async fn may_act(&self, term: u64, lane: Lane<'_>) -> bool {
        self.throttle.acquire(lane).await;
        self.leader.leads_in(term)
    }

    /// The moment an action's first request goes out: the reaction
    /// histogram, and the stages of the path that led to it.
    fn sent(&self, path: Path, action: &'static str) -> Option<Sent> {
        let (received, trace) = path;
        if let Some(r) = received {
            self.metrics.reaction.observe(r.elapsed().as_secs_f64());
        }
        let trace = trace?;
        let at = Instant::now();
        Some(Sent {
            action,
            trace,
            dispatched: at.saturating_duration_since(trace.at),
            at,
        })
    }

    /// The request of a [`Self::sent`] action answered: every stage into
    /// the histogram, and one debug line with all of them.
    fn answered(&self, sent: Option<Sent>) {
        let Some(s) = sent else { return };
        let answered = s.at.elapsed();
        let stages = [
            s.trace.read,
            s.trace.queued,
            s.trace.decided,
            s.dispatched,
            answered,
        ];
        for (stage, d) in crate::metrics::PATH_STAGES.iter().zip(stages) {
            self.metrics.path_stage(stage, s.action, d);
        }
        tracing::debug!(
            action = s.action,
            read_us = s.trace.read.as_micros() as u64,
            queued_us = s.trace.queued.as_micros() as u64,
            decided_us = s.trace.decided.as_micros() as u64,
            dispatched_us = s.dispatched.as_micros() as u64,
            answered_us = answered.as_micros() as u64,
            "critical path"
        );
    }

    async fn carry_out(&self, e: Effect) -> Outcome {
        let term = e.term;
        let path: Path = (e.received, e.trace);
        match e.kind {
            EffectKind::RestartJob { job, how, pods_rv } => {
                if !self.may_act(term, Lane::Namespace(&job.namespace)).await {
                    return Outcome::NotLeader;
                }
                let sent = self.sent(path, "restart_job");
                let r = match &how {
                    DeleteAll::ChildJobs { selector, jobs } => {
                        recover::restart_through_child_jobs(
                            &self.client,
                            &job,
                            selector,
                            jobs,
                            pods_rv.as_deref(),
                        )
                        .await
                    }
                    DeleteAll::VolcanoCommand { generation } => {
                        recover::restart_job(
                            &self.client,
                            &job,
                            Some(*generation),
                            pods_rv.as_deref(),
                        )
                        .await
                    }
                    DeleteAll::Selector(_) => {
                        recover::restart_job(&self.client, &job, None, pods_rv.as_deref()).await
                    }
                };
                self.answered(sent);
                self.metrics.request("delete", r.is_ok());
                match r {
                    Ok(o) => Outcome::Ok(match (o.path, how) {
                        (recover::RestartPath::VolcanoCommand { command }, _) => {
                            format!("Volcano Command {command} (RestartJob) created")
                        }
                        (recover::RestartPath::DeletedChildJobs { jobs }, _) => format!(
                            "{jobs} child Job(s) deleted for JobSet to make anew, {} pod(s) with them",
                            o.pods_deleted
                        ),
                        (recover::RestartPath::VolcanoFallbackDeletedPods, _) => format!(
                            "Volcano Command kind not installed: {} pod(s) deleted",
                            o.pods_deleted
                        ),
                        (_, DeleteAll::Selector(sel)) => {
                            format!("{} pod(s) deleted in one request ({sel})", o.pods_deleted)
                        }
                        _ => format!("{} pod(s) deleted", o.pods_deleted),
                    }),
                    Err(e) => failed(e),
                }
            }
            EffectKind::DeletePods { job, pods } => {
                let mut deleted = 0;
                let mut gone = 0;
                for (i, p) in pods.iter().enumerate() {
                    if !self.may_act(term, Lane::Namespace(&job.namespace)).await {
                        return Outcome::NotLeader;
                    }
                    let sent = if i == 0 {
                        self.sent(path, "delete_pods")
                    } else {
                        None
                    };
                    let r = recover::delete_pod(
                        &self.client,
                        &p.namespace,
                        &p.name,
                        Some(&p.uid),
                        p.grace_seconds,
                    )
                    .await;
                    self.answered(sent);
                    self.metrics.request("delete", r.is_ok());
                    match r {
                        Ok(o) if o.deleted => deleted += 1,
                        Ok(_) => gone += 1,
                        Err(e) => return failed(e),
                    }
                }
                Outcome::Ok(if gone == 0 {
                    format!("{deleted} pod(s) deleted")
                } else {
                    format!("{deleted} pod(s) deleted, {gone} already gone or replaced")
                })
            }
            EffectKind::Record {
                job,
                current,
                write,
            } => {
                // A bare pod that was deleted keeps no record: nothing to
                // write it on.
                if job.kind == WorkloadKind::Pod && write.generation == write.released {
                    return Outcome::Ok("no record for a bare pod".into());
                }
                if !self.may_act(term, Lane::Namespace(&job.namespace)).await {
                    return Outcome::NotLeader;
                }
                let sent = self.sent(path, "record");
                let r = recover::write_record(&self.client, &job, &write, current.as_ref()).await;
                self.answered(sent);
                self.metrics.request("patch", r.is_ok());
                match r {
                    Ok(o) if !write.append && !write.retract.is_empty() => Outcome::Ok(format!(
                        "the record of the restart never made taken back ({} restart(s) left)",
                        o.restart_count
                    )),
                    Ok(o) => Outcome::Ok(format!(
                        "restart {} recorded (generation {})",
                        o.restart_count, write.generation
                    )),
                    Err(e) => failed(e),
                }
            }
            EffectKind::Release { job, generation } => {
                if !self.may_act(term, Lane::Namespace(&job.namespace)).await {
                    return Outcome::NotLeader;
                }
                let r = recover::release(&self.client, &job, generation).await;
                self.metrics.request("patch", r.is_ok());
                match r {
                    Ok(()) => Outcome::Ok(format!("generation {generation} released")),
                    Err(e) => failed(e),
                }
            }
            EffectKind::MarkBudgetExhausted { job } => {
                if !self.may_act(term, Lane::Namespace(&job.namespace)).await {
                    return Outcome::NotLeader;
                }
                let api: Api<kube::api::DynamicObject> =
                    Api::namespaced_with(self.client.clone(), &job.namespace, &job.api_resource());
                let patch = serde_json::json!({"metadata": {"annotations": {
                    BUDGET_EXHAUSTED_ANNOTATION: chrono::Utc::now().to_rfc3339()
                }}});
                let r = api
                    .patch(&job.name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await;
                self.metrics.request("patch", r.is_ok());
                if let Err(e) = r {
                    tracing::warn!(job = %job.name, error = %e, "could not mark the job");
                }
                Outcome::Ok(String::new())
            }
            EffectKind::MarkEnded { job, at } => {
                if !self.may_act(term, Lane::Namespace(&job.namespace)).await {
                    return Outcome::NotLeader;
                }
                let api: Api<kube::api::DynamicObject> =
                    Api::namespaced_with(self.client.clone(), &job.namespace, &job.api_resource());
                // The uid as a precondition: a job recreated under the
                // same name is not marked.
                let mut patch = serde_json::json!({"metadata": {"annotations": {
                    recover::RESTART_ENDED_ANNOTATION: at.timestamp_millis().to_string()
                }}});
                if let Some(uid) = &job.uid {
                    patch["metadata"]["uid"] = serde_json::json!(uid);
                }
                // A field manager of its own: audit logs (and the tests)
                // tell this write from the restart's.
                let pp = PatchParams {
                    field_manager: Some(ENDED_FIELD_MANAGER.into()),
                    ..PatchParams::default()
                };
                let r = api.patch(&job.name, &pp, &Patch::Merge(&patch)).await;
                self.metrics.request("patch", r.is_ok());
                if let Err(e) = r {
                    tracing::warn!(job = %job.name, error = %e, "could not mark the job's restart ended");
                }
                Outcome::Ok(String::new())
            }
            EffectKind::SaveLogs {
                job,
                pods,
                tail_lines,
                max_bytes,
            } => {
                if !self.leader.leads_in(term) {
                    return Outcome::NotLeader;
                }
                match recover::save_logs(
                    &self.client,
                    &job,
                    &pods,
                    tail_lines,
                    max_bytes,
                    chrono::Utc::now(),
                )
                .await
                {
                    Ok(out) => {
                        let (note, lost) = out.note(tail_lines, pods.len());
                        let n = if lost {
                            Notice::warning(reasons::LOGS_PRESERVED, "PreserveLogs", note)
                        } else {
                            Notice::normal(reasons::LOGS_PRESERVED, "PreserveLogs", note)
                        };
                        self.throttle.acquire_record().await;
                        self.events.job(&job, &n).await;
                    }
                    Err(e) => tracing::warn!(job = %job.id(), error = %e, "saving logs failed"),
                }
                Outcome::Ok(String::new())
            }
            EffectKind::Cordon {
                node,
                snapshot,
                level,
                taint,
                reason,
                sticky,
                held,
            } => {
                if !self.may_act(term, Lane::Nodes).await {
                    return Outcome::NotLeader;
                }
                let sent = self.sent(path, "cordon");
                let why = recover::Why {
                    reason,
                    sticky,
                    at: None,
                    held,
                };
                let r = recover::cordon_for(
                    &self.client,
                    &node,
                    level,
                    taint.as_deref(),
                    &why,
                    &snapshot,
                )
                .await;
                self.answered(sent);
                self.metrics.request("patch", r.is_ok());
                match r {
                    Ok(_) => Outcome::Ok("cordoned".into()),
                    Err(e) => failed(e),
                }
            }
            EffectKind::Uncordon {
                node,
                snapshot,
                taint_key,
            } => {
                if !self.may_act(term, Lane::Nodes).await {
                    return Outcome::NotLeader;
                }
                let r = recover::uncordon(&self.client, &node, Some(&taint_key), &snapshot).await;
                self.metrics.request("patch", r.is_ok());
                match r {
                    Ok(_) => Outcome::Ok("uncordoned".into()),
                    Err(e) => failed(e),
                }
            }
            EffectKind::IsolateDevice {
                node,
                rule,
                device,
                value,
                no_execute,
            } => {
                if !self.may_act(term, Lane::Nodes).await {
                    return Outcome::NotLeader;
                }
                let obj = match recover::device::device_taint_rule(
                    &rule, &node, &device, &value, no_execute,
                ) {
                    Ok(o) => o,
                    Err(e) => return Outcome::Failed(format!("rule {rule}: {e}")),
                };
                let r = recover::device::isolate_device(&self.client, obj).await;
                self.metrics.request("create", r.is_ok());
                match r {
                    Ok(_) => Outcome::Ok("isolated".into()),
                    Err(e) => failed(e),
                }
            }
            EffectKind::LiftDevice { rule, .. } => {
                if !self.may_act(term, Lane::Nodes).await {
                    return Outcome::NotLeader;
                }
                let r = recover::device::lift_device(&self.client, &rule).await;
                self.metrics.request("delete", r.is_ok());
                match r {
                    Ok(()) => Outcome::Ok("returned".into()),
                    Err(e) => failed(e),
                }
            }
            EffectKind::Validate {
                namespace,
                job,
                node,
                what,
                spec,
                env,
                timeout,
            } => {
                if !self.may_act(term, Lane::Nodes).await {
                    return Outcome::NotLeader;
                }
                let obj = match recover::device::validation_job(
                    &namespace, &job, &node, &what, &spec, &env, timeout,
                ) {
                    Ok(o) => o,
                    Err(e) => return Outcome::Failed(format!("validation Job {job}: {e}")),
                };
                let r = recover::device::run_validation(&self.client, obj).await;
                self.metrics.request("create", r.is_ok());
                match r {
                    Ok(Some(state)) => Outcome::Ok(state),
                    Ok(None) => Outcome::Gone("the validation Job is gone".into()),
                    Err(e) => failed(e),
                }
            }
            EffectKind::ReadValidation { namespace, job } => {
                if !self.leader.leads_in(term) {
                    return Outcome::NotLeader;
                }
                let r = recover::device::read_validation(&self.client, &namespace, &job).await;
                self.metrics.request("get", r.is_ok());
                match r {
                    Ok(Some(state)) => Outcome::Ok(state),
                    Ok(None) => Outcome::Gone("the validation Job is gone".into()),
                    Err(e) => failed(e),
                }
            }
            EffectKind::Event { about, notice } => {
                self.throttle.acquire_record().await;
                if !self.leader.leads_in(term) {
                    return Outcome::NotLeader;
                }
                match about {
                    About::Job(j) => self.events.job(&j, &notice).await,
                    About::Node(n) => self.events.node(&n, &notice).await,
                    About::Object(r) => self.events.object(r, &notice).await,
                };
                Outcome::Ok(String::new())
            }
            EffectKind::Status { target, body } => {
                if !self.leader.leads_in(term) {
                    return Outcome::NotLeader;
                }
                let r = match &target {
                    StatusTarget::Policy { namespace, name } => {
                        Api::<RecoveryPolicy>::namespaced(self.client.clone(), namespace)
                            .patch_status(name, &PatchParams::default(), &Patch::Merge(&body))
                            .await
                            .map(|_| ())
                    }
                    StatusTarget::Classification { name } => {
                        Api::<FaultClassification>::all(self.client.clone())
                            .patch_status(name, &PatchParams::default(), &Patch::Merge(&body))
                            .await
                            .map(|_| ())
                    }
                };
                self.metrics.request("patch_status", r.is_ok());
                match r {
                    Ok(()) => Outcome::Ok(String::new()),
                    Err(e) => {
                        tracing::debug!(?target, error = %e, "status write failed");
                        Outcome::Failed(e.to_string())
                    }
                }
            }
            EffectKind::AgentAccess {
                namespace,
                role,
                accounts,
                reads,
            } => {
                if !self.leader.leads_in(term) {
                    return Outcome::NotLeader;
                }
                self.agent_access(&namespace, &role, &accounts, &reads)
                    .await
            }
            EffectKind::AgentAccessSweep { keep } => {
                if !self.leader.leads_in(term) {
                    return Outcome::NotLeader;
                }
                match crate::inplace::agent_binding::sweep(&self.client, &keep).await {
                    Ok(n) => {
                        if n > 0 {
                            tracing::info!(
                                deleted = n,
                                "restart agents' RoleBindings of namespaces without wired pods deleted"
                            );
                        }
                        Outcome::Ok(String::new())
                    }
                    Err(e) => Outcome::Failed(e.to_string()),
                }
            }
            EffectKind::Decision(_) => Outcome::Ok(String::new()),
            EffectKind::ReadRecords { term: t, kinds } => {
                // A consistent list of each kind's metadata (no
                // resourceVersion: read from etcd, not a cache that may be
                // behind what the previous leader wrote). The kinds are
                // listed side by side: one whose list hangs or fails (a
                // dead conversion webhook, RBAC removed) holds no other;
                // it sends nothing and the core asks again.
                let lists = kinds.into_iter().map(|(kind, ar)| async move {
                    let api: Api<kube::api::DynamicObject> =
                        Api::all_with(self.client.clone(), &ar);
                    let r = api.list_metadata(&kube::api::ListParams::default()).await;
                    self.metrics.request("list", r.is_ok());
                    match r {
                        Ok(list) => {
                            let jobs = list.items.into_iter().map(|o| o.metadata).collect();
                            let input = Input::Records {
                                term: t,
                                kind,
                                jobs,
                            };
                            let _ = self.tx.send((input, crate::k8s::watch::Stamp::now())).await;
                        }
                        Err(e) => tracing::warn!(
                            kind = kind.as_str(),
                            error = %e,
                            "take-over read of restart records failed; asked again"
                        ),
                    }
                });
                if !self.leader.leads_in(term) {
                    return Outcome::NotLeader;
                }
                futures::future::join_all(lists).await;
                Outcome::Ok(String::new())
            }
            EffectKind::ReadNodes { term: t } => {
                // A consistent list, as for the records above.
                let api: Api<k8s_openapi::api::core::v1::Node> = Api::all(self.client.clone());
                let r = api.list_metadata(&kube::api::ListParams::default()).await;
                self.metrics.request("list", r.is_ok());
                match r {
                    Ok(list) => {
                        let nodes = list.items.into_iter().map(|o| o.metadata).collect();
                        let input = Input::Nodes { term: t, nodes };
                        let _ = self.tx.send((input, crate::k8s::watch::Stamp::now())).await;
                        Outcome::Ok(String::new())
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "take-over read of the nodes failed; asked again");
                        Outcome::Failed(e.to_string())
                    }
                }
            }
        }
    }
}

impl Executor {
    /// Apply the agents' binding in `namespace`, then ask the API server's
    /// authorizer whether every account can now read every resource its
    /// agents read: a binding that grants nothing (the role missing, an
    /// aggregated role not filled, a deny elsewhere) fails like a refused
    /// one, at once.
    async fn agent_access(
        &self,
        namespace: &str,
        role: &str,
        accounts: &[String],
        reads: &[(String, String)],
    ) -> Outcome {
        use crate::inplace::agent_binding;
        let r = agent_binding::apply(&self.client, namespace, role, accounts).await;
        self.metrics.request("apply", r.is_ok());
        if let Err(e) = r {
            return Outcome::Failed(e.to_string());
        }
        for account in accounts {
            for (group, plural) in reads {
                let r =
                    agent_binding::cannot_read(&self.client, namespace, account, (group, plural))
                        .await;
                self.metrics.request("create", r.is_ok());
                match r {
                    Ok(None) => {}
                    Ok(Some(why)) => {
                        return Outcome::Failed(format!("the binding is made, but {why}"));
                    }
                    Err(e) => return Outcome::Failed(format!("checking the binding: {e}")),
                }
            }
        }
        Outcome::Ok(String::new())
    }
}

/// Longest an effect may take (rate-limit waits included) before it counts
/// as failed; below the core's own outcome timeout.
pub const EFFECT_TIMEOUT: Duration = Duration::from_secs(45);

/// The field manager of the write that marks a restart's ending told.
pub const ENDED_FIELD_MANAGER: &str = "rebound-restart-ended";

/// Annotation marking a job whose restart budget is exhausted (value: when).
pub const BUDGET_EXHAUSTED_ANNOTATION: &str = "rebound.dev/budget-exhausted";
