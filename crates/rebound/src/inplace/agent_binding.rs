//! The RoleBinding through which the restart agents of a namespace read
//! their jobs, as the controller keeps it (the decisions are the core's,
//! controller/core/agent_access.rs; this is the I/O).
//!
//! One binding per namespace, named [`BINDING_NAME`] (not the name the
//! docs once told users to create by hand, so that a hand-made binding is
//! never rewritten), labelled [`BINDING_LABEL`] so that the sweep finds
//! only rebound's own.

use chrono::{DateTime, SecondsFormat, Utc};
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, Preconditions};
use serde_json::json;

/// The name of rebound's binding in each namespace.
pub const BINDING_NAME: &str = "rebound-restart-agent-access";
/// The label on rebound's bindings (value `"true"`).
pub const BINDING_LABEL: &str = "rebound.dev/restart-agent-access";
/// When rebound last applied the binding (RFC 3339): the sweep leaves a
/// binding applied within [`SWEEP_AFTER`] alone, whatever the namespace's
/// pods, so that a binding applied for pods the sweeper has not seen yet
/// (its watch behind, another replica's apply) is never taken away.
pub const APPLIED_AT_ANNOTATION: &str = "rebound.dev/applied-at";
/// How long after its last apply a binding may be swept.
pub const SWEEP_AFTER: std::time::Duration = std::time::Duration::from_secs(600);
/// The field manager of the apply.
const MANAGER: &str = "rebound-controller";

/// The binding of `role` to `accounts` in `namespace`.
pub fn binding(
    namespace: &str,
    role: &str,
    accounts: &[String],
    now: DateTime<Utc>,
) -> serde_json::Value {
    let subjects: Vec<serde_json::Value> = accounts
        .iter()
        .map(|sa| json!({"kind": "ServiceAccount", "name": sa, "namespace": namespace}))
        .collect();
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {
            "name": BINDING_NAME,
            "namespace": namespace,
            "labels": {
                BINDING_LABEL: "true",
                "app.kubernetes.io/managed-by": "rebound",
            },
            "annotations": {
                APPLIED_AT_ANNOTATION: now.to_rfc3339_opts(SecondsFormat::Secs, true),
            },
        },
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": role,
        },
        "subjects": subjects,
    })
}

/// Apply rebound's binding in `namespace` (server-side apply: creates it,
/// or sets its subjects; the same content again changes nothing).
pub async fn apply(
    client: &Client,
    namespace: &str,
    role: &str,
    accounts: &[String],
) -> Result<(), kube::Error> {
    let api: Api<RoleBinding> = Api::namespaced(client.clone(), namespace);
    api.patch(
        BINDING_NAME,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(binding(namespace, role, accounts, Utc::now())),
    )
    .await
    .map(|_| ())
}

/// What the API server's authorizer says of ServiceAccount `account` of
/// `namespace` reading (`get`, `watch`) resource `plural` of `group` there:
/// `None` when both are allowed, else why not (the authorizer's reason).
/// A server that does not serve SubjectAccessReviews (the embedded one,
/// which authorizes nothing) allows everything. Needs `create` on
/// `subjectaccessreviews`.
pub async fn cannot_read(
    client: &Client,
    namespace: &str,
    account: &str,
    (group, plural): (&str, &str),
) -> Result<Option<String>, kube::Error> {
    use k8s_openapi::api::authorization::v1::SubjectAccessReview;
    let api: Api<SubjectAccessReview> = Api::all(client.clone());
    for verb in ["get", "watch"] {
        let review: SubjectAccessReview = serde_json::from_value(json!({
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": format!("system:serviceaccount:{namespace}:{account}"),
                "groups": ["system:serviceaccounts", format!("system:serviceaccounts:{namespace}")],
                "resourceAttributes": {
                    "namespace": namespace, "verb": verb, "group": group, "resource": plural,
                },
            },
        }))
        .map_err(kube::Error::SerdeError)?;
        let answer = match api.create(&kube::api::PostParams::default(), &review).await {
            Ok(a) => a,
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(None),
            Err(e) => return Err(e),
        };
        let status = answer.status.unwrap_or_default();
        if !status.allowed {
            let what = if group.is_empty() {
                plural.to_string()
            } else {
                format!("{plural}.{group}")
            };
            let why = status
                .reason
                .filter(|r| !r.is_empty())
                .or(status.evaluation_error)
                .unwrap_or_else(|| "no rule allows it".into());
            return Ok(Some(format!(
                "ServiceAccount {namespace}/{account} cannot {verb} {what} ({why})"
            )));
        }
    }
    Ok(None)
}

/// Whether a binding with these annotations may be swept at `now`: applied
/// more than [`SWEEP_AFTER`] ago (or with no readable time).
pub fn sweepable(
    annotations: Option<&std::collections::BTreeMap<String, String>>,
    now: DateTime<Utc>,
) -> bool {
    let at = annotations
        .and_then(|a| a.get(APPLIED_AT_ANNOTATION))
        .and_then(|v| DateTime::parse_from_rfc3339(v).ok());
    let after = chrono::Duration::from_std(SWEEP_AFTER).unwrap_or_default();
    at.is_none_or(|at| now - at.with_timezone(&Utc) >= after)
}

/// Delete rebound's bindings in namespaces outside `keep` (sorted) that
/// were applied more than [`SWEEP_AFTER`] ago, each with its
/// resourceVersion as precondition (one re-applied since the list stays).
/// Returns how many were deleted.
pub async fn sweep(client: &Client, keep: &[String]) -> Result<usize, kube::Error> {
    let now = Utc::now();
    let all: Api<RoleBinding> = Api::all(client.clone());
    let list = all
        .list_metadata(&ListParams::default().labels(&format!("{BINDING_LABEL}=true")))
        .await?;
    let mut deleted = 0;
    for b in list.items {
        if !sweepable(b.metadata.annotations.as_ref(), now) {
            continue;
        }
        let (Some(ns), Some(name)) = (b.metadata.namespace, b.metadata.name) else {
            continue;
        };
        if name != BINDING_NAME || keep.binary_search(&ns).is_ok() {
            continue;
        }
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                resource_version: b.metadata.resource_version,
                uid: b.metadata.uid,
            }),
            ..DeleteParams::default()
        };
        match Api::<RoleBinding>::namespaced(client.clone(), &ns)
            .delete(&name, &dp)
            .await
        {
            Ok(_) => deleted += 1,
            // Gone already, or re-applied since the list: either is fine.
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_binding_names_its_role_accounts_and_time() {
        let now = DateTime::parse_from_rfc3339("2026-12-06T10:00:00Z")
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or_default();
        let b = binding(
            "team-a",
            "rebound-restart-agent",
            &["default".into(), "trainer".into()],
            now,
        );
        assert_eq!(b["metadata"]["name"], BINDING_NAME);
        assert_eq!(b["metadata"]["labels"][BINDING_LABEL], "true");
        assert_eq!(b["roleRef"]["name"], "rebound-restart-agent");
        assert_eq!(b["subjects"][1]["name"], "trainer");
        assert_eq!(b["subjects"][1]["namespace"], "team-a");
        let annotations: std::collections::BTreeMap<String, String> =
            serde_json::from_value(b["metadata"]["annotations"].clone()).unwrap_or_default();
        // Applied just now: never swept; 10 minutes later: may be.
        assert!(!sweepable(Some(&annotations), now));
        assert!(!sweepable(
            Some(&annotations),
            now + chrono::Duration::seconds(599)
        ));
        assert!(sweepable(
            Some(&annotations),
            now + chrono::Duration::seconds(600)
        ));
        // No time, or garbage: sweepable (a binding only rebound labels).
        assert!(sweepable(None, now));
        let garbage = [(APPLIED_AT_ANNOTATION.to_string(), "soon".to_string())].into();
        assert!(sweepable(Some(&garbage), now));
    }
}
