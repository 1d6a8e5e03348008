//! A real node beside the envtest control plane: containerd (Debian's,
//! with runc) and kubelet v1.36.2, registered against the process's
//! kube-apiserver under a node name of its own, running pods for real.
//!
//! The simulated kubelet decides how a wired pod restarts in place; only a
//! real kubelet shows whether v1.36 does it that way (the agent's exit
//! code triggering `RestartAllContainers`, init containers run again, the
//! startup-probe barrier holding the workers, restart counts, backoff).
//! The settings are the ones `../shared/k8s/NODE.md` found necessary on
//! these machines (cgroup v1 hybrid, no `CAP_SYS_RESOURCE`).
//!
//! Everything lives under one directory of its own (config, root, state,
//! socket, kubelet root); images are built in-process (`super::oci`) and
//! imported with `ctr`. containerd and the kubelet die with the process
//! (`PR_SET_PDEATHSIG`), but containerd's shims and the containers they
//! run are daemons: a reaper (`sh`, reading a pipe only this process
//! holds) kills every container, shim and mount of the directory when the
//! pipe closes, which is when this process ends however it ends.

use super::oci::{self, ImageSpec, LayerFile};
use super::{ControlPlane, NodeAssets};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The sandbox image containerd is configured with (NODE.md).
pub const SANDBOX_IMAGE: &str = "registry.k8s.io/pause:3.10";

/// The image of the `rebound` binary (and `/pause` as a tiny workload), as
/// pods name it: a tag other than `latest`, so the default pull policy is
/// `IfNotPresent` and nothing is pulled.
pub const REBOUND_IMAGE: &str = "rebound-e2e:e2e";

/// The label every real node carries (`rebound.dev/real-node=true`).
pub const REAL_NODE_LABEL: &str = "rebound.dev/real-node";

/// Why the real node could not start.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// A file or process operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was done.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A program the node needs is not installed.
    #[error(
        "{0} not found (install Debian's containerd, runc and containernetworking-plugins: apt-get install -y containerd runc containernetworking-plugins)"
    )]
    NotInstalled(String),
    /// An image could not be built.
    #[error("image: {0}")]
    Image(#[from] oci::OciError),
    /// `ctr` failed.
    #[error("ctr {args}: {message}")]
    Ctr {
        /// Its arguments.
        args: String,
        /// Its error output.
        message: String,
    },
    /// A process ended during start-up.
    #[error("{name} exited during start-up ({status}); last log lines:\n{log}")]
    Exited {
        /// The process.
        name: String,
        /// How it ended.
        status: String,
        /// The end of its log.
        log: String,
    },
    /// Not ready in time.
    #[error("{what} not ready within {after:?}; last log lines:\n{log}")]
    NotReady {
        /// What was awaited.
        what: String,
        /// How long.
        after: Duration,
        /// The end of the relevant log.
        log: String,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> NodeError {
    let what = what.into();
    move |source| NodeError::Io { what, source }
}

/// A running real node. Dropping it stops the kubelet and containerd and
/// lets the reaper remove containers, mounts and the directory.
pub struct RealNode {
    name: String,
    dir: PathBuf,
    socket: PathBuf,
    children: Vec<(String, Child)>,
    /// The reaper's stdin: closing it (drop, or this process's end) starts
    /// the clean-up.
    reaper: Option<ChildStdin>,
}

impl std::fmt::Debug for RealNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RealNode")
            .field("name", &self.name)
            .field("dir", &self.dir)
            .finish()
    }
}

/// An executable of this name in a `PATH` directory or one of `extra`.
fn find(name: &str, extra: &[&str]) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(extra.iter().map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// Why a real node cannot run here, or `None`: the programs Debian
/// provides and root.
pub fn missing_host_pieces() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("a real node needs root (containerd, runc, mounts)".into());
    }
    for (bin, extra) in [
        ("containerd", &[][..]),
        ("ctr", &[][..]),
        ("runc", &["/usr/sbin"][..]),
        ("ldd", &[][..]),
    ] {
        if find(bin, extra).is_none() {
            return Some(NodeError::NotInstalled(bin.into()).to_string());
        }
    }
    if !Path::new("/usr/lib/cni/bridge").is_file() {
        return Some(NodeError::NotInstalled("/usr/lib/cni/bridge".into()).to_string());
    }
    None
}

/// The images every real node gets: the sandbox image (`/pause`) and
/// [`REBOUND_IMAGE`] (`rebound` in `/usr/local/bin` with its libraries,
/// and `/pause` as a workload that runs until stopped).
pub fn images(assets: &NodeAssets, rebound: &Path) -> Result<Vec<ImageSpec>, NodeError> {
    let pause = LayerFile {
        path: "/pause".into(),
        mode: 0o755,
        source: assets.pause.clone(),
    };
    let mut files = oci::binary_with_libraries(rebound, "/usr/local/bin/rebound")?;
    files.push(pause.clone());
    Ok(vec![
        ImageSpec {
            names: vec![SANDBOX_IMAGE.into()],
            files: vec![pause],
            cmd: vec!["/pause".into()],
            env: vec![],
        },
        ImageSpec {
            names: vec![
                format!("docker.io/library/{REBOUND_IMAGE}"),
                REBOUND_IMAGE.to_string(),
            ],
            files,
            cmd: vec!["/pause".into()],
            env: vec![
                "PATH=/usr/local/bin:/usr/bin:/bin".into(),
                "LD_LIBRARY_PATH=/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu".into(),
            ],
        },
    ])
}

mod config;
pub mod measure;

impl RealNode {
    /// Starts containerd, imports `images`, starts the kubelet as node
    /// `name` against `cp` and waits until the Node is Ready (10-20 s on
    /// 2 cores). Blocking: call it from a thread that lives as long as the
    /// node should (the processes die with the thread that spawned them).
    pub fn start(
        cp: &ControlPlane,
        assets: &NodeAssets,
        name: &str,
        images: &[ImageSpec],
    ) -> Result<RealNode, NodeError> {
        RealNode::start_with_kubeconfig(cp.kubeconfig_path(), assets, name, images)
    }

    /// [`Self::start`] against the cluster of an admin kubeconfig file
    /// (a control plane owned elsewhere: `rebound sim --real-node` starts
    /// the node on a thread of its own, which cannot borrow it).
    pub fn start_with_kubeconfig(
        kubeconfig: &Path,
        assets: &NodeAssets,
        name: &str,
        images: &[ImageSpec],
    ) -> Result<RealNode, NodeError> {
        if let Some(why) = missing_host_pieces() {
            return Err(NodeError::NotInstalled(why));
        }
        config::sweep_stale(&std::env::temp_dir());
        let dir = std::env::temp_dir().join(format!(
            "rebound-envtest-{}-node-{}",
            std::process::id(),
            crate::actors::util::name_suffix()
        ));
        for d in ["cni", "state", "root", "kubelet", "logs", "images"] {
            std::fs::create_dir_all(dir.join(d)).map_err(io(format!("create {d}")))?;
        }
        let socket = dir.join("containerd.sock");
        let mut node = RealNode {
            name: name.to_string(),
            dir: dir.clone(),
            socket: socket.clone(),
            children: Vec::new(),
            reaper: None,
        };
        node.start_reaper()?;
        let write = |rel: &str, body: &str| -> Result<PathBuf, NodeError> {
            let p = dir.join(rel);
            std::fs::write(&p, body).map_err(io(format!("write {rel}")))?;
            Ok(p)
        };
        let cfg = write("containerd.toml", &config::containerd(&dir))?;
        write("cni/10-rebound.conflist", &config::cni(&dir))?;
        let mut c = Command::new("containerd");
        c.arg("--config").arg(&cfg);
        node.spawn("containerd", c)?;
        node.wait_for("containerd", Duration::from_secs(30), |n| {
            n.socket.exists() && n.ctr(&["version"]).is_ok()
        })?;
        for (i, img) in images.iter().enumerate() {
            let archive = dir.join("images").join(format!("{i}.tar"));
            oci::write_archive(img, &archive)?;
            node.ctr(&[
                "-n",
                "k8s.io",
                "images",
                "import",
                &archive.to_string_lossy(),
            ])?;
            let _ = std::fs::remove_file(&archive);
        }
        let healthz = free_port()?;
        let kcfg = write(
            "kubelet.yaml",
            &config::kubelet(&dir, &socket, free_port()?, healthz),
        )?;
        let mut c = Command::new(&assets.kubelet);
        c.arg("--config")
            .arg(&kcfg)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg(format!("--hostname-override={name}"))
            .arg(format!("--node-labels={REAL_NODE_LABEL}=true"))
            .arg("--root-dir")
            .arg(dir.join("kubelet"))
            .arg("--cert-dir")
            .arg(dir.join("kubelet/pki"))
            .arg("--v=2");
        node.spawn("kubelet", c)?;
        node.wait_for("the kubelet's healthz", Duration::from_secs(60), |_| {
            http_ok(healthz, "/healthz")
        })?;
        let client = cp_client(kubeconfig)?;
        node.wait_for("the Node Ready", Duration::from_secs(90), |n| {
            node_ready(&client, &n.name)
        })?;
        Ok(node)
    }

    /// The node's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its directory (`containerd.log`, `kubelet.log`, ...).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The tail of a process's log (`containerd`, `kubelet`), for failure
    /// messages.
    pub fn log_tail(&self, name: &str, lines: usize) -> String {
        super::tail(&self.dir.join("logs").join(format!("{name}.log")), lines)
    }

    /// Runs `ctr` against this node's containerd.
    pub fn ctr(&self, args: &[&str]) -> Result<String, NodeError> {
        let out = Command::new("ctr")
            .arg("--address")
            .arg(&self.socket)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(io("run ctr"))?;
        if !out.status.success() {
            return Err(NodeError::Ctr {
                args: args.join(" "),
                message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).to_string())
    }

    fn spawn(&mut self, name: &str, mut cmd: Command) -> Result<(), NodeError> {
        let log = std::fs::File::create(self.dir.join("logs").join(format!("{name}.log")))
            .map_err(io(format!("{name} log")))?;
        let err = log.try_clone().map_err(io(format!("{name} log")))?;
        cmd.stdin(Stdio::null()).stdout(log).stderr(err);
        super::die_with_parent(&mut cmd);
        let child = cmd.spawn().map_err(io(format!("start {name}")))?;
        self.children.push((name.to_string(), child));
        Ok(())
    }

    /// A shell that waits for its stdin to close, then kills what
    /// containerd's shims left running and removes the directory. Not
    /// tied to this process by `PR_SET_PDEATHSIG`: it must outlive it.
    fn start_reaper(&mut self) -> Result<(), NodeError> {
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg(config::REAPER)
            .arg("reaper")
            .arg(&self.dir)
            .arg(&self.socket)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        {
            use std::os::unix::process::CommandExt;
            c.process_group(0);
        }
        let mut child = c.spawn().map_err(io("start the reaper"))?;
        self.reaper = child.stdin.take();
        Ok(())
    }

    fn wait_for(
        &mut self,
        what: &str,
        within: Duration,
        ready: impl Fn(&RealNode) -> bool,
    ) -> Result<(), NodeError> {
        let start = Instant::now();
        loop {
            for (n, c) in &mut self.children {
                if let Ok(Some(status)) = c.try_wait() {
                    return Err(NodeError::Exited {
                        name: n.clone(),
                        status: status.to_string(),
                        log: super::tail(&self.dir.join("logs").join(format!("{n}.log")), 30),
                    });
                }
            }
            if ready(self) {
                return Ok(());
            }
            if start.elapsed() > within {
                let last = self
                    .children
                    .last()
                    .map(|(n, _)| n.clone())
                    .unwrap_or_default();
                return Err(NodeError::NotReady {
                    what: what.to_string(),
                    after: within,
                    log: self.log_tail(&last, 30),
                });
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Stops the kubelet, then containerd, and starts the reaper's clean-up.
    pub fn stop(&mut self) {
        for (_, c) in self.children.iter_mut().rev() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.children.clear();
        self.reaper = None;
    }
}

impl Drop for RealNode {
    fn drop(&mut self) {
        self.stop();
    }
}

fn free_port() -> Result<u16, NodeError> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(io("bind a free port"))?;
    Ok(l.local_addr().map_err(io("local address"))?.port())
}

/// A plain-HTTP `GET` on loopback answered 200.
fn http_ok(port: u16, path: &str) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
        .is_err()
    {
        return false;
    }
    let mut buf = String::new();
    let _ = s.read_to_string(&mut buf);
    buf.starts_with("HTTP/1.1 200") || buf.starts_with("HTTP/1.0 200")
}

/// A small runtime and an admin client, for start-up checks made from a
/// plain thread.
struct CpClient {
    rt: tokio::runtime::Runtime,
    client: kube::Client,
}

fn cp_client(kubeconfig: &Path) -> Result<CpClient, NodeError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(io("a runtime for start-up checks"))?;
    let client = rt
        .block_on(async {
            let kc = kube::config::Kubeconfig::read_from(kubeconfig).map_err(|e| e.to_string())?;
            let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .map_err(|e| e.to_string())?;
            kube::Client::try_from(cfg).map_err(|e| e.to_string())
        })
        .map_err(|e| NodeError::Io {
            what: "an API client".into(),
            source: std::io::Error::other(e),
        })?;
    Ok(CpClient { rt, client })
}

fn node_ready(c: &CpClient, name: &str) -> bool {
    use k8s_openapi::api::core::v1::Node;
    let api: kube::Api<Node> = kube::Api::all(c.client.clone());
    c.rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(3), api.get_opt(name))
            .await
            .ok()
            .and_then(Result::ok)
            .flatten()
    })
    .and_then(|n| n.status)
    .and_then(|s| s.conditions)
    .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The real node of this process, beside [`super::shared`]'s control
/// plane, started on first use (the images hold `rebound`, the binary at
/// the path given first) on a keeper thread that lives until the process
/// exits. An error says why there is none; whether that skips or fails a
/// test is the caller's choice (see [`super::REQUIRE_ENV`]).
pub fn shared_node(rebound: &Path) -> Result<&'static RealNode, String> {
    static NODE: OnceLock<Result<RealNode, String>> = OnceLock::new();
    let rebound = rebound.to_owned();
    let r = NODE.get_or_init(move || {
        if let Some(why) = missing_host_pieces() {
            return Err(why);
        }
        let cp = super::shared()?;
        let assets = super::resolve_node_assets(Path::new(crate::PROJECT_ROOT))
            .map_err(|e| e.to_string())?;
        let images = images(&assets, &rebound).map_err(|e| e.to_string())?;
        super::on_keeper_thread("real-node-keeper", move || {
            let name = format!("real-{}", crate::actors::util::name_suffix());
            RealNode::start(cp, &assets, &name, &images).map_err(|e| e.to_string())
        })
    });
    r.as_ref().map_err(Clone::clone)
}
