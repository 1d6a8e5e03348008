//! The table of resources the server serves: built-in kinds and the ones
//! registered by CustomResourceDefinitions. Each entry carries the
//! behaviour flags that differ between kinds on a real server (status
//! subresource, PUT without resourceVersion, what DELETE returns...).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

/// What happens to `status` in a create request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusOnCreate {
    /// Status is stored as sent (nodes, kinds without a status subresource).
    Keep,
    /// Status is dropped (custom resources with `/status`, Jobs, Deployments).
    Drop,
    /// Status is reset to `{phase: Pending}` (pods).
    PodPending,
}

/// Paths of the `/scale` subresource of a custom resource.
#[derive(Debug, Clone)]
pub struct ScalePaths {
    /// e.g. `.spec.replicas`.
    pub spec_replicas: String,
    /// e.g. `.status.replicas`.
    pub status_replicas: String,
    /// e.g. `.status.labelSelector`.
    pub label_selector: Option<String>,
}

/// One served resource (all its served versions share one storage).
#[derive(Debug, Clone)]
pub struct ResourceInfo {
    /// API group, `""` for core.
    pub group: String,
    /// Served versions, storage version first.
    pub versions: Vec<String>,
    /// Plural name used in URLs.
    pub plural: String,
    /// Singular name (discovery).
    pub singular: String,
    /// Kind.
    pub kind: String,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// `kubectl` short names.
    pub short_names: Vec<String>,
    /// Categories such as `all`.
    pub categories: Vec<String>,
    /// Has a `/status` subresource.
    pub status: bool,
    /// `/scale` subresource, if any.
    pub scale: Option<ScalePaths>,
    /// Pods only: `/log` and `/eviction`.
    pub pod_extras: bool,
    /// What a create does with `status`.
    pub status_on_create: StatusOnCreate,
    /// A `/status` write also applies `metadata.labels`/`annotations` (pods, nodes).
    pub status_writes_metadata: bool,
    /// PUT without `metadata.resourceVersion` is accepted.
    pub unconditional_update: bool,
    /// DELETE returns the object rather than a `Status`.
    pub return_deleted_object: bool,
    /// `metadata.generation` is maintained.
    pub generation: bool,
    /// Defined by a CRD: no strategic merge patch, list items carry kind.
    pub custom: bool,
    /// Structural schema per version (CRDs only).
    pub schemas: BTreeMap<String, Arc<Value>>,
    /// `additionalPrinterColumns` per version (CRDs only), for tables.
    pub printer_columns: BTreeMap<String, Vec<Value>>,
    /// Name of the CRD that defined it.
    pub crd_name: Option<String>,
    /// Storage shared with another resource (`events.k8s.io` events are
    /// stored as core events and converted on the way in and out).
    pub storage_alias: Option<String>,
}

impl ResourceInfo {
    /// Registry key: `group/plural`.
    pub fn id(&self) -> String {
        key_of(&self.group, &self.plural)
    }

    /// Storage key shared by all versions (and by aliases): `group/plural`
    /// of the storing resource.
    pub fn key(&self) -> String {
        self.storage_alias.clone().unwrap_or_else(|| self.id())
    }

    /// Whether objects are converted between this resource and its storage.
    pub fn is_events_v1(&self) -> bool {
        self.group == "events.k8s.io" && self.plural == "events"
    }

    /// The `apiVersion` string for a version of this resource.
    pub fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{}", self.group, version)
        }
    }

    /// The storage (first) version.
    pub fn storage_version(&self) -> &str {
        self.versions.first().map(String::as_str).unwrap_or("v1")
    }

    /// Verbs advertised in discovery.
    pub fn verbs(&self) -> Vec<&'static str> {
        vec![
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ]
    }
}

/// Storage key of a resource.
pub fn key_of(group: &str, plural: &str) -> String {
    format!("{group}/{plural}")
}

struct B(ResourceInfo);

impl B {
    fn new(group: &str, version: &str, plural: &str, kind: &str, namespaced: bool) -> Self {
        B(ResourceInfo {
            group: group.into(),
            versions: vec![version.into()],
            plural: plural.into(),
            singular: kind.to_ascii_lowercase(),
            kind: kind.into(),
            namespaced,
            short_names: vec![],
            categories: vec![],
            status: false,
            scale: None,
            pod_extras: false,
            status_on_create: StatusOnCreate::Keep,
            status_writes_metadata: false,
            unconditional_update: true,
            return_deleted_object: false,
            generation: false,
            custom: false,
            schemas: BTreeMap::new(),
            printer_columns: BTreeMap::new(),
            crd_name: None,
            storage_alias: None,
        })
    }
    fn short(mut self, s: &[&str]) -> Self {
        self.0.short_names = s.iter().map(|s| s.to_string()).collect();
        self
    }
    fn all(mut self) -> Self {
        self.0.categories = vec!["all".into()];
        self
    }
    fn status(mut self, on_create: StatusOnCreate) -> Self {
        self.0.status = true;
        self.0.status_on_create = on_create;
        self
    }
    fn scaled(mut self) -> Self {
        self.0.scale = Some(ScalePaths {
            spec_replicas: ".spec.replicas".into(),
            status_replicas: ".status.replicas".into(),
            label_selector: None,
        });
        self
    }
    fn categories(mut self, c: &[&str]) -> Self {
        self.0.categories = c.iter().map(|s| s.to_string()).collect();
        self
    }
    fn generation(mut self) -> Self {
        self.0.generation = true;
        self
    }
    fn conditional(mut self) -> Self {
        self.0.unconditional_update = false;
        self
    }
    fn returns_object(mut self) -> Self {
        self.0.return_deleted_object = true;
        self
    }
}

/// The built-in resources served without any CRD.
pub fn builtins() -> Vec<ResourceInfo> {
    use StatusOnCreate::*;
    let mut pods = B::new("", "v1", "pods", "Pod", true)
        .short(&["po"])
        .all()
        .status(PodPending)
        .returns_object()
        .generation();
    pods.0.pod_extras = true;
    pods.0.status_writes_metadata = true;
    let mut nodes = B::new("", "v1", "nodes", "Node", false)
        .short(&["no"])
        .status(Keep);
    nodes.0.status_writes_metadata = true;
    let deployments = {
        let mut d = B::new("apps", "v1", "deployments", "Deployment", true)
            .short(&["deploy"])
            .all()
            .status(Drop)
            .generation();
        d.0.scale = Some(ScalePaths {
            spec_replicas: ".spec.replicas".into(),
            status_replicas: ".status.replicas".into(),
            label_selector: None,
        });
        d
    };
    vec![
        B::new("", "v1", "namespaces", "Namespace", false)
            .short(&["ns"])
            .status(Keep)
            .returns_object()
            .0,
        nodes.0,
        pods.0,
        B::new("", "v1", "events", "Event", true).short(&["ev"]).0,
        B::new("", "v1", "configmaps", "ConfigMap", true)
            .short(&["cm"])
            .0,
        B::new("", "v1", "secrets", "Secret", true).0,
        B::new("", "v1", "serviceaccounts", "ServiceAccount", true)
            .short(&["sa"])
            .returns_object()
            .0,
        B::new("", "v1", "services", "Service", true)
            .short(&["svc"])
            .all()
            .status(Keep)
            .0,
        {
            let mut e = B::new("events.k8s.io", "v1", "events", "Event", true).short(&["ev"]);
            e.0.storage_alias = Some(key_of("", "events"));
            e.0
        },
        B::new("coordination.k8s.io", "v1", "leases", "Lease", true)
            .conditional()
            .0,
        // The controller keeps the restart agents' RoleBindings (issue
        // 28): stored, never enforced (the embedded server authorizes
        // nothing; docs/embedded-cluster.md).
        B::new(
            "rbac.authorization.k8s.io",
            "v1",
            "rolebindings",
            "RoleBinding",
            true,
        )
        .0,
        B::new(
            "rbac.authorization.k8s.io",
            "v1",
            "clusterroles",
            "ClusterRole",
            false,
        )
        .0,
        B::new("batch", "v1", "jobs", "Job", true)
            .all()
            .status(Drop)
            .generation()
            .0,
        deployments.0,
        B::new("apps", "v1", "daemonsets", "DaemonSet", true)
            .short(&["ds"])
            .all()
            .status(Drop)
            .generation()
            .0,
        B::new("apps", "v1", "statefulsets", "StatefulSet", true)
            .short(&["sts"])
            .all()
            .status(Drop)
            .generation()
            .scaled()
            .0,
        B::new("apps", "v1", "replicasets", "ReplicaSet", true)
            .short(&["rs"])
            .all()
            .status(Drop)
            .generation()
            .scaled()
            .0,
        B::new(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            false,
        )
        .short(&["crd", "crds"])
        .categories(&["api-extensions"])
        .status(Keep)
        .conditional()
        .generation()
        .0,
    ]
}

/// Lookup table from `group/plural` to the resource.
#[derive(Debug, Default, Clone)]
pub struct Registry {
    by_key: BTreeMap<String, Arc<ResourceInfo>>,
    /// Ids in the order they were first registered (discovery lists
    /// custom resources in that order, as a real server does).
    order: Vec<String>,
}

impl Registry {
    /// A registry with the built-in resources.
    pub fn with_builtins() -> Self {
        let mut r = Self::default();
        for info in builtins() {
            r.insert(info);
        }
        r
    }

    /// Adds or replaces a resource.
    pub fn insert(&mut self, info: ResourceInfo) {
        if !self.by_key.contains_key(&info.id()) {
            self.order.push(info.id());
        }
        self.by_key.insert(info.id(), Arc::new(info));
    }

    /// Removes a resource (a deleted CRD).
    pub fn remove(&mut self, group: &str, plural: &str) -> Option<Arc<ResourceInfo>> {
        let id = key_of(group, plural);
        self.order.retain(|x| *x != id);
        self.by_key.remove(&id)
    }

    /// The resource served at `group/version/plural`, if that version is served.
    pub fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceInfo>> {
        self.by_key
            .get(&key_of(group, plural))
            .filter(|r| r.versions.iter().any(|v| v == version))
            .cloned()
    }

    /// By registry key (`group/plural`).
    pub fn get(&self, id: &str) -> Option<Arc<ResourceInfo>> {
        self.by_key.get(id).cloned()
    }

    /// All resources in the order discovery lists them: built-ins by
    /// name, then custom resources as registered.
    pub fn in_discovery_order(&self) -> Vec<Arc<ResourceInfo>> {
        let mut builtin: Vec<Arc<ResourceInfo>> = self
            .by_key
            .values()
            .filter(|r| !r.custom)
            .cloned()
            .collect();
        builtin.sort_by(|a, b| a.plural.cmp(&b.plural));
        builtin.extend(
            self.order
                .iter()
                .filter_map(|id| self.by_key.get(id))
                .filter(|r| r.custom)
                .cloned(),
        );
        builtin
    }

    /// All resources.
    pub fn all(&self) -> impl Iterator<Item = &Arc<ResourceInfo>> {
        self.by_key.values()
    }

    /// Groups and their versions (core excluded), in a stable order.
    pub fn groups(&self) -> BTreeMap<String, Vec<String>> {
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for r in self.by_key.values().filter(|r| !r.group.is_empty()) {
            let vs = out.entry(r.group.clone()).or_default();
            for v in &r.versions {
                if !vs.contains(v) {
                    vs.push(v.clone());
                }
            }
        }
        out
    }
}
