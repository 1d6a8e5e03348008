use std::convert::Infallible;
use std::time::{Duration, SystemTime};

use super::*;
use crate::agent::fault::{Accelerator, AgentFault, SOURCE_NVIDIA_XID};
use crate::agent::state::{FoldConfig, FoldState};
use crate::fault::wire::{MAX_PODS, parse_condition_message};

const UUID0: &str = "GPU-11111111-2222-3333-4444-555555555555";
const UUID1: &str = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";

fn pod(ns: &str, name: &str, devices: &[(&str, &[&str])]) -> PodResources {
    PodResources {
        name: name.into(),
        namespace: ns.into(),
        containers: vec![ContainerResources {
            name: "main".into(),
            devices: devices
                .iter()
                .map(|(r, ids)| ContainerDevices {
                    resource_name: (*r).into(),
                    device_ids: ids.iter().map(|s| (*s).to_string()).collect(),
                })
                .collect(),
            dynamic_resources: Vec::new(),
        }],
    }
}

fn response() -> ListPodResourcesResponse {
    let mut dra = pod("team-d", "dra", &[]);
    dra.containers[0].dynamic_resources = vec![DynamicResource {
        claim_name: "gpu".into(),
        claim_namespace: "team-d".into(),
        claim_resources: vec![ClaimResource {
            driver_name: "gpu.nvidia.com".into(),
            pool_name: "node-1".into(),
            device_name: UUID0.into(),
            share_id: None,
        }],
    }];
    ListPodResourcesResponse {
        pod_resources: vec![
            pod(
                "team-b",
                "trainer-0",
                &[("nvidia.com/gpu", &[UUID0, UUID1])],
            ),
            pod("team-a", "trainer-1", &[("nvidia.com/gpu", &[UUID1])]),
            pod(
                "team-a",
                "shared",
                &[("nvidia.com/gpu.shared", &[&format!("{UUID0}::3")])],
            ),
            // Another vendor numbering its devices like indices.
            pod("team-c", "nic", &[("example.com/rdma", &["0", UUID0])]),
            pod("team-c", "by-index", &[("nvidia.com/gpu", &["0"])]),
            pod("team-c", "mig", &[("nvidia.com/gpu", &["0:1"])]),
            pod("team-c", "index-10", &[("nvidia.com/gpu", &["10"])]),
            dra,
        ],
    }
}

#[test]
fn holders_match_uuids_indices_replicas_under_nvidia_resources_only() {
    let ids = vec!["0".to_string(), UUID0.to_string()];
    assert_eq!(
        holders(&response(), &ids),
        [
            "team-a/shared",
            "team-b/trainer-0",
            "team-c/by-index",
            "team-c/mig"
        ]
    );
    assert_eq!(
        holders(&response(), &[UUID1.to_string()]),
        ["team-a/trainer-1", "team-b/trainer-0"]
    );
    assert!(holders(&response(), &[]).is_empty());
    assert!(holders(&response(), &[String::new()]).is_empty());
    assert!(holders(&response(), &["GPU-1111".to_string()]).is_empty());
}

#[test]
fn holders_are_bounded_and_distinct() {
    let pods = (0..MAX_PODS + 10)
        .map(|i| pod("ns", &format!("p{i:03}"), &[("nvidia.com/gpu", &[UUID0])]))
        .chain([pod("ns", "p000", &[("nvidia.com/gpu", &[UUID0])])])
        .collect();
    let list = ListPodResourcesResponse {
        pod_resources: pods,
    };
    let h = holders(&list, &[UUID0.to_string()]);
    assert_eq!(h.len(), MAX_PODS);
    assert_eq!(h[0], "ns/p000");
    assert_eq!(h[1], "ns/p001");
}

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "rebound-podres-{tag}-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("mkdir");
    d
}

#[test]
fn gpu_table_names_a_device_by_index_and_uuid() {
    let dir = temp_dir("proc");
    for (addr, uuid) in [("0000:9b:00.0", UUID1), ("0000:1b:00.0", UUID0)] {
        std::fs::create_dir_all(dir.join(addr)).expect("mkdir");
        std::fs::write(
            dir.join(addr).join("information"),
            format!(
                "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 0\nGPU UUID: \t {uuid}\n\
                 Video BIOS: \t 96.00.74.00.01\nBus Location: \t {addr}\nDevice Minor: \t 7\n"
            ),
        )
        .expect("write");
    }
    let t = GpuTable::from_proc_dir(&dir, &DeviceMap::default());
    assert_eq!(t.ids("0"), ["0", UUID0]);
    assert_eq!(t.ids("1"), ["1", UUID1]);
    assert_eq!(t.ids("0000:9b:00.0"), ["1", UUID1]);
    assert_eq!(t.ids("PCI:0000:9b:00"), ["1", UUID1]);
    // An index the node does not list is still an `index` id.
    assert_eq!(t.ids("5"), ["5"]);
    assert!(t.ids("0000:77:00.0").is_empty());
    assert!(t.ids("nvswitch-3").is_empty());
    // --pci-map's indices win over proc order.
    let map = DeviceMap::parse_flag("0000:9b:00.0=0,0000:1b:00.0=1").expect("map");
    let t = GpuTable::from_proc_dir(&dir, &map);
    assert_eq!(t.ids("0"), ["0", UUID1]);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        GpuTable::from_proc_dir(&dir, &DeviceMap::default()),
        GpuTable::default()
    );
}

fn xid(device: Option<&str>) -> AgentFault {
    AgentFault {
        family: Accelerator::Gpu,
        source: SOURCE_NVIDIA_XID,
        code: "79".into(),
        device: device.map(str::to_string),
        reason: "GpuXid",
        message: String::new(),
    }
}

#[tokio::test]
async fn a_missing_socket_leaves_pods_unknown_once() {
    let dir = temp_dir("nosock");
    let mut r = PodResolver::new(
        dir.join("kubelet.sock"),
        dir.join("gpus"),
        DeviceMap::default(),
    );
    let mut state = FoldState::new(FoldConfig::default());
    let now = SystemTime::now();
    state.observe(xid(Some("0")), now, now);
    let e = r.resolve(&mut state).await.expect_err("no socket");
    assert!(matches!(e, PodResourcesError::NoSocket { .. }), "{e}");
    assert!(state.unresolved_gpu_devices().is_empty());
    // Nothing left to resolve: no call, no error.
    r.resolve(&mut state).await.expect("nothing to do");
    let c = state.condition(Accelerator::Gpu, "n");
    assert!(!c.message.contains("pods="), "{}", c.message);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The kubelet's side, for the test: `List` answered with `resp` on a
/// unix socket, by tonic's codec-level server over hyper's HTTP/2.
struct Lister(ListPodResourcesResponse);

impl tonic::server::UnaryService<ListPodResourcesRequest> for Lister {
    type Response = ListPodResourcesResponse;
    type Future = std::future::Ready<Result<tonic::Response<Self::Response>, tonic::Status>>;
    fn call(&mut self, _: tonic::Request<ListPodResourcesRequest>) -> Self::Future {
        std::future::ready(Ok(tonic::Response::new(self.0.clone())))
    }
}

async fn serve(socket: &Path, resp: ListPodResourcesResponse) -> tokio::task::JoinHandle<()> {
    let listener = tokio::net::UnixListener::bind(socket).expect("bind");
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let resp = resp.clone();
            tokio::spawn(async move {
                let svc =
                    hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let resp = resp.clone();
                        async move {
                            let reply = if req.uri().path() == LIST_PATH {
                                let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::<
                                    ListPodResourcesResponse,
                                    ListPodResourcesRequest,
                                >::default(
                                ));
                                grpc.unary(Lister(resp), req).await
                            } else {
                                tonic::Status::unimplemented("not List").into_http()
                            };
                            Ok::<_, Infallible>(reply)
                        }
                    });
                let _ =
                    hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
            });
        }
    })
}

#[tokio::test]
async fn the_client_decodes_a_real_grpc_answer() {
    let dir = temp_dir("grpc");
    let socket = dir.join("kubelet.sock");
    let server = serve(&socket, response()).await;
    let got = list(&socket, TIMEOUT).await.expect("List answers");
    assert_eq!(got, response());
    assert_eq!(
        got.pod_resources[7].containers[0].dynamic_resources[0].claim_resources[0].device_name,
        UUID0
    );

    // One List fills every new fault naming a device; a fault without a
    // device, or on a GPU nobody holds, gets no pods.
    let mut r = PodResolver::new(socket.clone(), dir.join("gpus"), DeviceMap::default());
    let mut state = FoldState::new(FoldConfig::default());
    let now = SystemTime::now();
    state.observe(xid(Some("0")), now, now);
    state.observe(xid(Some("3")), now + Duration::from_millis(1), now);
    state.observe(xid(None), now + Duration::from_millis(2), now);
    r.resolve(&mut state).await.expect("resolves");
    let c = state.condition(Accelerator::Gpu, "n");
    let lines: Vec<_> = parse_condition_message(&c.message)
        .into_iter()
        .map(|l| l.expect("parses"))
        .collect();
    let pods_of = |d: Option<&str>| {
        lines
            .iter()
            .find(|w| w.device.as_deref() == d)
            .expect("line")
            .pods
            .clone()
    };
    // No proc directory: GPU 0 is matched by its index id only.
    assert_eq!(
        pods_of(Some("0")),
        Some(vec![
            "team-c/by-index".to_string(),
            "team-c/mig".to_string()
        ])
    );
    assert_eq!(pods_of(Some("3")), None);
    assert_eq!(pods_of(None), None);
    server.abort();
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_silent_kubelet_times_out() {
    let dir = temp_dir("silent");
    let socket = dir.join("kubelet.sock");
    // Accepts, never speaks HTTP/2.
    let listener = tokio::net::UnixListener::bind(&socket).expect("bind");
    let hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
        }
    });
    let e = list(&socket, Duration::from_millis(200))
        .await
        .expect_err("times out");
    assert!(matches!(e, PodResourcesError::Timeout { .. }), "{e}");
    hold.abort();
    let _ = std::fs::remove_dir_all(&dir);
}
