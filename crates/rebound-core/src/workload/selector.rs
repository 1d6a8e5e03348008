//! The label selector that matches every pod of a job, for one
//! `deletecollection` (DESIGN.md §5: delete all pods of the job in one pass).

use super::job_ref::{JobRef, is_kubeflow};
use super::labels::*;
use crate::api::policy::WorkloadKind;

/// The label selector matching all pods of the job, and only them; `None`
/// for a bare pod (it is addressed by name).
///
/// - Kubeflow `kubeflow.org/v1` kinds: `training.kubeflow.org/job-name` and
///   `training.kubeflow.org/operator-name=<kind>-controller` (the selector
///   the training-operator itself reports in `replicaStatuses`; the operator
///   name keeps a TFJob and a PyTorchJob of the same name apart).
///   mpi-operator's `v2beta1` MPIJob: the job name and
///   `operator-name=mpi-operator` (what mpi-operator labels its launcher and
///   workers with and selects them by in its job Service), so it stays apart
///   from a training-operator job of the same name too.
/// - VolcanoJob: `volcano.sh/job-name` and `volcano.sh/job-namespace`.
/// - JobSet: `jobset.sigs.k8s.io/jobset-name`, plus the uid label when the
///   uid is known (a JobSet deleted and recreated under the same name).
/// - TrainJob: its JobSet's (same name): `jobset.sigs.k8s.io/jobset-name`;
///   the core restarts a TrainJob through its JobSet's reference, which
///   adds the JobSet's uid.
/// - batch Job: `batch.kubernetes.io/controller-uid` when the uid is known
///   (what the Job's own selector matches), else the job-name label.
pub fn pod_selector(job: &JobRef) -> Option<String> {
    let name = &job.name;
    Some(match job.kind {
        k if is_kubeflow(k) => {
            if job.api_version == "kubeflow.org/v1" {
                format!(
                    "{KUBEFLOW_JOB_NAME}={name},{KUBEFLOW_OPERATOR_NAME}={}-controller",
                    k.as_str().to_ascii_lowercase()
                )
            } else if k == WorkloadKind::MPIJob {
                format!("{KUBEFLOW_JOB_NAME}={name},{KUBEFLOW_OPERATOR_NAME}={MPI_OPERATOR_NAME}")
            } else {
                format!("{KUBEFLOW_JOB_NAME}={name}")
            }
        }
        WorkloadKind::VolcanoJob => format!(
            "{VOLCANO_JOB_NAME}={name},{VOLCANO_JOB_NAMESPACE}={}",
            job.namespace
        ),
        WorkloadKind::JobSet => match &job.uid {
            Some(uid) => format!("{JOBSET_NAME}={name},{JOBSET_UID}={uid}"),
            None => format!("{JOBSET_NAME}={name}"),
        },
        WorkloadKind::TrainJob => format!("{JOBSET_NAME}={name}"),
        WorkloadKind::Job => match &job.uid {
            Some(uid) => format!("{BATCH_CONTROLLER_UID}={uid}"),
            None => format!("{BATCH_JOB_NAME}={name}"),
        },
        _ => return None,
    })
}
