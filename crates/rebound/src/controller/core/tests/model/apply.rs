//! The model's API server side: an effect carried out with the server's
//! preconditions (uid, resourceVersion, selectors, merge patches), the
//! changes it makes queued for the watches.

use super::*;

impl Model {
    /// Carry out an effect as the API server would, queueing the changes
    /// it makes; the outcome the executor would report.
    pub fn apply(&mut self, e: &Effect) -> Outcome {
        match &e.kind {
            EffectKind::RestartJob { job, how, .. } => {
                // A JobSet's child Jobs: their pods (this model keeps no
                // Job objects; JobSet making them anew is its pods coming
                // back, as for any operator).
                let (sel, uids) = match how {
                    DeleteAll::Selector(sel) => (sel, None),
                    DeleteAll::ChildJobs { selector, jobs } => (
                        selector,
                        Some(jobs.iter().map(|j| j.uid.as_str()).collect::<Vec<_>>()),
                    ),
                    DeleteAll::VolcanoCommand { .. } => {
                        return Outcome::Failed("no Volcano here".into());
                    }
                };
                let want: Vec<(&str, &str)> =
                    sel.split(',').filter_map(|kv| kv.split_once('=')).collect();
                let doomed: Vec<(String, String)> = self
                    .pods
                    .iter()
                    .filter(|(_, p)| {
                        want.iter()
                            .all(|(k, v)| p["metadata"]["labels"][*k].as_str() == Some(*v))
                            && uids.as_ref().is_none_or(|u| {
                                p["metadata"]["labels"][crate::recover::JOB_UID_LABEL]
                                    .as_str()
                                    .is_some_and(|x| u.contains(&x))
                            })
                    })
                    .map(|(n, p)| {
                        (
                            n.clone(),
                            p["metadata"]["labels"][JOBSET_UID]
                                .as_str()
                                .unwrap_or("")
                                .to_string(),
                        )
                    })
                    .collect();
                for (n, _) in &doomed {
                    self.delete_pod(n);
                }
                self.applied.push(Applied::Restart {
                    job: job.name.clone(),
                    uid: job.uid.clone(),
                    owners: doomed.into_iter().map(|(_, u)| u).collect(),
                });
                Outcome::Ok("deleted".into())
            }
            EffectKind::DeletePods { pods, .. } => {
                for p in pods {
                    let same = self
                        .pods
                        .get(&p.name)
                        .is_some_and(|x| x["metadata"]["uid"] == p.uid.as_str());
                    if same {
                        self.delete_pod_with(&p.name, p.grace_seconds);
                    }
                }
                Outcome::Ok("deleted".into())
            }
            EffectKind::Record { job, write, .. } => {
                let Some(obj) = self.jobs.get(&job.name).cloned() else {
                    return Outcome::Gone("404".into());
                };
                let uid = obj["metadata"]["uid"].as_str().unwrap_or("").to_string();
                if job.uid.as_deref().is_some_and(|u| u != uid) {
                    return Outcome::Gone("uid is immutable".into());
                }
                // The executor re-reads on a conflict: the patch is made
                // from the object as it is.
                let meta: ObjectMeta =
                    serde_json::from_value(obj["metadata"].clone()).unwrap_or_default();
                let (mut patch, _) = crate::recover::record_write_patch(&meta, write, Some(&uid));
                patch["metadata"]
                    .as_object_mut()
                    .map(|m| m.remove("resourceVersion"));
                let before = history(&obj);
                self.patch_job(&job.name, &patch);
                let after = self.jobs.get(&job.name).map(history).unwrap_or_default();
                for r in before
                    .iter()
                    .filter(|r| !after.iter().any(|a| a.at == r.at))
                {
                    self.applied.push(Applied::Retract {
                        uid: uid.clone(),
                        occurrence: r.occurrence.clone(),
                    });
                }
                for r in after
                    .iter()
                    .filter(|r| !before.iter().any(|b| b.at == r.at))
                {
                    // When the restart was decided (what cooldowns count).
                    let at = (r.at - self.t0).num_seconds();
                    self.applied.push(Applied::Record {
                        uid: uid.clone(),
                        at,
                        pod_only: r.pod_only,
                        occurrence: r.occurrence.clone(),
                    });
                }
                Outcome::Ok("recorded".into())
            }
            EffectKind::Release { job, generation } => {
                let Some(obj) = self.jobs.get(&job.name) else {
                    return Outcome::Gone("404".into());
                };
                if job
                    .uid
                    .as_deref()
                    .is_some_and(|u| obj["metadata"]["uid"] != u)
                {
                    return Outcome::Gone("uid is immutable".into());
                }
                let patch = json!({
                    "metadata": crate::inplace::Generation::release_patch(*generation),
                });
                self.patch_job(&job.name, &patch);
                Outcome::Ok("released".into())
            }
            EffectKind::Cordon {
                node: name,
                level,
                taint,
                reason,
                sticky,
                held,
                ..
            } => {
                let Some(v) = self.nodes.get(name).cloned() else {
                    return Outcome::Gone("404".into());
                };
                let snap = crate::recover::NodeSnapshot::from_node(&node(&v));
                let why = crate::recover::Why {
                    reason: reason.clone(),
                    sticky: *sticky,
                    at: None,
                    held: *held,
                };
                let at = wire::format_at(self.wall());
                if let Some(p) =
                    crate::recover::cordon_patch(&snap, *level, taint.as_deref(), &why, &at)
                {
                    if !snap.unschedulable {
                        self.applied.push(Applied::Cordon {
                            node: name.clone(),
                            at: self.t,
                        });
                    }
                    self.patch_node(name, &p);
                }
                Outcome::Ok("cordoned".into())
            }
            EffectKind::Uncordon {
                node: name,
                taint_key,
                ..
            } => {
                let Some(v) = self.nodes.get(name).cloned() else {
                    return Outcome::Gone("404".into());
                };
                let snap = crate::recover::NodeSnapshot::from_node(&node(&v));
                if let Some(p) = crate::recover::uncordon_patch(&snap, Some(taint_key)) {
                    self.patch_node(name, &p);
                }
                Outcome::Ok("uncordoned".into())
            }
            EffectKind::ReadRecords { term, kinds } => {
                // A consistent read: the jobs as they are now.
                for (kind, _) in kinds {
                    let jobs = if *kind == WorkloadKind::JobSet {
                        self.jobs
                            .values()
                            .map(|j| {
                                serde_json::from_value(j["metadata"].clone()).unwrap_or_default()
                            })
                            .collect()
                    } else {
                        Vec::new()
                    };
                    self.answers.push_back(Input::Records {
                        term: *term,
                        kind: *kind,
                        jobs,
                    });
                }
                Outcome::Ok(String::new())
            }
            EffectKind::Validate { .. } | EffectKind::ReadValidation { .. } => {
                // Validate makes the Job when it is gone.
                if self.validation.is_empty() && matches!(e.kind, EffectKind::Validate { .. }) {
                    self.validation = "Running".into();
                }
                if self.validation.is_empty() {
                    Outcome::Gone("404".into())
                } else {
                    Outcome::Ok(self.validation.clone())
                }
            }
            EffectKind::ReadNodes { term } => {
                // A consistent read: the nodes as they are now.
                let nodes = self
                    .nodes
                    .values()
                    .map(|n| serde_json::from_value(n["metadata"].clone()).unwrap_or_default())
                    .collect();
                self.answers.push_back(Input::Nodes { term: *term, nodes });
                Outcome::Ok(String::new())
            }
            _ => Outcome::Ok(String::new()),
        }
    }

    fn patch_job(&mut self, name: &str, patch: &Value) {
        let rv = self.bump();
        if let Some(obj) = self.jobs.get_mut(name) {
            json_patch::merge(obj, patch);
            obj["metadata"]["resourceVersion"] = json!(rv);
            let o = obj.clone();
            self.queue(Kind::Jobs, Pending::Apply(o));
        }
    }

    fn patch_node(&mut self, name: &str, patch: &Value) {
        let rv = self.bump();
        if let Some(obj) = self.nodes.get_mut(name) {
            let mut p = patch.clone();
            p["metadata"]
                .as_object_mut()
                .map(|m| m.remove("resourceVersion"));
            json_patch::merge(obj, &p);
            obj["metadata"]["resourceVersion"] = json!(rv);
            let o = obj.clone();
            self.queue(Kind::Nodes, Pending::Apply(o));
        }
    }
}

fn history(job: &Value) -> Vec<crate::policy::RestartRecord> {
    let a: std::collections::BTreeMap<String, String> =
        serde_json::from_value(job["metadata"]["annotations"].clone()).unwrap_or_default();
    crate::recover::read_history(&a)
}
