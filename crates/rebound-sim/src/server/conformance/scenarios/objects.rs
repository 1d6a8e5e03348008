//! The other kinds rebound and the simulated actors write: Events of both
//! APIs (one storage), Leases (micro-times, optimistic concurrency), batch
//! Jobs (defaults), ServiceAccounts, Secrets.

use serde_json::json;

use super::super::scenario::{Body, Keep, Scenario};
use super::{MERGE, core};

fn events() -> Scenario {
    let mut s = Scenario::namespaced(
        "events",
        "core and events.k8s.io Events share storage; validation of both",
    );
    let core_ev = core("events");
    let v1 = "/apis/events.k8s.io/v1/namespaces/{ns}/events";
    s.post("core-create", &core_ev, json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e1"},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": "{ns}", "apiVersion": "v1"},
        "reason": "Restarted", "message": "restarted by rebound", "type": "Normal",
        "source": {"component": "rebound"}, "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:00:00Z", "count": 1}));
    s.get("core-as-v1", &format!("{v1}/e1"));
    s.post(
        "v1-create",
        v1,
        json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e2"},
        "regarding": {"kind": "Pod", "name": "p", "namespace": "{ns}", "apiVersion": "v1"},
        "reason": "JobRestarted", "note": "job restarted", "type": "Warning", "action": "Restart",
        "reportingController": "rebound.dev/controller", "reportingInstance": "rebound-0",
        "eventTime": "2026-01-01T00:00:00.000000Z"}),
    );
    s.get("v1-as-core", &format!("{core_ev}/e2"));
    s.patch(
        "v1-series",
        &format!("{v1}/e2"),
        MERGE,
        Body::Json(
            json!({"series": {"count": 2, "lastObservedTime": "2026-01-01T00:00:05.000000Z"}}),
        ),
    );
    s.get("list-core", &core_ev).keep(Keep::Only(vec![
        "/body/kind",
        "/body/apiVersion",
        "/body/items/*/metadata/name",
        "/body/items/*/count",
        "/body/items/*/series",
    ]));
    s.get(
        "list-v1-field",
        &format!("{v1}?fieldSelector=regarding.name%3Dp,reason%3DJobRestarted"),
    )
    .keep(Keep::Only(vec!["/body/items/*/metadata/name"]));
    s.get(
        "list-core-field",
        &format!("{core_ev}?fieldSelector=involvedObject.kind%3DPod,type%3DNormal"),
    )
    .keep(Keep::Only(vec!["/body/items/*/metadata/name"]));
    s.post("v1-missing-fields", v1, json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e3"}, "reason": "R"}));
    s.post("v1-bad-time", v1, json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e4"},
        "regarding": {"kind": "Pod", "name": "p", "namespace": "{ns}"}, "reason": "R", "type": "Normal", "action": "A",
        "reportingController": "c", "reportingInstance": "i", "eventTime": "2026-01-01T00:00:00Z"}));
    s.post("core-node-event-wrong-namespace", &core_ev, json!({"metadata": {"name": "e5"},
        "involvedObject": {"kind": "Node", "name": "n1"}, "reason": "R", "message": "m", "type": "Warning"}));
    s.post("core-node-event-default", "/api/v1/namespaces/default/events", json!({"metadata": {"name": "cf-events-e6"},
        "involvedObject": {"kind": "Node", "name": "n1"}, "reason": "R", "message": "m", "type": "Warning", "source": {"component": "rebound-agent", "host": "n1"}}))
        .keep(Keep::Only(vec!["/status", "/body/metadata/namespace", "/body/involvedObject", "/body/source"]));
    s.post("v1-node-event-kube-system", "/apis/events.k8s.io/v1/namespaces/kube-system/events", json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": "cf-events-e7"}, "regarding": {"kind": "Node", "name": "n1"}, "reason": "XID", "note": "xid 79", "type": "Warning",
        "action": "Detect", "reportingController": "rebound.dev/agent", "reportingInstance": "n1", "eventTime": "2026-01-01T00:00:00.000000Z"}))
        .keep(Keep::Only(vec!["/status", "/body/metadata/namespace", "/body/regarding"]));
    s.post("core-bad-type", &core_ev, json!({"metadata": {"name": "e8"},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": "{ns}"}, "reason": "R", "message": "m", "type": "Bad"}));
    s.delete("delete-v1", &format!("{v1}/e2"), None);
    s
}

fn leases() -> Scenario {
    let mut s = Scenario::namespaced(
        "leases",
        "Leases as leader election and node heartbeats write them",
    );
    let leases = "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases";
    s.post("create", leases, json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "rebound-leader"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15, "acquireTime": "2026-01-01T00:00:00.000000Z",
                 "renewTime": "2026-01-01T00:00:01.000000Z", "leaseTransitions": 0}}))
        .capture("rv", "/metadata/resourceVersion");
    s.put("renew", &format!("{leases}/rebound-leader"), json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "rebound-leader", "resourceVersion": "{{rv}}"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15, "acquireTime": "2026-01-01T00:00:00.000000Z",
                 "renewTime": "2026-01-01T00:00:05.000000Z", "leaseTransitions": 0}}));
    s.put("takeover-stale", &format!("{leases}/rebound-leader"), json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "rebound-leader", "resourceVersion": "{{rv}}"}, "spec": {"holderIdentity": "b"}}));
    s.put(
        "update-without-rv",
        &format!("{leases}/rebound-leader"),
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "rebound-leader"}, "spec": {"holderIdentity": "b"}}),
    );
    s.post(
        "bad-micro-time",
        leases,
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "bad"},
        "spec": {"holderIdentity": "a", "renewTime": "2026-01-01T00:00:01Z"}}),
    );
    s.post(
        "bad-duration",
        leases,
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "neg"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 0}}),
    );
    s.patch(
        "merge-renew",
        &format!("{leases}/rebound-leader"),
        MERGE,
        Body::Json(json!({"spec": {"renewTime": "2026-01-01T00:00:09.000000Z"}})),
    )
    .keep(Keep::Only(vec!["/body/spec"]));
    s
}

fn jobs() -> Scenario {
    let mut s = Scenario::namespaced(
        "batch-jobs",
        "a batch Job as created: the server's defaults, selector and labels",
    );
    let jobs = "/apis/batch/v1/namespaces/{ns}/jobs";
    s.post("create", jobs, json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "labels": {"kcover.io/cascading-recovery": "true"}},
        "spec": {"backoffLimit": 2, "suspend": true, "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}}))
        .keep(Keep::Drop(vec!["/body/metadata/managedFields", "/body/status"]));
    s.post("create-bad-restart-policy", jobs, json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "bad"},
        "spec": {"template": {"spec": {"restartPolicy": "Always", "containers": [{"name": "c", "image": "busybox"}]}}}}));
    s.delete(
        "delete-background",
        &format!("{jobs}/j?propagationPolicy=Background"),
        None,
    )
    .keep(Keep::Only(vec![
        "/body/kind",
        "/body/status",
        "/body/details",
    ]));
    s
}

fn accounts() -> Scenario {
    let mut s = Scenario::namespaced(
        "serviceaccounts-and-secrets",
        "ServiceAccounts and Secrets: create, delete returns",
    );
    s.post(
        "sa",
        &core("serviceaccounts"),
        json!({"metadata": {"name": "rebound"}}),
    );
    s.delete(
        "delete-sa",
        &format!("{}/rebound", core("serviceaccounts")),
        None,
    )
    .keep(Keep::Only(vec!["/body/kind", "/body/metadata/name"]));
    s.post(
        "secret",
        &core("secrets"),
        json!({"metadata": {"name": "s"}, "stringData": {"a": "b"}}),
    );
    s.post(
        "secret-bad-type",
        &core("secrets"),
        json!({"metadata": {"name": "s2"}, "type": "kubernetes.io/tls", "data": {}}),
    );
    s.delete("delete-secret", &format!("{}/s", core("secrets")), None);
    s
}

pub(super) fn all() -> Vec<Scenario> {
    vec![events(), leases(), jobs(), accounts()]
}
