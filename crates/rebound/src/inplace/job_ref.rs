//! The job object a restart agent follows (`REBOUND_JOB_API`,
//! `REBOUND_JOB_NAMESPACE`, `REBOUND_JOB_NAME`), parsed and checked before
//! the runner ([`super::agent`]) starts.

use std::fmt;

use kube::api::ApiResource;

/// Why the agent's configuration is unusable.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// `REBOUND_JOB_API` is not `group/version/plural` (or `version/plural`).
    #[error(
        "job API {0:?}: expected group/version/plural (e.g. kubeflow.org/v1/pytorchjobs; core kinds: v1/pods)"
    )]
    BadApi(String),
    /// A required value is empty.
    #[error("{0} is empty: the agent cannot tell which job to follow")]
    Empty(&'static str),
}

/// The job object an agent follows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobRef {
    /// API group (empty for the core group).
    pub group: String,
    /// API version (`v1`, `v1alpha1`, ...).
    pub version: String,
    /// Resource plural (`pytorchjobs`, `jobs`, ...).
    pub plural: String,
    /// The job's namespace (the pod's own).
    pub namespace: String,
    /// The job's name.
    pub name: String,
}

impl JobRef {
    /// From the agent's wiring: `api` is `group/version/plural`
    /// (`kubeflow.org/v1/pytorchjobs`, `batch/v1/jobs`) or, for the core
    /// group, `version/plural` (`v1/pods`).
    pub fn parse(api: &str, namespace: &str, name: &str) -> Result<JobRef, AgentError> {
        let parts: Vec<&str> = api.trim().trim_matches('/').split('/').collect();
        let (group, version, plural) = match parts.as_slice() {
            [g, v, p] if !g.is_empty() && !v.is_empty() && !p.is_empty() => (*g, *v, *p),
            [v, p] if !v.is_empty() && !p.is_empty() => ("", *v, *p),
            _ => return Err(AgentError::BadApi(api.to_owned())),
        };
        if namespace.trim().is_empty() {
            return Err(AgentError::Empty("the namespace (POD_NAMESPACE)"));
        }
        if name.trim().is_empty() {
            return Err(AgentError::Empty("the job name (REBOUND_JOB_NAME)"));
        }
        Ok(JobRef {
            group: group.to_owned(),
            version: version.to_owned(),
            plural: plural.to_owned(),
            namespace: namespace.trim().to_owned(),
            name: name.trim().to_owned(),
        })
    }

    /// The resource for the dynamic client (the kind is not needed for
    /// metadata-only requests, which name the plural only).
    pub fn api_resource(&self) -> ApiResource {
        let api_version = if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        };
        ApiResource {
            group: self.group.clone(),
            version: self.version.clone(),
            api_version,
            kind: String::new(),
            plural: self.plural.clone(),
        }
    }
}

impl fmt::Display for JobRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.group.is_empty() {
            write!(
                f,
                "{}/{} {}/{}",
                self.version, self.plural, self.namespace, self.name
            )
        } else {
            write!(
                f,
                "{}/{}/{} {}/{}",
                self.group, self.version, self.plural, self.namespace, self.name
            )
        }
    }
}
