//! Rank tables (issue #7): on an Ascend cluster (device-plugin annotations
//! on the pods), rebound builds the `hccl.json` of a labelled Volcano Job in
//! its `rings-config-<job>` ConfigMap, resets it when rebound restarts the
//! job, rebuilds it, and only then reports the job recovered.

use super::*;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event as KEvent;
use kube::api::PostParams;
use kube::runtime::watcher;
use rebound::ascend::ranktable::Format;
use rebound::ascend::ranktable::table::{DATA_KEY, DEVICE_ANNOTATION, LABEL_KEY, LABEL_VALUE};
use rebound_sim::cluster::Accelerator;
use serde_json::Value;
use std::sync::{Arc, Mutex};

const RING: (&str, &str) = (LABEL_KEY, LABEL_VALUE);

/// Restarts without cooldown in `ml`, so a second fault restarts again.
const NO_COOLDOWN: &str = r#"
apiVersion: rebound.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: fast, namespace: ml}
spec:
  selector: {matchLabels: {kcover.io/cascading-recovery: "true"}}
  cooldown: 0s
"#;

fn ascend(nodes: usize) -> SimConfig {
    SimConfig {
        nodes,
        accelerator: Accelerator::Ascend,
        gpus_per_node: 8,
        gpus_per_pod: 4,
        ..SimConfig::default()
    }
}

async fn ascend_bed(server: Server, format: Format) -> (Testbed, ControllerHandle) {
    bed_with_args(server, 2, NO_COOLDOWN, Some(ascend(2)), |a| {
        a.rank_tables = true;
        a.rank_table_format = format;
    })
    .await
}

/// The user's ConfigMap, as HCCL-Controller expects it in the job's YAML.
async fn rings_config(bed: &Testbed, ns: &str, job: &str) {
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("rings-config-{job}"), "namespace": ns,
                     "labels": {LABEL_KEY: LABEL_VALUE}},
        "data": {DATA_KEY: r#"{"status":"initializing"}"#},
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(bed.client(), ns)
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
}

/// Every value the ConfigMap's `hccl.json` takes, in order, seen by a watch.
fn history(bed: &Testbed, ns: &str, name: &str) -> Arc<Mutex<Vec<Value>>> {
    let seen = Arc::new(Mutex::new(Vec::<Value>::new()));
    let api: Api<ConfigMap> = Api::namespaced(bed.client(), ns);
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let out = seen.clone();
    tokio::spawn(async move {
        let s = watcher(api, cfg);
        futures::pin_mut!(s);
        while let Some(ev) = s.next().await {
            if let Ok(watcher::Event::Apply(c) | watcher::Event::InitApply(c)) = ev {
                let v = c
                    .data
                    .and_then(|d| d.get(DATA_KEY).cloned())
                    .and_then(|s| serde_json::from_str(&s).ok())
                    .unwrap_or(Value::Null);
                let mut h = out.lock().unwrap();
                if h.last() != Some(&v) {
                    h.push(v);
                }
            }
        }
    });
    seen
}

fn statuses(h: &Arc<Mutex<Vec<Value>>>) -> Vec<String> {
    h.lock()
        .unwrap()
        .iter()
        .map(|v| v["status"].as_str().unwrap_or("?").to_string())
        .collect()
}

async fn table(bed: &Testbed, ns: &str, job: &str) -> Value {
    let cm = Api::<ConfigMap>::namespaced(bed.client(), ns)
        .get(&format!("rings-config-{job}"))
        .await
        .unwrap();
    serde_json::from_str(&cm.data.unwrap()[DATA_KEY]).unwrap()
}

/// The controller's writes to an object, in order (indices in the log).
fn controller_writes(bed: &Testbed, resource: &str, name: &str) -> Vec<usize> {
    bed.requests()
        .iter()
        .enumerate()
        .filter(|(_, r)| {
            r.verb == "patch"
                && r.resource == resource
                && r.subresource.is_empty()
                && r.name.as_deref() == Some(name)
                && r.status < 300
                && r.user_agent
                    .as_deref()
                    .is_some_and(|u| u.starts_with("rebound-controller/"))
        })
        .map(|(i, _)| i)
        .collect()
}

async fn recovery_events(bed: &Testbed, ns: &str, job: &str) -> Vec<KEvent> {
    Api::<KEvent>::namespaced(bed.client(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some("RecoveryComplete")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(job)
        })
        .collect()
}

async fn volcano_job(bed: &Testbed, ns: &str, name: &str) -> DynamicObject {
    let ar = rebound_sim::actors::volcano::job_resource();
    Api::<DynamicObject>::namespaced_with(bed.client(), ns, &ar)
        .get(name)
        .await
        .unwrap()
}

fn annotation(job: &DynamicObject, key: &str) -> Option<String> {
    job.metadata.annotations.as_ref()?.get(key).cloned()
}

async fn fail_one_pod(bed: &Testbed, ns: &str, sel: &str) {
    let pod = running(bed, ns, sel).await[0].clone();
    bed.cluster
        .fail_container(
            ns,
            pod.metadata.name.as_deref().unwrap(),
            &pod.spec.as_ref().unwrap().containers[0].name,
            1,
            "Error",
        )
        .await
        .unwrap();
}

fn metric(ctl: &ControllerHandle, line_start: &str) -> f64 {
    ctl.metrics
        .encode()
        .lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

async fn volcano_rank_table_is_built_reset_on_restart_rebuilt_then_recovery_reported(
    server: Server,
) {
    let (bed, ctl) = ascend_bed(server, Format::V2).await;
    let ml = bed.ns("ml");
    rings_config(&bed, &ml, "vj").await;
    let seen = history(&bed, &ml, "rings-config-vj");
    bed.cluster
        .create_volcano_job(&ml, "vj", 2, &[OPT_IN, RING])
        .await
        .unwrap();
    let sel = "volcano.sh/job-name=vj";

    // Built once every pod has its chips: the pods' annotations, in rank order.
    let t = wait("rank table completed", T, || async {
        let t = table(&bed, &ml, "vj").await;
        (t["status"] == "completed").then_some(t)
    })
    .await;
    // The table needs the chips and host of each pod, not its readiness:
    // under load it can be complete a moment before both pods run.
    let pods = wait("both pods running", T, || async {
        let p = running(&bed, &ml, sel).await;
        (p.len() >= 2).then_some(p)
    })
    .await;
    assert_eq!(pods.len(), 2);
    assert_eq!(t["server_count"], "2");
    assert_eq!(t["version"], "1.0");
    let servers = t["server_list"].as_array().unwrap();
    for (rank, p) in ["vj-worker-0", "vj-worker-1"].iter().enumerate() {
        let pod = pods
            .iter()
            .find(|x| x.metadata.name.as_deref() == Some(p))
            .unwrap();
        let ann: Value =
            serde_json::from_str(&pod.metadata.annotations.as_ref().unwrap()[DEVICE_ANNOTATION])
                .unwrap();
        let host = pod.status.as_ref().unwrap().host_ip.clone().unwrap();
        assert_eq!(servers[rank]["server_id"], host.as_str(), "{p}");
        assert_eq!(ann["server_id"], host.as_str());
        let devs = servers[rank]["device"].as_array().unwrap();
        assert_eq!(devs.len(), 4, "every chip of {p}");
        for (i, d) in devs.iter().enumerate() {
            assert_eq!(d["device_id"], ann["devices"][i]["device_id"]);
            assert_eq!(d["device_ip"], ann["devices"][i]["device_ip"]);
            assert_eq!(d["rank_id"], (rank * 4 + i).to_string());
        }
    }
    // The placeholder stayed until the table was whole: one write, completed.
    wait("the watch saw the table", T, || async {
        (statuses(&seen).len() >= 2).then_some(())
    })
    .await;
    assert_eq!(statuses(&seen), ["initializing", "completed"]);
    assert_eq!(
        controller_writes(&bed, "configmaps", "rings-config-vj").len(),
        1
    );
    assert!(recovery_events(&bed, &ml, "vj").await.is_empty());

    // A fault: rebound restarts the job (Volcano Command), the table goes
    // back to initializing, is rebuilt, and only then is the job recovered.
    fail_one_pod(&bed, &ml, sel).await;
    let job = wait("recovery recorded on the job", T, || async {
        let j = volcano_job(&bed, &ml, "vj").await;
        (annotation(&j, "rebound.dev/recovered-restart").as_deref() == Some("1")).then_some(j)
    })
    .await;
    assert_eq!(
        annotation(&job, "rebound.dev/restart-count").as_deref(),
        Some("1")
    );
    assert!(annotation(&job, "rebound.dev/recovered-at").is_some());
    let writes = controller_writes(&bed, "configmaps", "rings-config-vj");
    assert_eq!(writes.len(), 3, "built, reset, rebuilt: one write each");
    wait("the watch saw the rebuild", T, || async {
        (statuses(&seen).len() >= 4).then_some(())
    })
    .await;
    assert_eq!(
        statuses(&seen),
        ["initializing", "completed", "initializing", "completed"]
    );
    // The request log records a request when its answer arrives: the
    // annotation can be read before the patch that wrote it is logged.
    // Two patches of the job: the restart record and the recovery report.
    let recorded = wait("both job patches logged", T, || async {
        let r = controller_writes(&bed, "jobs", "vj");
        (r.len() >= 2).then_some(r)
    })
    .await;
    assert_eq!(recorded.len(), 2, "one record, one report: {recorded:?}");
    assert!(
        recorded.last().is_some_and(|i| *i > writes[2]),
        "the recovery is recorded after the rebuilt table: {recorded:?} vs {writes:?}"
    );
    let ev = wait("RecoveryComplete Event", T, || async {
        let e = recovery_events(&bed, &ml, "vj").await;
        (!e.is_empty()).then_some(e)
    })
    .await;
    assert_eq!(ev.len(), 1);
    assert!(
        ev[0]
            .note
            .as_deref()
            .unwrap_or_default()
            .contains("restart 1"),
        "{:?}",
        ev[0].note
    );
    assert_eq!(metric(&ctl, "rebound_recovery_seconds_count"), 1.0);
    assert_eq!(
        metric(
            &ctl,
            "rebound_rank_table_writes_total{status=\"completed\"}"
        ),
        2.0
    );
    assert_eq!(
        metric(
            &ctl,
            "rebound_rank_table_writes_total{status=\"initializing\"}"
        ),
        1.0,
        "{:#?}\n{}",
        bed.requests()
            .iter()
            .filter(|r| r.path.contains("rings-config"))
            .map(|r| format!(
                "{:?} {} {} {} {:?}",
                r.at, r.verb, r.path, r.status, r.user_agent
            ))
            .collect::<Vec<_>>(),
        ctl.metrics.encode()
    );
    let rebuilt = table(&bed, &ml, "vj").await;
    assert_eq!(rebuilt["server_count"], "2");

    // A new controller (fail-over, upgrade) does not report restart 1 again;
    // a second restart is reported once more.
    ctl.shutdown().await;
    let ctl = bed
        .start_controller(args(&bed, |a| a.rank_tables = true))
        .await
        .unwrap();
    wait("pods running again", T, || async {
        (running(&bed, &ml, sel).await.len() == 2).then_some(())
    })
    .await;
    fail_one_pod(&bed, &ml, sel).await;
    wait("second recovery", T, || async {
        let j = volcano_job(&bed, &ml, "vj").await;
        (annotation(&j, "rebound.dev/recovered-restart").as_deref() == Some("2")).then_some(())
    })
    .await;
    // Two Events, or one with a series of two (the recorder may merge them).
    let count = |e: &[KEvent]| -> i32 {
        e.iter()
            .map(|x| x.series.as_ref().map_or(1, |s| s.count))
            .sum()
    };
    let ev = wait("second Event", T, || async {
        let e = recovery_events(&bed, &ml, "vj").await;
        (count(&e) >= 2).then_some(e)
    })
    .await;
    assert_eq!(count(&ev), 2, "restart 1 reported once, restart 2 once");
    assert_eq!(metric(&ctl, "rebound_recovery_seconds_count"), 1.0);
    every_restart_ends(&bed).await;
    ctl.shutdown().await;
}

async fn batch_job_rank_table_in_v1_format(server: Server) {
    let (bed, ctl) = ascend_bed(server, Format::V1).await;
    let ml = bed.ns("ml");
    rings_config(&bed, &ml, "bj").await;
    bed.cluster
        .create_batch_job(&ml, "bj", 2, &[OPT_IN, RING])
        .await
        .unwrap();
    let t = wait("v1 rank table completed", T, || async {
        let t = table(&bed, &ml, "bj").await;
        (t["status"] == "completed").then_some(t)
    })
    .await;
    assert_eq!(t["group_count"], "1");
    let g = &t["group_list"][0];
    assert_eq!(g["group_name"], "bj");
    assert_eq!(g["instance_count"], "2");
    assert_eq!(g["device_count"], "8");
    let instances = g["instance_list"].as_array().unwrap();
    assert_eq!(instances.len(), 2);
    // Complete with the chips and hosts: the pods may run a moment later.
    let pods = wait("both pods running", T, || async {
        let p = running(&bed, &ml, "batch.kubernetes.io/job-name=bj").await;
        (p.len() >= 2).then_some(p)
    })
    .await;
    for i in instances {
        let pod = pods
            .iter()
            .find(|p| p.metadata.name.as_deref() == i["pod_name"].as_str())
            .unwrap_or_else(|| panic!("{i} names a running pod"));
        let ann: Value =
            serde_json::from_str(&pod.metadata.annotations.as_ref().unwrap()[DEVICE_ANNOTATION])
                .unwrap();
        assert_eq!(i, &ann, "the instance is the device plugin's annotation");
        assert_eq!(i["devices"].as_array().unwrap().len(), 4);
    }
    assert!(t.get("server_list").is_none(), "no v2 fields in v1");
    ctl.shutdown().await;
}

async fn jobs_without_the_label_or_configmap_get_no_table(server: Server) {
    let (bed, ctl) = ascend_bed(server, Format::V2).await;
    let ml = bed.ns("ml");
    // Labelled job, no ConfigMap: nothing is created.
    bed.cluster
        .create_volcano_job(&ml, "nocm", 1, &[OPT_IN, RING])
        .await
        .unwrap();
    // ConfigMap, job not labelled: the placeholder stays.
    rings_config(&bed, &ml, "plain").await;
    bed.cluster
        .create_volcano_job(&ml, "plain", 1, &[OPT_IN])
        .await
        .unwrap();
    // A labelled job with a ConfigMap, to know the controller got this far.
    rings_config(&bed, &ml, "ok").await;
    bed.cluster
        .create_volcano_job(&ml, "ok", 1, &[OPT_IN, RING])
        .await
        .unwrap();
    wait("control job's table", T, || async {
        (table(&bed, &ml, "ok").await["status"] == "completed").then_some(())
    })
    .await;
    wait("all pods running", T, || async {
        (running(&bed, &ml, "volcano.sh/job-name=nocm").await.len() == 1
            && running(&bed, &ml, "volcano.sh/job-name=plain").await.len() == 1)
            .then_some(())
    })
    .await;
    assert_eq!(table(&bed, &ml, "plain").await["status"], "initializing");
    assert!(controller_writes(&bed, "configmaps", "rings-config-plain").is_empty());
    assert!(
        Api::<ConfigMap>::namespaced(bed.client(), &ml)
            .get_opt("rings-config-nocm")
            .await
            .unwrap()
            .is_none()
    );
    ctl.shutdown().await;
}

/// A one-pod labelled Volcano Job whose template already carries the device
/// plugin's annotation, with its ConfigMap: a rank table on any cluster
/// (the RBAC scenario runs on GPU nodes). Returns when the table is complete.
pub async fn preset_ranktable_job(bed: &Testbed, ns: &str, name: &str) {
    rings_config(bed, ns, name).await;
    let device = r#"{"pod_name":"p","server_id":"10.1.0.0","devices":[{"device_id":"0","device_ip":"192.168.0.0"}]}"#;
    let job: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
        "metadata": {"name": name, "namespace": ns, "labels": {LABEL_KEY: LABEL_VALUE}},
        "spec": {"schedulerName": "volcano", "queue": "default", "minAvailable": 1,
            "tasks": [{"name": "worker", "replicas": 1, "template": {
                "metadata": {"labels": {LABEL_KEY: LABEL_VALUE},
                             "annotations": {DEVICE_ANNOTATION: device}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "w", "image": "t",
                    "resources": {"limits": {"huawei.com/Ascend910": "1"}}}]}}}]},
    }))
    .unwrap();
    let ar = rebound_sim::actors::volcano::job_resource();
    Api::<DynamicObject>::namespaced_with(bed.client(), ns, &ar)
        .create(&PostParams::default(), &job)
        .await
        .unwrap();
    wait(&format!("{ns}/{name} rank table"), T, || async {
        (table(bed, ns, name).await["status"] == "completed").then_some(())
    })
    .await;
}

e2e!(volcano_rank_table_is_built_reset_on_restart_rebuilt_then_recovery_reported);
e2e!(batch_job_rank_table_in_v1_format);
e2e!(jobs_without_the_label_or_configmap_get_no_table);
