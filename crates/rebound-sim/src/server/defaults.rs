//! What a real API server adds to built-in objects: the defaulting
//! functions of the Go types (pods' containers, probes, ports; nodes'
//! allocatable), canonical quantities, the admission plugins that
//! `kubectl get -o yaml` shows the work of (ServiceAccount with its token
//! volume, DefaultTolerationSeconds, Priority), and the fields Go's JSON
//! encoding drops (empty maps and lists) or always writes (`null` times).

use serde_json::{Map, Value, json};

use super::quantity;
use super::validate;

/// Defaults of a container (`SetDefaults_Container` and its probes/ports).
fn container(c: &mut Value) {
    let Some(m) = c.as_object_mut() else {
        return;
    };
    let image = m
        .get("image")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if !m.contains_key("imagePullPolicy") {
        let tag = image.rsplit('/').next().unwrap_or("");
        let latest = !image.contains('@') && (!tag.contains(':') || tag.ends_with(":latest"));
        m.insert(
            "imagePullPolicy".into(),
            json!(if latest { "Always" } else { "IfNotPresent" }),
        );
    }
    m.entry("terminationMessagePath")
        .or_insert(json!("/dev/termination-log"));
    m.entry("terminationMessagePolicy").or_insert(json!("File"));
    m.entry("resources").or_insert(json!({}));
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(p) = m.get_mut(probe).and_then(Value::as_object_mut) {
            p.entry("timeoutSeconds").or_insert(json!(1));
            p.entry("periodSeconds").or_insert(json!(10));
            p.entry("successThreshold").or_insert(json!(1));
            p.entry("failureThreshold").or_insert(json!(3));
            if let Some(h) = p.get_mut("httpGet").and_then(Value::as_object_mut) {
                h.entry("scheme").or_insert(json!("HTTP"));
            }
        }
    }
    if let Some(ports) = m.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            p.entry("protocol").or_insert(json!("TCP"));
        }
    }
    if let Some(res) = m.get_mut("resources").and_then(Value::as_object_mut) {
        // requests default to limits where only limits are given
        if let Some(lim) = res.get("limits").and_then(Value::as_object).cloned() {
            let req = res.entry("requests").or_insert(json!({}));
            if let Some(r) = req.as_object_mut() {
                for (k, v) in lim {
                    r.entry(k).or_insert(v);
                }
            }
        }
        for part in ["requests", "limits"] {
            canonical_map(res.get_mut(part));
        }
    }
}

/// Canonical quantities in a map of resource names to quantities.
pub fn canonical_map(m: Option<&mut Value>) {
    if let Some(m) = m.and_then(Value::as_object_mut) {
        for v in m.values_mut() {
            if let Some(c) = v.as_str().and_then(quantity::canonical) {
                *v = Value::String(c);
            }
        }
    }
}

fn containers_mut(spec: &mut Map<String, Value>) -> impl Iterator<Item = &mut Value> {
    spec.iter_mut()
        .filter(|(k, _)| {
            matches!(
                k.as_str(),
                "containers" | "initContainers" | "ephemeralContainers"
            )
        })
        .filter_map(|(_, v)| v.as_array_mut())
        .flatten()
}

/// The defaulting functions of a pod (what its creator is recorded to own).
pub fn pod(pod: &mut Value) {
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    spec.entry("restartPolicy").or_insert(json!("Always"));
    spec.entry("schedulerName")
        .or_insert(json!("default-scheduler"));
    spec.entry("terminationGracePeriodSeconds")
        .or_insert(json!(30));
    spec.entry("dnsPolicy").or_insert(json!("ClusterFirst"));
    spec.entry("securityContext").or_insert(json!({}));
    for c in containers_mut(spec) {
        container(c);
    }
    if let Some(sa) = spec.get("serviceAccountName").cloned() {
        spec.entry("serviceAccount").or_insert(sa);
    } else if let Some(sa) = spec.get("serviceAccount").cloned() {
        spec.insert("serviceAccountName".into(), sa);
    }
}

/// What only pods (not pod templates) are defaulted with.
pub fn pod_only(pod: &mut Value) {
    if let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) {
        spec.entry("enableServiceLinks").or_insert(json!(true));
    }
}

/// The admission plugins' additions to a new pod: ServiceAccount (its
/// name and the projected token volume mounted in every container),
/// DefaultTolerationSeconds and Priority.
pub fn pod_admission(pod: &mut Value) {
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    spec.entry("serviceAccountName").or_insert(json!("default"));
    spec.entry("serviceAccount").or_insert(json!("default"));
    let automount = spec.get("automountServiceAccountToken") != Some(&json!(false));
    let has_sa_mount = containers_mut(spec).any(|c| {
        c.get("volumeMounts")
            .and_then(Value::as_array)
            .is_some_and(|ms| {
                ms.iter().any(|m| {
                    m.get("mountPath")
                        == Some(&json!("/var/run/secrets/kubernetes.io/serviceaccount"))
                })
            })
    });
    if automount && !has_sa_mount {
        let name = format!("kube-api-access-{}", validate::name_suffix());
        let vols = spec.entry("volumes").or_insert(json!([]));
        if let Some(v) = vols.as_array_mut() {
            v.push(json!({"name": name, "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"items": [{"key": "ca.crt", "path": "ca.crt"}], "name": "kube-root-ca.crt"}},
                {"downwardAPI": {"items": [{"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}, "path": "namespace"}]}}
            ]}}));
        }
        for c in containers_mut(spec).filter(|c| c.is_object()) {
            let ms = c
                .as_object_mut()
                .map(|m| m.entry("volumeMounts").or_insert(json!([])));
            if let Some(Value::Array(ms)) = ms {
                ms.push(json!({"mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "name": name, "readOnly": true}));
            }
        }
    }
    let tols = spec.entry("tolerations").or_insert(json!([]));
    if let Some(t) = tols.as_array_mut() {
        for key in [
            "node.kubernetes.io/not-ready",
            "node.kubernetes.io/unreachable",
        ] {
            let tolerated = t.iter().any(|x| {
                let eff = x.get("effect").and_then(Value::as_str).unwrap_or("");
                let k = x.get("key").and_then(Value::as_str).unwrap_or("");
                let exists_all = k.is_empty() && x.get("operator") == Some(&json!("Exists"));
                (k == key || exists_all) && (eff.is_empty() || eff == "NoExecute")
            });
            if !tolerated {
                t.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
            }
        }
    }
    spec.entry("priority").or_insert(json!(0));
    spec.entry("preemptionPolicy")
        .or_insert(json!("PreemptLowerPriority"));
}

/// A batch Job's defaults (`SetDefaults_Job`) and its template's pod
/// defaults.
pub fn job(job: &mut Value) {
    if let Some(spec) = job.get_mut("spec").and_then(Value::as_object_mut) {
        if !spec.contains_key("completions") && !spec.contains_key("parallelism") {
            spec.insert("completions".into(), json!(1));
        }
        spec.entry("parallelism").or_insert(json!(1));
        spec.entry("backoffLimit").or_insert(json!(6));
        spec.entry("completionMode").or_insert(json!("NonIndexed"));
        spec.entry("suspend").or_insert(json!(false));
        if !spec.contains_key("podFailurePolicy") {
            spec.entry("podReplacementPolicy")
                .or_insert(json!("TerminatingOrFailed"));
        }
        spec.entry("manualSelector").or_insert(json!(false));
        if let Some(t) = spec.get_mut("template") {
            pod(t);
        }
    }
}

/// The selector and template labels the Job strategy generates from the
/// uid (unless `manualSelector`), after its creator's fields are recorded.
pub fn job_selector(job: &mut Value, uid: &str) {
    let name = job
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let Some(spec) = job.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    if spec.get("manualSelector") == Some(&json!(true)) {
        return;
    }
    spec.insert(
        "selector".into(),
        json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}),
    );
    let labels = spec
        .entry("template")
        .or_insert(json!({}))
        .as_object_mut()
        .map(|t| t.entry("metadata").or_insert(json!({})))
        .and_then(Value::as_object_mut)
        .map(|m| m.entry("labels").or_insert(json!({})));
    if let Some(Value::Object(l)) = labels {
        for (k, v) in [
            ("batch.kubernetes.io/controller-uid", uid),
            ("batch.kubernetes.io/job-name", name.as_str()),
            ("controller-uid", uid),
            ("job-name", name.as_str()),
        ] {
            l.insert(k.into(), json!(v));
        }
    }
}

/// `stringData` is written into `data` (base64), as the Secret strategy does.
pub fn secret_string_data(secret: &mut Value) {
    use base64::Engine;
    let Some(m) = secret.as_object_mut() else {
        return;
    };
    if let Some(Value::Object(sd)) = m.remove("stringData") {
        let data = m.entry("data").or_insert(json!({}));
        if let Some(d) = data.as_object_mut() {
            for (k, v) in sd {
                let text = v.as_str().unwrap_or("").to_string();
                d.insert(
                    k,
                    json!(base64::engine::general_purpose::STANDARD.encode(text)),
                );
            }
        }
    }
}

/// Pod conditions always carry both times (`null` when unset).
pub fn pod_conditions(pod: &mut Value) {
    if let Some(cs) = pod
        .pointer_mut("/status/conditions")
        .and_then(Value::as_array_mut)
    {
        for c in cs.iter_mut().filter_map(Value::as_object_mut) {
            c.entry("lastProbeTime").or_insert(Value::Null);
            c.entry("lastTransitionTime").or_insert(Value::Null);
        }
    }
}

/// A node's defaults: allocatable is its capacity unless given;
/// quantities canonical.
pub fn node(node: &mut Value) {
    let Some(status) = node.get_mut("status").and_then(Value::as_object_mut) else {
        return;
    };
    canonical_map(status.get_mut("capacity"));
    if !status.contains_key("allocatable")
        && let Some(c) = status.get("capacity").cloned()
    {
        status.insert("allocatable".into(), c);
    }
    canonical_map(status.get_mut("allocatable"));
}

/// The fields a core Event is always written with.
pub fn core_event_view(ev: &mut Value) {
    if let Some(m) = ev.as_object_mut() {
        m.entry("eventTime").or_insert(Value::Null);
        m.entry("reportingComponent").or_insert(json!(""));
        m.entry("reportingInstance").or_insert(json!(""));
        m.entry("firstTimestamp").or_insert(Value::Null);
        m.entry("lastTimestamp").or_insert(Value::Null);
        m.entry("source").or_insert(json!({}));
        m.entry("involvedObject").or_insert(json!({}));
    }
}

/// The fields an `events.k8s.io/v1` Event is always written with.
pub fn v1_event_view(ev: &mut Value) {
    if let Some(m) = ev.as_object_mut() {
        m.entry("eventTime").or_insert(Value::Null);
        m.entry("deprecatedFirstTimestamp").or_insert(Value::Null);
        m.entry("deprecatedLastTimestamp").or_insert(Value::Null);
        m.entry("deprecatedSource").or_insert(json!({}));
        if m.get("reportingInstance") == Some(&json!("")) {
            m.remove("reportingInstance");
        }
        if m.get("reportingController") == Some(&json!("")) {
            m.remove("reportingController");
        }
    }
}

/// Drops what Go's `omitempty` drops in built-in objects: empty lists
/// anywhere, empty maps of the metadata and of map-typed fields, `null`s.
pub fn drop_empty(v: &mut Value) {
    const MAPS: &[&str] = &[
        "labels",
        "annotations",
        "data",
        "binaryData",
        "stringData",
        "nodeSelector",
        "source",
        "deprecatedSource",
    ];
    fn walk(v: &mut Value) {
        if let Value::Object(m) = v {
            m.retain(|k, c| {
                let empty_list = c.as_array().is_some_and(Vec::is_empty);
                let empty_map =
                    MAPS.contains(&k.as_str()) && c.as_object().is_some_and(Map::is_empty);
                !(c.is_null() || empty_list || empty_map)
            });
            for c in m.values_mut() {
                walk(c);
            }
        } else if let Value::Array(a) = v {
            for c in a {
                walk(c);
            }
        }
    }
    walk(v);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_defaults_and_admission() {
        let mut p = json!({"spec": {"containers": [{"name": "c", "image": "busybox",
            "resources": {"limits": {"cpu": "1000m"}}, "startupProbe": {"httpGet": {"port": 1}}}]}});
        pod(&mut p);
        pod_admission(&mut p);
        let c = &p["spec"]["containers"][0];
        assert_eq!(c["imagePullPolicy"], json!("Always"));
        assert_eq!(
            c["resources"],
            json!({"limits": {"cpu": "1"}, "requests": {"cpu": "1"}})
        );
        assert_eq!(c["startupProbe"]["httpGet"]["scheme"], json!("HTTP"));
        assert_eq!(p["spec"]["serviceAccountName"], json!("default"));
        assert_eq!(p["spec"]["tolerations"].as_array().map(Vec::len), Some(2));
        assert_eq!(
            c["volumeMounts"][0]["name"],
            p["spec"]["volumes"][0]["name"]
        );
        let mut q = json!({"spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}});
        pod(&mut q);
        assert_eq!(
            q["spec"]["containers"][0]["imagePullPolicy"],
            json!("IfNotPresent")
        );
    }

    #[test]
    fn empty_fields_go() {
        let mut v = json!({"metadata": {"labels": {}, "finalizers": []}, "data": {}, "spec": {"resources": {}}});
        drop_empty(&mut v);
        assert_eq!(v, json!({"metadata": {}, "spec": {"resources": {}}}));
    }
}
