//! `RecoveryPolicy`: which workloads are covered and what happens to them at
//! each level (DESIGN.md §3). Namespaced; owned by the team running the jobs.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use super::conditions::Condition;

/// Which workloads a policy covers and how it recovers them.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "rebound.dev",
    version = "v1alpha1",
    kind = "RecoveryPolicy",
    namespaced,
    shortname = "rp",
    category = "rebound",
    status = "RecoveryPolicyStatus",
    doc = "How rebound recovers the training jobs of a namespace from faults: which workloads, which action, cooldowns and budgets. A policy in the operator's root namespace is the default for every namespace without one of its own.",
    printcolumn = r#"{"name":"Action","type":"string","jsonPath":".spec.action"}"#,
    printcolumn = r#"{"name":"DryRun","type":"boolean","jsonPath":".spec.dryRun"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Workloads","type":"integer","jsonPath":".status.workloads"}"#,
    printcolumn = r#"{"name":"Recoveries","type":"integer","jsonPath":".status.recoveries"}"#,
    printcolumn = r#"{"name":"Last","type":"date","jsonPath":".status.lastRecovery"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RecoveryPolicySpec {
    /// Which workloads of this namespace the policy covers. Empty kinds cover
    /// every supported kind; empty labels cover every workload.
    #[serde(default)]
    pub selector: WorkloadSelector,
    /// Optional CEL gate over `fault`, `job`, `node` and `now`: the policy
    /// acts only when it is true. An evaluation error counts as false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    pub when: Option<String>,
    /// What to do with an affected workload: restart the whole job
    /// (default), restart only the failed pod, or nothing (record only).
    #[serde(default)]
    pub action: PolicyAction,
    /// Graded recovery: restart the failed pod first, then the whole job if
    /// it is not running again in time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escalation: Option<GradedEscalation>,
    /// Least time between two restarts of one job: a plain duration (`30s`,
    /// `5m`) or a CEL expression returning a duration, e.g.
    /// `job.restarts < 3 ? duration("30s") : duration("5m")`. Default 30s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    pub cooldown: Option<String>,
    /// At most this many restarts in a sliding window; then the job is
    /// marked and left alone until the window moves on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_budget: Option<RestartBudget>,
    /// Treat a job whose progress signal stops as a fault.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hang: Option<HangDetection>,
    /// Save the tail of each container's log in a ConfigMap owned by the job,
    /// read once the restart's request was answered (a pod being deleted
    /// gracefully, or restarted in place, still serves its logs), so the
    /// restart never waits for them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preserve_logs: Option<PreserveLogs>,
    /// Decide and record, act on nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// Node-level behaviour (cordon, taint, breaker, auto-uncordon). Honoured
    /// only on the policy in the operator's root namespace; a tenant's policy
    /// that sets it is reported and the field ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_actions: Option<NodeActions>,
    /// How a job restart is carried out: the recovery tiers to try,
    /// cheapest first (in place, replace only the pods on faulty nodes,
    /// recreate every pod), and the bounds of a restart in progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<RestartSpec>,
    /// Which of this policy's jobs a fault on one device (a GPU) restarts,
    /// where rebound can tell which pods hold it (DRA, or the node agent
    /// reading the kubelet): `Device` (default), only the jobs holding it;
    /// `Node`, every job of this policy with a pod on the device's node,
    /// as for a fault of the node. docs/devices.md.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_scope: Option<DeviceScope>,
}

/// Which jobs a fault on one device concerns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum DeviceScope {
    /// The jobs whose pods hold the device.
    #[default]
    Device,
    /// Every job with a pod on the device's node.
    Node,
}

/// How restarts are carried out (docs/in-place.md).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RestartSpec {
    /// The tiers a restart may use, cheapest first. Default `[Recreate]`.
    /// `InPlace` and `ReplaceFaulty` need pods wired with the restart agent
    /// (`rebound inject`); a job without it is recreated, and the decision
    /// says so.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 3))]
    pub tiers: Vec<RecoveryTier>,
    /// If the job is not running again (every pod Running and Ready in the
    /// new generation) this long after an in-place tier started, the next
    /// tier in `tiers` takes over. Humantime duration; default 2m.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub fallback_after: Option<String>,
    /// Pods of a restarting job that sit Terminating on a NotReady or
    /// unreachable node this long are force-deleted (grace period 0), so
    /// that operators with fixed pod names can recreate them elsewhere. The
    /// node's kubelet cannot confirm the deletion; if the node is only cut
    /// off, its containers may still run until it rejoins. Default 1m.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub force_delete_after: Option<String>,
    /// What to do when a restart would exhaust the job's own retry limit
    /// (batch Job `backoffLimit`, Volcano `maxRetry`, JobSet
    /// `failurePolicy.maxRestarts`), after which its operator fails the
    /// job: `Skip` (default: leave the job, with a Warning Event) or
    /// `Proceed`. In-place restarts delete no pod and count against none.
    #[serde(default)]
    pub on_retry_limit: RetryLimitAction,
    /// What to do when a pod exits with a code the job's operator treats
    /// as final, so that it ends the job itself (a Kubeflow replica with
    /// `restartPolicy: ExitCode` and a code of 1–127, a batch Job's
    /// `podFailurePolicy` rule `FailJob`, a Volcano policy `AbortJob`,
    /// `TerminateJob` or `CompleteJob` on the exit code): `Skip` (default:
    /// leave the job, with a Warning Event saying why) or `Proceed`
    /// (restart anyway, racing the operator).
    #[serde(default)]
    pub on_final_exit: RetryLimitAction,
}

/// A way to restart a job, from cheapest to most thorough.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
pub enum RecoveryTier {
    /// Every pod restarts its containers where it stands; nothing is
    /// deleted. For faults at level RestartJob with no pod on a faulty node.
    InPlace,
    /// Pods on nodes being separated (or NotReady) are deleted and
    /// recreated elsewhere; every other pod restarts in place.
    ReplaceFaulty,
    /// Delete all pods at once (Volcano: a RestartJob Command).
    Recreate,
}

impl RecoveryTier {
    /// The name in records and Events.
    pub fn as_str(self) -> &'static str {
        match self {
            RecoveryTier::InPlace => "InPlace",
            RecoveryTier::ReplaceFaulty => "ReplaceFaulty",
            RecoveryTier::Recreate => "Recreate",
        }
    }
}

/// What to do when a restart would exhaust the job's own retry limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum RetryLimitAction {
    /// Leave the job alone and say so in a Warning Event.
    #[default]
    Skip,
    /// Restart anyway; the job's operator may then fail the job.
    Proceed,
}

/// Job kinds rebound knows how to restart.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
pub enum WorkloadKind {
    PyTorchJob,
    TFJob,
    MPIJob,
    XGBoostJob,
    PaddleJob,
    JAXJob,
    /// Volcano `batch.volcano.sh` Job.
    VolcanoJob,
    JobSet,
    /// Kubeflow Trainer v2 `trainer.kubeflow.org` TrainJob: it runs as a
    /// JobSet of its name, which rebound restarts; policies, records and
    /// Events are the TrainJob's.
    TrainJob,
    /// `batch/v1` Job.
    Job,
    /// A pod with no job controller.
    Pod,
}

impl WorkloadKind {
    /// Every kind.
    pub const ALL: [WorkloadKind; 11] = [
        WorkloadKind::PyTorchJob,
        WorkloadKind::TFJob,
        WorkloadKind::MPIJob,
        WorkloadKind::XGBoostJob,
        WorkloadKind::PaddleJob,
        WorkloadKind::JAXJob,
        WorkloadKind::VolcanoJob,
        WorkloadKind::JobSet,
        WorkloadKind::TrainJob,
        WorkloadKind::Job,
        WorkloadKind::Pod,
    ];

    /// The name in YAML, CEL (`job.kind`) and Events.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadKind::PyTorchJob => "PyTorchJob",
            WorkloadKind::TFJob => "TFJob",
            WorkloadKind::MPIJob => "MPIJob",
            WorkloadKind::XGBoostJob => "XGBoostJob",
            WorkloadKind::PaddleJob => "PaddleJob",
            WorkloadKind::JAXJob => "JAXJob",
            WorkloadKind::VolcanoJob => "VolcanoJob",
            WorkloadKind::JobSet => "JobSet",
            WorkloadKind::TrainJob => "TrainJob",
            WorkloadKind::Job => "Job",
            WorkloadKind::Pod => "Pod",
        }
    }
}

impl std::str::FromStr for WorkloadKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        WorkloadKind::ALL
            .into_iter()
            .find(|k| k.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| format!("unknown workload kind {s:?}"))
    }
}

/// Which workloads a policy covers.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkloadSelector {
    /// Job kinds covered; empty means all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub kinds: Vec<WorkloadKind>,
    /// Labels the job (or its pod) must carry, all of them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
}

/// What a policy does with an affected workload.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum PolicyAction {
    /// Delete all pods of the job at once so its operator recreates them
    /// from the last checkpoint (Volcano: a `RestartJob` Command).
    #[default]
    RestartJob,
    /// Delete only the failed pod.
    RestartPod,
    /// Record the decision, act on nothing.
    None,
}

/// Graded recovery: pod first, then the job.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GradedEscalation {
    /// Restart only the failed pod on the first fault.
    #[serde(default)]
    pub restart_pod_first: bool,
    /// If the job is not Running again this long after the pod restart,
    /// restart the whole job. Humantime duration; default 2m.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub job_after: Option<String>,
}

/// A budget of restarts per sliding window.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RestartBudget {
    /// Restarts allowed within `window`: at most 2,000, the restarts
    /// rebound keeps on a job in 32 KiB of annotations (a larger budget
    /// could never be used up).
    #[schemars(range(min = 0, max = 2000))]
    pub max_restarts: u32,
    /// The sliding window, a humantime duration (`1h`). Default 1h.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub window: Option<String>,
    /// Count restarts caused by hardware levels (PreSeparate, ResetDevice,
    /// Separate) too. Off by default: a broken GPU is not the job's fault.
    #[serde(default)]
    pub count_infrastructure: bool,
}

/// Hang detection: a job whose progress signal stops is a fault.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HangDetection {
    /// How long the progress signal may stand still (humantime, e.g. `15m`).
    #[schemars(length(max = 64))]
    pub no_progress_for: String,
    /// The annotation that the training code updates with a timestamp or
    /// step counter, on the job or on any of its pods (whichever is easier
    /// for the code to patch): a change of its value on the job or on any
    /// pod of the job counts as progress, so the latest one wins. Only its
    /// value changing matters, not what it says. Default
    /// `rebound.dev/progress`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub annotation: Option<String>,
    /// Also treat a job that has never reported progress as hung, once all
    /// its pods have been Running for `noProgressFor` (a job stuck before
    /// its first step). Off by default, so that a job that does not report
    /// progress at all is never restarted for a hang; a job that has
    /// reported progress once is watched from then on either way, and its
    /// clock restarts at each whole-job restart.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub require_progress: bool,
}

/// Save logs before deleting pods.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PreserveLogs {
    /// Last lines of each container (and of its previous instance).
    #[schemars(range(min = 1, max = 10000))]
    pub tail_lines: u32,
    /// Upper bound of the ConfigMap's data in bytes (ConfigMaps hold at
    /// most 1 MiB). Default 512 KiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1024, max = 1000000))]
    pub max_bytes: Option<u32>,
}

/// Node-level behaviour; only from the root-namespace policy.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeActions {
    /// Cordon nodes at PreSeparate and above. Default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cordon: Option<bool>,
    /// Taint key put on nodes at Separate (effect NoSchedule). Default
    /// `rebound.dev/separated`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub taint_key: Option<String>,
    /// Most nodes separated at once within `breakerWindow`: a count (`5`) or
    /// a percentage of nodes (`10%`). The circuit breaker holds the rest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    pub max_separated: Option<String>,
    /// The breaker's window (humantime). Default 5m.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub breaker_window: Option<String>,
    /// Uncordon nodes that rebound cordoned once their fault clears.
    /// Default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_uncordon: Option<bool>,
    /// What a fault on one device (a GPU) at ResetDevice or Separate takes
    /// out of scheduling: `Node` (default: the node is cordoned) or
    /// `Device` (only that device, through a DRA DeviceTaintRule, where the
    /// cluster serves `resource.k8s.io/v1beta2` DeviceTaintRules and the
    /// device is published in a ResourceSlice; the node otherwise, and the
    /// decision says why). docs/devices.md.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation: Option<Isolation>,
    /// With `isolation: Device`, most devices of one node isolated at once:
    /// a node that loses more is cordoned instead. Default 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 128))]
    pub max_isolated_devices: Option<u32>,
    /// A check that must pass before rebound returns a device it took out
    /// of scheduling (`isolation: Device`), and with `nodes: true` a node
    /// it cordoned: once the fault
    /// clears, rebound runs a batch Job of this spec on the node, in the
    /// root namespace, and returns the device only when the Job succeeds.
    /// On failure (or past `timeout`) the isolation stays, with a
    /// `ValidationFailed` Event. docs/devices.md.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validation: Option<Validation>,
}

/// The validation run before a return to service.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Validation {
    /// A batch/v1 `JobSpec` (DCGM diagnostics, say). rebound pins its pod
    /// to the node (`nodeName`) and gives every container the environment
    /// `REBOUND_NODE`, `REBOUND_FAULT_CODE`, and for a device
    /// `REBOUND_DEVICE` (the DRA device's name, `gpu-3`),
    /// `REBOUND_DRA_DEVICE` (`driver/pool/device`) and what its
    /// ResourceSlice publishes of it (`REBOUND_DEVICE_UUID`,
    /// `REBOUND_DEVICE_INDEX`, `REBOUND_DEVICE_PCI`). `backoffLimit`
    /// defaults to 0, `activeDeadlineSeconds` to the timeout.
    #[schemars(schema_with = "crate::api::schema::preserve_unknown_object")]
    pub job: serde_json::Value,
    /// Longest a validation may run; past it, it counts as failed.
    /// Humantime; default 15m.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub timeout: Option<String>,
    /// Validate the nodes rebound cordoned too, before uncordoning them
    /// (the Job runs on the cordoned node). Default false: a node is
    /// uncordoned when its fault clears, as without a validation.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub nodes: bool,
}

/// What a device fault takes out of scheduling.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Isolation {
    /// The whole node (cordon, and a taint at Separate).
    #[default]
    Node,
    /// The faulty device alone (a DRA DeviceTaintRule).
    Device,
}

/// What the controller observed of a policy.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecoveryPolicyStatus {
    /// The generation the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready` (compiled and in use; reason such as `InvalidExpression` or
    /// `ExpressionTooExpensive`),
    /// `Active` (False when another policy wins for its workloads), and on
    /// a tenant namespace's policies `CelWithinBudget` (False, reason
    /// `Suspended`, while the namespace's expressions are suspended for the
    /// CEL time they took; docs/cel.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Workloads currently covered by this policy.
    #[serde(default)]
    pub workloads: u32,
    /// Recoveries made under this policy.
    #[serde(default)]
    pub recoveries: u64,
    /// When the last recovery happened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_recovery: Option<String>,
    /// Recoveries that ended with every pod of the job's new generation
    /// running and Ready (`JobResumed`).
    #[serde(default)]
    pub resumed: u64,
    /// Recoveries that ended without the job running again
    /// (`JobNotResumed`: its operator gave up, or its pods were not back).
    #[serde(default)]
    pub not_resumed: u64,
    /// The last resumed job's time from its fault to running again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_time_to_resume: Option<String>,
}
