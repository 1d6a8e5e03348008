//! The real node's configuration files, with the settings
//! `../shared/k8s/NODE.md` found necessary here (each one was needed).

use std::path::Path;
use std::process::{Command, Stdio};

/// containerd's own config: its root, state, socket and CNI under `dir`,
/// the CRI's sandbox image and `restrict_oom_score_adj` (without it runc
/// fails: this root lacks `CAP_SYS_RESOURCE`), runc (`io.containerd.runc.v2`)
/// with its state under `dir` (the reaper finds the containers there), and
/// the CRI's streaming server on a random loopback port.
pub(super) fn containerd(dir: &Path) -> String {
    let d = dir.display();
    format!(
        r#"version = 2
root = "{d}/root"
state = "{d}/state"
[grpc]
  address = "{d}/containerd.sock"
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{sandbox}"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "/usr/sbin/runc"
        Root = "{d}/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{d}/cni"
"#,
        sandbox = super::SANDBOX_IMAGE
    )
}

/// A bridge + host-local network: it makes the runtime's network Ready
/// (the node is not Ready without one); the tests' pods use the host's
/// network and never call it.
pub(super) fn cni(dir: &Path) -> String {
    serde_json::json!({
        "cniVersion": "0.4.0",
        "name": "rebound",
        "plugins": [{
            "type": "bridge",
            "bridge": "rb-cni0",
            "isGateway": true,
            "ipMasq": false,
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": "10.88.0.0/16"}]],
                "dataDir": dir.join("cni-ipam"),
            },
        }],
    })
    .to_string()
}

/// The KubeletConfiguration: cgroup v1 allowed, cgroupfs without per-QoS
/// cgroups or node-allocatable enforcement, no swap check, no eviction or
/// local-storage isolation (the machine is shared), loopback only with
/// anonymous, always-allowed access (tests only), logs under `dir`.
pub(super) fn kubelet(dir: &Path, socket: &Path, port: u16, healthz: u16) -> String {
    format!(
        r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: {port}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: {healthz}
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
containerRuntimeEndpoint: unix://{socket}
authentication:
  anonymous: {{enabled: true}}
  webhook: {{enabled: false}}
authorization: {{mode: AlwaysAllow}}
evictionHard: {{}}
localStorageCapacityIsolation: false
podLogsDir: {logs}
serializeImagePulls: false
clusterDomain: cluster.local
"#,
        socket = socket.display(),
        logs = dir.join("logs/pods").display(),
    )
}

/// The reaper (`sh -c REAPER reaper DIR SOCKET`): waits until its stdin
/// closes, then deletes every runc container under `DIR/runc`, kills the
/// containerd shims of `SOCKET`, unmounts everything under `DIR` and
/// removes it.
pub(super) const REAPER: &str = r#"
cat >/dev/null
sleep 1
for root in "$1"/runc/*/; do
  [ -d "$root" ] || continue
  for id in $(runc --root "$root" list -q 2>/dev/null); do
    runc --root "$root" delete -f "$id" >/dev/null 2>&1
  done
done
for p in /proc/[0-9]*; do
  pid=${p#/proc/}
  [ "$pid" = "$$" ] && continue
  c=$(tr '\0' ' ' < "$p/cmdline" 2>/dev/null)
  case "$c" in
    *containerd-shim-runc-v2\ *" -address $2 "*) kill -9 "$pid" 2>/dev/null ;;
  esac
done
sleep 0.5
cut -d' ' -f2 /proc/mounts | grep -F "$1/" | sort -r | while read -r m; do
  umount -l "$m" 2>/dev/null
done
rm -rf "$1"
"#;

/// Cleans up after nodes of processes that are gone and whose reaper did
/// not finish (it was killed too): the reaper's work, run here at once.
pub(super) fn sweep_stale(base: &Path) {
    let Ok(rd) = std::fs::read_dir(base) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(pid) = name
            .strip_prefix("rebound-envtest-")
            .and_then(|r| r.split_once("-node-"))
            .and_then(|(p, _)| p.parse::<u32>().ok())
        else {
            continue;
        };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let dir = e.path();
        let _ = Command::new("sh")
            .arg("-c")
            .arg(REAPER)
            .arg("reaper")
            .arg(&dir)
            .arg(dir.join("containerd.sock"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}
