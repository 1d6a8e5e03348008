//! In-place wiring in the model cluster: pods that carry the restart
//! agent, and a kubelet that moves each agent to where the job's restart
//! generation puts it (at the barrier while the generation is raised and
//! not released, past it once released), or keeps it down (an agent that
//! never comes back).

use super::model::{JOBSET_UID, Kind, Model, Pending};
use serde_json::{Value, json};

impl Model {
    /// Wire every pod of the cluster not wired yet for in-place
    /// restarts, as the admission policy or `rebound inject` does.
    pub fn wire_all(&mut self) {
        let names: Vec<String> = self
            .pods
            .iter()
            .filter(|(_, p)| p["spec"]["initContainers"].is_null())
            .map(|(n, _)| n.clone())
            .collect();
        for n in names {
            let rv = self.bump_rv();
            if let Some(p) = self.pods.get_mut(&n) {
                p["spec"]["initContainers"] = json!([{
                    "name": crate::inplace::AGENT_CONTAINER, "image": "rebound",
                    "restartPolicy": "Always",
                    "restartPolicyRules": [{"action": "RestartAllContainers",
                        "exitCodes": {"operator": "In", "values": [crate::inplace::DEFAULT_EXIT_CODE]}}]}]);
                set_agent(p, true);
                p["metadata"]["resourceVersion"] = json!(rv);
                let o = p.clone();
                self.queue_change(Kind::Pods, Pending::Apply(o));
            }
        }
    }

    /// The kubelet of wired pods: each agent waits at the barrier while
    /// its job's generation is raised and not released (`reach`: or stays
    /// down, never reaching it), and runs past it once it is released.
    pub fn agents(&mut self, reach: bool) {
        let names: Vec<String> = self.pods.keys().cloned().collect();
        for n in names {
            let Some(p) = self.pods.get(&n) else { continue };
            if p["spec"]["initContainers"].is_null() {
                continue;
            }
            let juid = p["metadata"]["labels"][JOBSET_UID].clone();
            let Some(job) = self.jobs.values().find(|j| j["metadata"]["uid"] == juid) else {
                continue;
            };
            let a: std::collections::BTreeMap<String, String> =
                serde_json::from_value(job["metadata"]["annotations"].clone()).unwrap_or_default();
            let g = crate::inplace::Generation::from_annotations(&a);
            let want = if g.current <= g.released {
                Some(true)
            } else if reach {
                Some(false)
            } else {
                None
            };
            let now = agent_state(p);
            if now == want {
                continue;
            }
            let rv = self.bump_rv();
            if let Some(p) = self.pods.get_mut(&n) {
                match want {
                    Some(true) => {
                        set_agent(p, true);
                        // Past the barrier the workers run again, restarted
                        // in place.
                        let last = p["status"]["containerStatuses"][0]["state"].clone();
                        p["status"]["phase"] = json!("Running");
                        p["status"]["conditions"] = json!([{"type": "Ready", "status": "True"}]);
                        let c = &mut p["status"]["containerStatuses"][0];
                        if c["state"]["running"].is_null() {
                            c["lastState"] = last;
                            c["state"] = json!({"running": {"startedAt": "2030-01-01T00:00:00Z"}});
                            c["ready"] = json!(true);
                            c["started"] = json!(true);
                        }
                    }
                    Some(false) => set_agent(p, false),
                    None => {
                        p["status"]["initContainerStatuses"] = json!([{
                            "name": crate::inplace::AGENT_CONTAINER, "ready": false, "restartCount": 1,
                            "image": "rebound", "imageID": "",
                            "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]);
                    }
                }
                p["metadata"]["resourceVersion"] = json!(rv);
                let o = p.clone();
                self.queue_change(Kind::Pods, Pending::Apply(o));
            }
        }
    }

    /// Deliver job `name` again as it is now (after a test changed it).
    pub fn touch_job(&mut self, name: &str) {
        let rv = self.bump_rv();
        if let Some(j) = self.jobs.get_mut(name) {
            j["metadata"]["resourceVersion"] = json!(rv);
            let o = j.clone();
            self.queue_change(Kind::Jobs, Pending::Apply(o));
        }
    }

    /// Job `name`'s restart generation: (current, released).
    pub fn released(&self, name: &str) -> (u64, u64) {
        let a: std::collections::BTreeMap<String, String> = self
            .jobs
            .get(name)
            .map(|j| {
                serde_json::from_value(j["metadata"]["annotations"].clone()).unwrap_or_default()
            })
            .unwrap_or_default();
        let g = crate::inplace::Generation::from_annotations(&a);
        (g.current, g.released)
    }
}

/// The agent's state: past the barrier, waiting at it, or down.
fn agent_state(p: &Value) -> Option<bool> {
    let s = &p["status"]["initContainerStatuses"][0];
    if s["state"]["running"].is_null() {
        return None;
    }
    Some(s["started"] == json!(true))
}

fn set_agent(p: &mut Value, past: bool) {
    p["status"]["initContainerStatuses"] = json!([{
        "name": crate::inplace::AGENT_CONTAINER, "ready": past, "restartCount": 0,
        "image": "rebound", "imageID": "", "started": past,
        "state": {"running": {"startedAt": "2030-01-01T00:00:00Z"}}}]);
}
