//! The labels the job operators put on their pods, as the operators spell
//! them (training-operator v1 `commonv1` constants, Volcano's job controller,
//! JobSet's controller, the batch Job controller).

/// Kubeflow training-operator v1: the job's name.
pub const KUBEFLOW_JOB_NAME: &str = "training.kubeflow.org/job-name";
/// Kubeflow training-operator v1: the replica type in lower case (`worker`,
/// `master`, `ps`, `launcher`); the job spec keys are CamelCase (`Worker`).
pub const KUBEFLOW_REPLICA_TYPE: &str = "training.kubeflow.org/replica-type";
/// Kubeflow training-operator v1: `<lowercase kind>-controller`, e.g.
/// `pytorchjob-controller`. Part of the selector: a TFJob and a PyTorchJob
/// may share a name in one namespace.
pub const KUBEFLOW_OPERATOR_NAME: &str = "training.kubeflow.org/operator-name";
/// mpi-operator's (`kubeflow.org/v2beta1` MPIJob) value of
/// [`KUBEFLOW_OPERATOR_NAME`] on its pods (`v2beta1.OperatorName`).
pub const MPI_OPERATOR_NAME: &str = "mpi-operator";

/// Volcano: the `batch.volcano.sh` Job's name. Other workloads set it too
/// (gang-scheduled batch Jobs), so the owner reference decides first.
pub const VOLCANO_JOB_NAME: &str = "volcano.sh/job-name";
/// Volcano: the job's namespace.
pub const VOLCANO_JOB_NAMESPACE: &str = "volcano.sh/job-namespace";
/// Volcano: the task name inside the job.
pub const VOLCANO_TASK_SPEC: &str = "volcano.sh/task-spec";

/// JobSet: the JobSet's name, on its child Jobs and their pods.
pub const JOBSET_NAME: &str = "jobset.sigs.k8s.io/jobset-name";
/// JobSet: the JobSet's uid.
pub const JOBSET_UID: &str = "jobset.sigs.k8s.io/jobset-uid";
/// JobSet: the replicated job the pod belongs to.
pub const JOBSET_REPLICATED_JOB: &str = "jobset.sigs.k8s.io/replicatedjob-name";

/// batch/v1 Job: the Job's name (Kubernetes 1.27+).
pub const BATCH_JOB_NAME: &str = "batch.kubernetes.io/job-name";
/// batch/v1 Job: the Job's uid (Kubernetes 1.27+), what the Job's own
/// selector matches.
pub const BATCH_CONTROLLER_UID: &str = "batch.kubernetes.io/controller-uid";
/// batch/v1 Job: the legacy name label (still set).
pub const LEGACY_JOB_NAME: &str = "job-name";
/// batch/v1 Job: the legacy uid label (still set).
pub const LEGACY_CONTROLLER_UID: &str = "controller-uid";
