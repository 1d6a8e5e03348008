//! What is installed on a cluster through the API: the job CRDs and
//! namespaces.

use std::time::Duration;

use kube::api::PostParams;
use kube::{Api, Client, ResourceExt};
use serde_json::Value;

use super::{ClusterError, wait_for};

/// The embedded cluster's own minimal CRDs of the job kinds (not the real
/// ones, which are other projects' files).
pub const JOB_CRDS: [&str; 7] = [
    include_str!("../crds/kubeflow-pytorchjobs.yaml"),
    include_str!("../crds/kubeflow-tfjobs.yaml"),
    include_str!("../crds/kubeflow-mpijobs.yaml"),
    include_str!("../crds/volcano-jobs.yaml"),
    include_str!("../crds/volcano-commands.yaml"),
    include_str!("../crds/jobset-jobsets.yaml"),
    include_str!("../crds/trainer-trainjobs.yaml"),
];

/// Creates a namespace unless it exists.
pub async fn ensure_namespace(client: &Client, ns: &str) -> Result<(), ClusterError> {
    Ok(crate::actors::util::ensure_namespace(client, ns).await?)
}

/// Label on the CRDs [`install_crds`] creates, so a later run may replace
/// them and never touches a real operator's.
pub const TESTBED_LABEL: (&str, &str) = ("app.kubernetes.io/managed-by", "rebound-testbed");

/// Installs CRDs (multi-document YAML) on a cluster through the API and
/// waits until each serves: absent ones are created, ones this function
/// made before (labelled [`TESTBED_LABEL`]) replaced, and one that belongs
/// to someone else (a real training operator's) is an error, since the real
/// operator would race the simulated one.
pub async fn install_crds(client: &Client, yaml: &str) -> Result<Vec<String>, ClusterError> {
    install(client, yaml, false).await
}

/// Installs or updates rebound's own CRDs: like [`install_crds`], but one
/// installed by someone else (rebound deployed on the cluster) is updated
/// in place, keeping its labels, instead of refused: no simulated operator
/// races for rebound's objects, and the tests need this version's schema.
pub async fn install_own_crds(client: &Client, yaml: &str) -> Result<Vec<String>, ClusterError> {
    install(client, yaml, true).await
}

async fn install(
    client: &Client,
    yaml: &str,
    update_foreign: bool,
) -> Result<Vec<String>, ClusterError> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition as Crd;
    let api: Api<Crd> = Api::all(client.clone());
    let mut names = Vec::new();
    let docs: Vec<Value> = serde_saphyr::from_multiple(yaml)
        .map_err(|e| ClusterError::Unsupported(format!("CRD YAML: {e}")))?;
    for v in docs {
        if v.is_null() {
            continue;
        }
        let mut crd: Crd = serde_json::from_value(v)?;
        crd.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(TESTBED_LABEL.0.into(), TESTBED_LABEL.1.into());
        let name = crd.name_any();
        // A real server's CRD controllers write the status of a new CRD
        // right after it is made: a replace may meet a newer version once.
        let mut attempt = 0;
        loop {
            attempt += 1;
            let written = match api.get_opt(&name).await? {
                None => api.create(&PostParams::default(), &crd).await.map(|_| ()),
                Some(cur)
                    if cur.labels().get(TESTBED_LABEL.0).map(String::as_str)
                        == Some(TESTBED_LABEL.1) =>
                {
                    crd.metadata.resource_version = cur.metadata.resource_version;
                    api.replace(&name, &PostParams::default(), &crd)
                        .await
                        .map(|_| ())
                }
                Some(cur) if update_foreign => {
                    crd.metadata.labels = cur.metadata.labels.clone();
                    crd.metadata.resource_version = cur.metadata.resource_version;
                    api.replace(&name, &PostParams::default(), &crd)
                        .await
                        .map(|_| ())
                }
                Some(_) => {
                    return Err(ClusterError::Unsupported(format!(
                        "CRD {name} exists and was not installed by the test bed: a real operator would race the simulated one; use a cluster without it"
                    )));
                }
            };
            match written {
                Ok(()) => break,
                Err(e) if attempt < 5 && crate::actors::util::is_status(&e, 409) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        names.push(name);
    }
    for name in &names {
        wait_for(
            Duration::from_secs(30),
            &format!("CRD {name} established"),
            || {
                let api = api.clone();
                async move {
                    let crd = api.get_opt(name).await?;
                    Ok(crd
                        .and_then(|c| c.status)
                        .and_then(|s| s.conditions)
                        .is_some_and(|cs| {
                            cs.iter()
                                .any(|c| c.type_ == "Established" && c.status == "True")
                        })
                        .then_some(()))
                }
            },
        )
        .await?;
    }
    Ok(names)
}
