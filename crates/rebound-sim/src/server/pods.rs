//! Pod subresources: `binding` (scheduling), `eviction` and `log`.

use serde_json::{Value, json};

use super::errors::{ApiError, Cause};
use super::ops::{DeleteOpts, Loc, Reply};
use super::state::Shared;
use super::validate;

impl Shared {
    /// `pods/binding` (scheduling) and `pods/eviction` (delete).
    pub(super) fn pod_subresource_post(&self, loc: &Loc, body: &Value) -> Result<Reply, ApiError> {
        let name = loc.name.clone().unwrap_or_default();
        if loc.sub.as_deref() == Some("eviction") {
            let mut d = DeleteOpts::default();
            if let Some(o) = body.get("deleteOptions") {
                d.merge_body(o);
            }
            let main = Loc {
                sub: None,
                ..loc.clone()
            };
            self.delete(&main, &d)?;
            return Ok(Reply {
                code: 201,
                body: json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
                warnings: vec![],
            });
        }
        let node = body
            .pointer("/target/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if node.is_empty() {
            return Err(ApiError::invalid(
                "",
                "Binding",
                &name,
                vec![Cause {
                    reason: "FieldValueRequired",
                    field: "target.name".into(),
                    message: "Required value".into(),
                }],
            ));
        }
        let mut w = self.store.write();
        let old = w
            .get(&loc.key, loc.ns_str(), &name)
            .ok_or_else(|| ApiError::not_found(loc.target(&name)))?;
        if let Some(cur) = old
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        {
            return Err(ApiError::conflict(
                super::errors::Target {
                    group: "",
                    plural: "pods/binding",
                    name: &name,
                },
                &format!("pod {name} is already assigned to node \"{cur}\""),
            ));
        }
        let mut p = (*old).clone();
        p["spec"]["nodeName"] = json!(node);
        let cond = json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": validate::now_rfc3339()});
        let conds = p["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let mut conds: Vec<Value> = conds
            .into_iter()
            .filter(|c| c.get("type") != Some(&json!("PodScheduled")))
            .collect();
        conds.push(cond);
        p["status"]["conditions"] = Value::Array(conds);
        w.put(&loc.key, p);
        Ok(Reply {
            code: 201,
            body: json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
            warnings: vec![],
        })
    }

    /// `pods/log`: the text set through the handle; 204 for a pod never
    /// scheduled. Returns (status, text).
    pub fn pod_log(
        &self,
        loc: &Loc,
        container: Option<&str>,
        tail: Option<usize>,
    ) -> Result<(u16, String), ApiError> {
        let name = loc.name.clone().unwrap_or_default();
        let pod = self
            .store
            .read()
            .get(&loc.key, loc.ns_str(), &name)
            .ok_or_else(|| ApiError::not_found(loc.target(&name)))?;
        let names: Vec<String> = pod
            .pointer("/spec/containers")
            .and_then(Value::as_array)
            .map(|cs| {
                cs.iter()
                    .filter_map(|c| c.get("name").and_then(Value::as_str).map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let container = match container {
            Some(c) => {
                if !names.iter().any(|n| n == c) {
                    return Err(ApiError::bad_request(format!(
                        "container {c} is not valid for pod {name}"
                    )));
                }
                c.to_string()
            }
            None if names.len() == 1 => names[0].clone(),
            None => {
                return Err(ApiError::bad_request(format!(
                    "a container name must be specified for pod {name}, choose one of: [{}]",
                    names.join(" ")
                )));
            }
        };
        if pod
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            return Ok((204, String::new()));
        }
        let text = self
            .pod_logs
            .lock()
            .ok()
            .and_then(|g| {
                g.get(&(loc.ns_str().to_string(), name.clone(), container))
                    .cloned()
            })
            .unwrap_or_default();
        let text = match tail {
            Some(n) => {
                let lines: Vec<&str> = text.lines().collect();
                let start = lines.len().saturating_sub(n);
                let mut t = lines[start..].join("\n");
                if !t.is_empty() {
                    t.push('\n');
                }
                t
            }
            None => text,
        };
        Ok((200, text))
    }
}
