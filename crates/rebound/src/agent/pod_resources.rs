//! Which pods hold a GPU, from the kubelet's PodResources API.
//!
//! Under a device plugin (NVIDIA's k8s-device-plugin, `nvidia.com/gpu`)
//! only the kubelet knows which pod was given which GPU. It serves that on
//! a unix socket (`/var/lib/kubelet/pod-resources/kubelet.sock`), gRPC
//! service `v1.PodResourcesLister`, method `List`. The agent calls `List`
//! once per report that has a new GPU fault naming a device, and writes the
//! holders into the fault's `pods=` ([`crate::fault::wire::WireFault::pods`]);
//! the controller scopes a trusted fault to those pods' jobs.
//!
//! The messages are written by hand from the kubelet's `api.proto`
//! (`k8s.io/kubelet/pkg/apis/podresources/v1`), with only the fields read
//! here: protobuf skips the others (memory, CPU ids, topology, CDI
//! devices). No protoc, no build script.
//!
//! Device ids: NVIDIA's device plugin names a GPU by its UUID
//! (`--device-id-strategy=uuid`, the default) or its index (`index`), and
//! with time-slicing by `<id>::<replica>`. [`GpuTable`] turns the agent's
//! device name (index or PCI address) into both. DRA claims
//! (`dynamic_resources`) are not read here: the controller resolves them
//! from the ResourceClaims themselves.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;

use super::pci::{DeviceMap, PciAddr};
use crate::fault::wire::clean_pods;

/// Where the kubelet serves the PodResources API.
pub const DEFAULT_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";
/// How long one `List` may take, connecting included.
pub const TIMEOUT: Duration = Duration::from_secs(2);
/// Largest response read: the kubelet's own client allows 16 MiB (tonic's
/// default of 4 MiB is short on a node with many pods).
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;
/// Resources whose devices are GPUs of NVIDIA's device plugin:
/// `nvidia.com/gpu`, its time-sliced `nvidia.com/gpu.shared` and renamed
/// resources. Other vendors' plugins may number their devices `0`, `1`,
/// ... too, so an index is only matched under this prefix.
pub const GPU_RESOURCE_PREFIX: &str = "nvidia.com/";
/// The gRPC method called.
pub const LIST_PATH: &str = "/v1.PodResourcesLister/List";

/// `ListPodResourcesRequest {}`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListPodResourcesRequest {}

/// `ListPodResourcesResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListPodResourcesResponse {
    /// Every pod the kubelet runs that holds resources.
    #[prost(message, repeated, tag = "1")]
    pub pod_resources: Vec<PodResources>,
}

/// `PodResources`: one pod.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodResources {
    /// Pod name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Pod namespace.
    #[prost(string, tag = "2")]
    pub namespace: String,
    /// Its containers.
    #[prost(message, repeated, tag = "3")]
    pub containers: Vec<ContainerResources>,
}

/// `ContainerResources`: one container's devices (memory, CPU ids not read).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerResources {
    /// Container name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Device-plugin devices, by resource.
    #[prost(message, repeated, tag = "2")]
    pub devices: Vec<ContainerDevices>,
    /// DRA claims (decoded, never matched here).
    #[prost(message, repeated, tag = "5")]
    pub dynamic_resources: Vec<DynamicResource>,
}

/// `ContainerDevices`: the devices of one resource (topology not read).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerDevices {
    /// E.g. `nvidia.com/gpu`.
    #[prost(string, tag = "1")]
    pub resource_name: String,
    /// The device plugin's ids: GPU UUIDs or indices.
    #[prost(string, repeated, tag = "2")]
    pub device_ids: Vec<String>,
}

/// `DynamicResource`: one DRA claim of a container.
#[derive(Clone, PartialEq, prost::Message)]
pub struct DynamicResource {
    /// Claim name.
    #[prost(string, tag = "2")]
    pub claim_name: String,
    /// Claim namespace.
    #[prost(string, tag = "3")]
    pub claim_namespace: String,
    /// What it was given.
    #[prost(message, repeated, tag = "4")]
    pub claim_resources: Vec<ClaimResource>,
}

/// `ClaimResource` (CDI devices not read).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ClaimResource {
    /// DRA driver.
    #[prost(string, tag = "2")]
    pub driver_name: String,
    /// Pool.
    #[prost(string, tag = "3")]
    pub pool_name: String,
    /// Device within the pool.
    #[prost(string, tag = "4")]
    pub device_name: String,
    /// Share of a shared device.
    #[prost(string, optional, tag = "5")]
    pub share_id: Option<String>,
}

/// Why `List` gave nothing.
#[derive(Debug, thiserror::Error)]
pub enum PodResourcesError {
    /// No socket: not mounted, or the kubelet keeps its state elsewhere.
    #[error("no kubelet PodResources socket at {path}")]
    NoSocket {
        /// The socket.
        path: PathBuf,
    },
    /// The gRPC channel could not be set up.
    #[error("connecting to {path}: {source}")]
    Connect {
        /// The socket.
        path: PathBuf,
        /// Why.
        source: tonic::transport::Error,
    },
    /// The kubelet answered with an error (or the answer did not decode).
    #[error("{LIST_PATH} on {path}: {source}")]
    Call {
        /// The socket.
        path: PathBuf,
        /// The gRPC status (boxed: it is large).
        source: Box<tonic::Status>,
    },
    /// No answer in time.
    #[error("{LIST_PATH} on {path}: no answer within {timeout:?}")]
    Timeout {
        /// The socket.
        path: PathBuf,
        /// The limit.
        timeout: Duration,
    },
}

/// Call `List` on the kubelet's socket, within `timeout` (connecting
/// included). A new connection each time: calls are rare (a new GPU fault),
/// and a kubelet restart must not leave a dead channel behind.
pub async fn list(
    socket: &Path,
    timeout: Duration,
) -> Result<ListPodResourcesResponse, PodResourcesError> {
    match tokio::time::timeout(timeout, list_untimed(socket)).await {
        Ok(r) => r,
        Err(_) => Err(PodResourcesError::Timeout {
            path: socket.to_path_buf(),
            timeout,
        }),
    }
}

async fn list_untimed(socket: &Path) -> Result<ListPodResourcesResponse, PodResourcesError> {
    if !socket.exists() {
        return Err(PodResourcesError::NoSocket {
            path: socket.to_path_buf(),
        });
    }
    let path = socket.to_path_buf();
    let connect_to = path.clone();
    // The URI is not used to connect (the connector dials the socket); it
    // only has to be valid, and names the `:authority` sent.
    let channel = tonic::transport::Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_: http::Uri| {
            let p = connect_to.clone();
            async move { UnixStream::connect(p).await.map(TokioIo::new) }
        }))
        .await
        .map_err(|source| PodResourcesError::Connect {
            path: path.clone(),
            source,
        })?;
    let mut grpc = tonic::client::Grpc::new(channel).max_decoding_message_size(MAX_MESSAGE_BYTES);
    let call = |source: tonic::Status| PodResourcesError::Call {
        path: path.clone(),
        source: Box::new(source),
    };
    grpc.ready()
        .await
        .map_err(|e| call(tonic::Status::unavailable(e.to_string())))?;
    let codec =
        tonic_prost::ProstCodec::<ListPodResourcesRequest, ListPodResourcesResponse>::default();
    let resp = grpc
        .unary(
            tonic::Request::new(ListPodResourcesRequest {}),
            http::uri::PathAndQuery::from_static(LIST_PATH),
            codec,
        )
        .await
        .map_err(call)?;
    Ok(resp.into_inner())
}

/// Whether the device plugin's id `have` is the GPU id `want` or part of
/// it: equal, a time-slicing replica (`<want>::<n>`), or a MIG instance
/// under the `index` strategy (`<index>:<mig>`).
fn same_device(have: &str, want: &str) -> bool {
    !want.is_empty()
        && have
            .strip_prefix(want)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(':'))
}

/// The pods (`namespace/name`, sorted, at most
/// [`crate::fault::wire::MAX_PODS`]) with a container holding one of a
/// GPU's `ids` under a resource named [`GPU_RESOURCE_PREFIX`]`*`. DRA
/// claims are not matched (the controller resolves those).
pub fn holders(list: &ListPodResourcesResponse, ids: &[String]) -> Vec<String> {
    let mut out: Vec<String> = list
        .pod_resources
        .iter()
        .filter(|p| {
            p.containers.iter().any(|c| {
                c.devices.iter().any(|d| {
                    d.resource_name.starts_with(GPU_RESOURCE_PREFIX)
                        && d.device_ids
                            .iter()
                            .any(|have| ids.iter().any(|want| same_device(have, want)))
                })
            })
        })
        .map(|p| format!("{}/{}", p.namespace, p.name))
        .collect();
    out.sort();
    out.dedup();
    clean_pods(out)
}

/// One GPU as the driver's proc directory describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuIdentity {
    /// Index as NVML and `nvidia-smi -i` count (the device plugin's
    /// `index` ids).
    pub index: u32,
    /// PCI address.
    pub pci: PciAddr,
    /// `GPU-…` UUID (the device plugin's default ids), when the driver
    /// says it.
    pub uuid: Option<String>,
}

/// This node's GPUs: index, PCI address and UUID of each.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GpuTable {
    gpus: Vec<GpuIdentity>,
}

impl GpuTable {
    /// Read `<dir>/<pci address>/information` (its `GPU UUID:` line); the
    /// index is `map`'s (the agent's `--pci-map` or proc order), else the
    /// position in PCI-address order. A missing directory is an empty table.
    pub fn from_proc_dir(dir: &Path, map: &DeviceMap) -> Self {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return Self::default();
        };
        let mut addrs: Vec<(PciAddr, PathBuf)> = rd
            .filter_map(Result::ok)
            .filter_map(|e| {
                PciAddr::parse(&e.file_name().to_string_lossy())
                    .ok()
                    .map(|a| (a, e.path()))
            })
            .collect();
        addrs.sort();
        addrs.dedup_by(|a, b| a.0 == b.0);
        let gpus = addrs
            .into_iter()
            .enumerate()
            .map(|(i, (pci, path))| GpuIdentity {
                index: map
                    .index(&pci)
                    .unwrap_or(u32::try_from(i).unwrap_or(u32::MAX)),
                pci,
                uuid: std::fs::read_to_string(path.join("information"))
                    .ok()
                    .and_then(|t| uuid_of(&t)),
            })
            .collect();
        GpuTable { gpus }
    }

    /// A table of given GPUs.
    pub fn new(gpus: Vec<GpuIdentity>) -> Self {
        GpuTable { gpus }
    }

    /// The device plugin ids a fault's `device` (index or PCI address) may
    /// have: its index and UUID. An index the table does not know is still
    /// its own id (the `index` strategy); anything else (a switch name, an
    /// unknown address) has none.
    pub fn ids(&self, device: &str) -> Vec<String> {
        let device = device.trim();
        let gpu = if let Ok(i) = device.parse::<u32>() {
            match self.gpus.iter().find(|g| g.index == i) {
                Some(g) => g,
                None => return vec![i.to_string()],
            }
        } else if let Ok(a) = PciAddr::parse(device) {
            let same = |g: &&GpuIdentity| {
                (g.pci.domain, g.pci.bus, g.pci.device) == (a.domain, a.bus, a.device)
            };
            match self.gpus.iter().find(same) {
                Some(g) => g,
                None => return Vec::new(),
            }
        } else {
            return Vec::new();
        };
        let mut ids = vec![gpu.index.to_string()];
        ids.extend(gpu.uuid.clone());
        ids
    }
}

/// The `GPU UUID:` of a proc `information` file.
fn uuid_of(information: &str) -> Option<String> {
    information.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        let v = v.trim();
        (k.trim() == "GPU UUID" && v.starts_with("GPU-")).then(|| v.to_string())
    })
}

/// Fills the `pods` of new GPU faults: one `List` per report, best effort.
#[derive(Clone, Debug)]
pub struct PodResolver {
    /// The kubelet's socket.
    pub socket: PathBuf,
    /// The driver's proc directory (for UUIDs).
    pub proc_dir: PathBuf,
    /// PCI address → index, as the agent names devices.
    pub map: DeviceMap,
    /// Limit of one `List`.
    pub timeout: Duration,
    /// Whether the last call failed (warn once per failing streak).
    failing: bool,
}

impl PodResolver {
    /// A resolver asking `socket`, naming GPUs as `map` does.
    pub fn new(socket: PathBuf, proc_dir: PathBuf, map: DeviceMap) -> Self {
        PodResolver {
            socket,
            proc_dir,
            map,
            timeout: TIMEOUT,
            failing: false,
        }
    }

    /// Resolve the holders of every active GPU fault not resolved yet
    /// (one `List` for all of them). On error, logs (a warning when it
    /// starts failing), returns it, and those faults keep no pods: each
    /// fault is resolved once, when first reported, so that its line does
    /// not change after the controller read it.
    pub async fn resolve(
        &mut self,
        state: &mut super::state::FoldState,
    ) -> Result<(), PodResourcesError> {
        let devices = state.unresolved_gpu_devices();
        if devices.is_empty() {
            return Ok(());
        }
        match list(&self.socket, self.timeout).await {
            Ok(resp) => {
                if self.failing {
                    tracing::info!(socket = %self.socket.display(), "kubelet PodResources API answers again");
                }
                self.failing = false;
                let table = GpuTable::from_proc_dir(&self.proc_dir, &self.map);
                state.resolve_pods(|device| Some(holders(&resp, &table.ids(device))));
                Ok(())
            }
            Err(e) => {
                if !self.failing {
                    tracing::warn!(error = %e, "cannot tell which pods hold the faulty GPUs (kubelet PodResources API); faults are reported without pods");
                } else {
                    tracing::debug!(error = %e, "kubelet PodResources API still failing");
                }
                self.failing = true;
                state.resolve_pods(|_| None);
                Err(e)
            }
        }
    }
}

#[cfg(test)]
#[path = "pod_resources_tests.rs"]
mod tests;
