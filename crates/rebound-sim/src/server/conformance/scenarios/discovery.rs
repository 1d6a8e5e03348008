//! Discovery as `kubectl` 1.36 and `kube` ask for it: aggregated first,
//! then the legacy documents; `/version`.

use super::super::scenario::{Keep, Scenario};

/// The resources (and, by prefix, subresources) of the built-in groups
/// the embedded server serves.
const CORE: &[&str] = &[
    "configmaps",
    "events",
    "namespaces",
    "nodes",
    "pods",
    "secrets",
    "serviceaccounts",
    "services",
];

const GROUPS: &[&str] = &[
    "apps",
    "batch",
    "coordination.k8s.io",
    "events.k8s.io",
    "apiextensions.k8s.io",
];

const AGGREGATED: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";

pub(super) fn all() -> Vec<Scenario> {
    let mut s = Scenario::new(
        "discovery",
        "version, legacy and aggregated discovery of the groups rebound uses",
    );
    s.get("version", "/version")
        .keep(Keep::Only(vec!["/body/major"]));
    s.get("api", "/api");
    s.get("core-v1", "/api/v1")
        .filter("/body/resources", "/name", CORE);
    s.get("apis", "/apis")
        .filter("/body/groups", "/name", GROUPS);
    s.get("apps", "/apis/apps");
    s.get("apps-v1", "/apis/apps/v1").filter(
        "/body/resources",
        "/name",
        &["deployments", "daemonsets", "statefulsets", "replicasets"],
    );
    s.get("coordination-v1", "/apis/coordination.k8s.io/v1");
    s.get("events-v1", "/apis/events.k8s.io/v1");
    s.get("batch-v1", "/apis/batch/v1")
        .filter("/body/resources", "/name", &["jobs"]);
    s.get("aggregated-core", "/api")
        .header("Accept", AGGREGATED)
        .filter("/body/items/*/versions/*/resources", "/resource", CORE)
        .compare_header("vary");
    s.get("aggregated-apis", "/apis")
        .header("Accept", AGGREGATED)
        .filter("/body/items", "/metadata/name", GROUPS)
        .filter(
            "/body/items/*/versions/*/resources",
            "/resource",
            &[
                "deployments",
                "daemonsets",
                "statefulsets",
                "replicasets",
                "jobs",
                "leases",
                "events",
                "customresourcedefinitions",
            ],
        );
    s.get("unknown-group", "/apis/nope.example.com/v1");
    s.get("unknown-resource", "/api/v1/nopes");
    vec![s]
}
