//! The one error type of the recovery actions.

/// A recovery action failed. Every variant names what was acted on (a job
/// id, `node/<name>`, `pod/<ns>/<name>`) and the request that failed, and
/// carries how many API requests were made before giving up, so the
/// controller's request metrics stay exact on errors too.
#[derive(Debug, thiserror::Error)]
pub enum RecoverError {
    /// The API server refused or failed a request.
    #[error("{target}: {request}: {source}")]
    Api {
        target: String,
        /// Verb and resource, e.g. `deletecollection pods labelSelector=...`.
        request: String,
        requests: u32,
        #[source]
        source: kube::Error,
    },
    /// An object of the name rebound chose for one of its own exists and
    /// is not rebound's (a Volcano Command of that name for another job):
    /// acting as if it were ours could skip a restart.
    #[error("{target}: {request}: {name} exists and is not ours: {why}")]
    NotOurs {
        target: String,
        request: String,
        name: String,
        why: String,
        requests: u32,
    },
    /// An optimistic-concurrency write kept losing to other writers.
    #[error("{target}: {request}: still conflicting after {attempts} attempts")]
    Conflict {
        target: String,
        request: String,
        attempts: u32,
        requests: u32,
    },
    /// The object moved on from what the action was decided for (a newer
    /// restart generation): carrying it out would undo a later decision.
    #[error("{target}: {request}: {why}")]
    Superseded {
        target: String,
        request: String,
        why: String,
        requests: u32,
    },
}

impl RecoverError {
    /// API requests made by the failed action.
    pub fn requests(&self) -> u32 {
        match self {
            RecoverError::Api { requests, .. }
            | RecoverError::Conflict { requests, .. }
            | RecoverError::Superseded { requests, .. }
            | RecoverError::NotOurs { requests, .. } => *requests,
        }
    }

    /// The HTTP status the API server answered, if it answered.
    pub fn status_code(&self) -> Option<u16> {
        match self {
            RecoverError::Api { source, .. } => api_code(source),
            RecoverError::Conflict { .. } | RecoverError::Superseded { .. } => Some(409),
            RecoverError::NotOurs { .. } => None,
        }
    }
}

/// The HTTP status of an API error, `None` for transport errors.
pub(crate) fn api_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// Build the context of an API error.
pub(crate) fn api_error(
    target: &str,
    request: impl Into<String>,
    requests: u32,
) -> impl FnOnce(kube::Error) -> RecoverError {
    let target = target.to_string();
    let request = request.into();
    move |source| RecoverError::Api {
        target,
        request,
        requests,
        source,
    }
}
