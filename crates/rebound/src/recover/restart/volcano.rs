//! Volcano's restart: a `bus.volcano.sh` Command named by the job's uid
//! and the restart's generation, so that a retry meets its own Command
//! instead of making a second one. Apart from the pod deletions the other
//! kinds restart by.

use super::super::MANAGED_BY;
use super::super::error::{RecoverError, api_code, api_error};
use crate::workload::JobRef;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::TypeMeta;
use kube::discovery::ApiResource;
use kube::{Client, ResourceExt};
use serde_json::json;

/// The `bus.volcano.sh/v1alpha1` Command resource.
fn command_resource() -> ApiResource {
    ApiResource {
        group: "bus.volcano.sh".into(),
        version: "v1alpha1".into(),
        api_version: "bus.volcano.sh/v1alpha1".into(),
        kind: "Command".into(),
        plural: "commands".into(),
    }
}

/// The name of the Command of restart `generation` of the Volcano job
/// `job` (uid `uid`): `<job>-rebound-<uid>-<generation>`, the job's name
/// shortened so the whole stays a valid object name. One restart, one
/// name: a retry cannot make a second Command.
pub fn volcano_command_name(job: &str, uid: &str, generation: u64) -> String {
    let suffix = format!("-rebound-{uid}-{generation}");
    let room = 253usize.saturating_sub(suffix.len());
    let job: String = job.chars().take(room).collect();
    format!("{}{suffix}", job.trim_end_matches(['-', '.']))
}

/// Create the Command `vcctl job restart` creates and return its name;
/// `None` when the Command kind is not installed (404 on the create).
pub(super) async fn create_volcano_command(
    client: &Client,
    job: &JobRef,
    generation: u64,
    requests: &mut u32,
) -> Result<Option<String>, RecoverError> {
    let id = job.id();
    let uid = match &job.uid {
        Some(uid) => uid.clone(),
        None => {
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), &job.namespace, &job.api_resource());
            *requests += 1;
            let obj = api.get(&job.name).await.map_err(api_error(
                &id,
                "get the Volcano job for its uid",
                *requests,
            ))?;
            obj.uid().unwrap_or_default()
        }
    };
    let owner = JobRef {
        uid: Some(uid.clone()),
        ..job.clone()
    }
    .owner_reference();
    let name = volcano_command_name(&job.name, &uid, generation);
    let command = DynamicObject {
        types: Some(TypeMeta {
            api_version: "bus.volcano.sh/v1alpha1".into(),
            kind: "Command".into(),
        }),
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(job.namespace.clone()),
            labels: Some(
                [(
                    "app.kubernetes.io/managed-by".to_string(),
                    MANAGED_BY.to_string(),
                )]
                .into(),
            ),
            owner_references: owner.map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        data: json!({
            "action": "RestartJob",
            "target": {"apiVersion": job.api_version, "kind": "Job", "name": job.name, "uid": uid},
            "reason": "Rebound",
            "message": "restarted by rebound after a fault",
        }),
    };
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &job.namespace, &command_resource());
    *requests += 1;
    let request = format!("create commands.bus.volcano.sh {name} in {}", job.namespace);
    match api.create(&PostParams::default(), &command).await {
        Ok(created) => Ok(Some(created.name_any())),
        Err(e) if api_code(&e) == Some(404) => Ok(None),
        Err(e) if api_code(&e) == Some(409) => {
            // This restart's Command exists: an earlier try of it was
            // created and its answer lost. Ours if it targets this job.
            *requests += 1;
            match api.get_opt(&name).await {
                Ok(Some(found)) => {
                    let target = found.data["target"]["uid"].as_str().unwrap_or_default();
                    if target == uid {
                        Ok(Some(name))
                    } else {
                        Err(RecoverError::NotOurs {
                            target: id,
                            request,
                            name,
                            why: format!("it targets job uid {target:?}, not {uid:?}"),
                            requests: *requests,
                        })
                    }
                }
                // Gone since the 409: Volcano took it (it deletes a
                // Command before it runs it). Its name names this job's
                // uid and this restart, so it was this restart's.
                Ok(None) => Ok(Some(name)),
                Err(e) => Err(api_error(
                    &id,
                    format!("get commands.bus.volcano.sh {name} after a 409"),
                    *requests,
                )(e)),
            }
        }
        Err(e) => Err(api_error(&id, request, *requests)(e)),
    }
}
