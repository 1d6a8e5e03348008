//! Which job kinds are installed: discovered, not assumed, so a cluster
//! without Volcano or JobSet is not an error.

use kube::discovery::{ApiResource, Discovery};

/// The job kinds rebound watches, by group and kind.
pub const JOB_KINDS: &[(&str, &str)] = &[
    ("kubeflow.org", "PyTorchJob"),
    ("kubeflow.org", "TFJob"),
    ("kubeflow.org", "MPIJob"),
    ("kubeflow.org", "XGBoostJob"),
    ("kubeflow.org", "PaddleJob"),
    ("kubeflow.org", "JAXJob"),
    ("batch.volcano.sh", "Job"),
    ("jobset.x-k8s.io", "JobSet"),
    ("trainer.kubeflow.org", "TrainJob"),
    ("batch", "Job"),
];

/// The installed job kinds with their API resources.
pub async fn job_kinds(client: &kube::Client) -> Result<Vec<ApiResource>, kube::Error> {
    let groups: Vec<&str> = JOB_KINDS.iter().map(|(g, _)| *g).collect();
    let d = Discovery::new(client.clone()).filter(&groups).run().await?;
    let mut out = Vec::new();
    for (group, kind) in JOB_KINDS {
        if let Some(g) = d.get(group)
            && let Some((ar, _)) = g.recommended_kind(kind)
        {
            out.push(ar);
        }
    }
    Ok(out)
}
