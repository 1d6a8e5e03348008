//! KWOK (`sigs.k8s.io/kwok` v0.8.0, built by `tools/real-components`)
//! beside a control plane: the real controller that keeps fake nodes
//! registered and Ready (their Leases renewed) and plays the pods bound to
//! them through their lifecycle by its *stages*, so that every other
//! component (the job operators, kube-scheduler, vc-scheduler, rebound)
//! meets nodes and pods a real cluster's kubelets would report.
//!
//! The stages are KWOK's own, from the `kustomize/stage` tree of its module
//! (`components::manifests(root, Set::Operators, "kwok")`), given to the
//! controller in its configuration file (no Stage CRD):
//!
//! | stage | file | what it does |
//! |---|---|---|
//! | `node-initialize` | `stage/node/fast/node-initialize.yaml` | a node of KWOK's gets its conditions (Ready), addresses, capacity |
//! | `node-heartbeat-with-lease` | `stage/node/heartbeat-with-lease/…` | its status refreshed now and then; the Lease is renewed by KWOK every `nodeLeaseDurationSeconds / 4` |
//! | `pod-ready` | `stage/pod/fast/pod-ready.yaml` | a bound `Pending` pod becomes `Running` and `Ready`, every container running, every regular init container completed |
//! | `pod-delete` | `stage/pod/fast/pod-delete.yaml` | a pod being deleted is deleted for good (grace 0), as a kubelet confirms it once its containers stopped |
//!
//! `pod-complete` (the fast set's third pod stage) is left out: it turns
//! every running pod a `Job` owns `Succeeded` at once, where a training
//! job's workers run until they are stopped. The two pod stages get a
//! `delay` ([`PodTimes`]): how long a fresh pod takes from its binding to
//! Ready, and a deleted pod until its kubelet confirms the deletion, so the
//! pods cost what the simulated kubelet charges (`PodCosts`, measured on
//! the test bed's real node) and a run isolates the control plane's part.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::operators::probe::{Check, http_ok};
use super::process::{die_with_parent, tail};
use crate::components::{self, ComponentsError, Set};

/// The annotation KWOK's configuration selects its nodes by
/// (`manageNodesWithAnnotationSelector: kwok.x-k8s.io/node=fake`).
pub const NODE_ANNOTATION: &str = "kwok.x-k8s.io/node";

/// The label every KWOK node carries (`type: kwok`, kwokctl's node
/// template).
pub const NODE_TYPE_LABEL: (&str, &str) = ("type", "kwok");

/// KWOK's workers playing pod stages (its Deployment's configuration
/// has 4).
pub const POD_PLAY_WORKERS: u32 = 64;

/// How long KWOK may take to answer its health check.
const READY_WITHIN: Duration = Duration::from_secs(60);

/// Why KWOK could not be started.
#[derive(Debug, thiserror::Error)]
pub enum KwokError {
    /// The binary or its manifests are not built.
    #[error(transparent)]
    Components(#[from] ComponentsError),
    /// A file or process operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was done.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
    /// One of KWOK's manifests is not what this module expects.
    #[error("KWOK manifest {file}: {why}")]
    Manifest {
        /// The file.
        file: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// The controller exited during start-up.
    #[error("kwok exited during start-up ({status}); last log lines:\n{log}")]
    Exited {
        /// Its exit status.
        status: String,
        /// The end of its log.
        log: String,
    },
    /// The controller did not answer its health check in time.
    #[error("kwok not ready within {after:?} ({why}); last log lines:\n{log}")]
    NotReady {
        /// How long it was given.
        after: Duration,
        /// The last failed check.
        why: String,
        /// The end of its log.
        log: String,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> KwokError {
    let what = what.into();
    move |source| KwokError::Io { what, source }
}

/// What the pods on KWOK's nodes cost, as the two pod stages' delays.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PodTimes {
    /// Bound → Running and Ready (`pod-ready`'s delay).
    pub ready: Duration,
    /// Deletion requested → deleted for good (`pod-delete`'s delay).
    pub stop: Duration,
}

/// The running KWOK controller; dropping it stops it.
pub struct Kwok {
    child: Child,
    log: PathBuf,
    /// The stages it runs, by name, with their delays.
    pub stages: Vec<(String, Duration)>,
}

impl std::fmt::Debug for Kwok {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kwok")
            .field("log", &self.log)
            .field("stages", &self.stages)
            .finish()
    }
}

/// The delay a stage gets from the pod times.
type StageDelay = fn(&PodTimes) -> Duration;

/// The stages' files under KWOK's `kustomize` tree, and the pod times'
/// delay each gets (`None`: the file's own).
const STAGES: [(&str, Option<StageDelay>); 4] = [
    ("stage/node/fast/node-initialize.yaml", None),
    (
        "stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
        None,
    ),
    ("stage/pod/fast/pod-ready.yaml", Some(|t| t.ready)),
    ("stage/pod/fast/pod-delete.yaml", Some(|t| t.stop)),
];

fn read_yaml(file: &Path) -> Result<Value, KwokError> {
    let text = std::fs::read_to_string(file).map_err(io(format!("read {}", file.display())))?;
    let v: Value = serde_saphyr::from_str(&text).map_err(|e| KwokError::Manifest {
        file: file.to_owned(),
        why: e.to_string(),
    })?;
    if v.is_object() {
        Ok(v)
    } else {
        Err(KwokError::Manifest {
            file: file.to_owned(),
            why: "not one object".into(),
        })
    }
}

/// KWOK's configuration (`kustomize/kwok/kwok.yaml`, the one its
/// Deployment mounts) with the stages after it, as one multi-document
/// file; the health server on `127.0.0.1:<port>`, the Stage CRD off (the
/// stages come from the file) and [`POD_PLAY_WORKERS`] pod workers.
fn configuration(
    tree: &Path,
    port: u16,
    times: &PodTimes,
) -> Result<(String, Vec<(String, Duration)>), KwokError> {
    let mut cfg = read_yaml(&tree.join("kwok/kwok.yaml"))?;
    let opts = cfg["options"]
        .as_object_mut()
        .ok_or_else(|| KwokError::Manifest {
            file: tree.join("kwok/kwok.yaml"),
            why: "no options".into(),
        })?;
    opts.insert("enableCRDs".into(), json!([]));
    // One KWOK plays every node's pods, where a cluster has a kubelet per
    // node working in parallel: with its Deployment's 4 workers it wrote
    // 1,024 pods' Ready 27 s apart (38 a second, each patch waiting on the
    // loaded server), a spread no kubelet adds. More workers than the
    // server absorbs leave the server as the limit, as with kubelets.
    opts.insert("podPlayStageParallelism".into(), json!(POD_PLAY_WORKERS));
    opts.insert("serverAddress".into(), json!(format!("127.0.0.1:{port}")));
    opts.insert("nodePort".into(), json!(0));
    let mut docs = vec![cfg.to_string()];
    let mut stages = Vec::new();
    for (file, delay) in STAGES {
        let path = tree.join(file);
        let mut stage = read_yaml(&path)?;
        let name = stage["metadata"]["name"]
            .as_str()
            .unwrap_or(file)
            .to_owned();
        if let Some(of) = delay {
            let d = of(times);
            let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
            stage["spec"]["delay"] = json!({"durationMilliseconds": ms});
        }
        let d = stage["spec"]["delay"]["durationMilliseconds"]
            .as_u64()
            .map_or(Duration::ZERO, Duration::from_millis);
        stages.push((name, d));
        docs.push(stage.to_string());
    }
    Ok((docs.join("\n---\n"), stages))
}

impl Kwok {
    /// Starts the controller of the built set against the cluster of
    /// `kubeconfig`, its files and log in `dir`, and waits until it answers
    /// its health check. It manages only nodes annotated
    /// [`NODE_ANNOTATION`]`=fake` (see [`node`]). Blocking: call it from a
    /// thread that lives as long as KWOK should (it dies with that thread).
    pub fn start(kubeconfig: &Path, dir: &Path, times: &PodTimes) -> Result<Kwok, KwokError> {
        let root = Path::new(crate::PROJECT_ROOT);
        let bin = components::bin(root, Set::Operators, "kwok")?;
        let tree = components::manifests(root, Set::Operators, "kwok")?.join("kustomize");
        std::fs::create_dir_all(dir).map_err(io(format!("create {}", dir.display())))?;
        let port = super::process::free_port().map_err(|e| KwokError::Io {
            what: "a free port".into(),
            source: std::io::Error::other(e.to_string()),
        })?;
        let (config, stages) = configuration(&tree, port, times)?;
        let config_file = dir.join("kwok.yaml");
        std::fs::write(&config_file, config).map_err(io("write kwok.yaml"))?;
        let log = dir.join("kwok.log");
        let out = std::fs::File::create(&log).map_err(io("kwok log"))?;
        let err = out.try_clone().map_err(io("kwok log"))?;
        let mut cmd = Command::new(&bin);
        cmd.arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--config")
            .arg(&config_file)
            .args(
                std::env::var("REBOUND_KWOK_V")
                    .ok()
                    .map(|v| format!("-v={v}")),
            )
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        die_with_parent(&mut cmd);
        let child = cmd
            .spawn()
            .map_err(io(format!("start {}", bin.display())))?;
        let mut kwok = Kwok { child, log, stages };
        let start = Instant::now();
        let check = Check {
            port,
            path: "/healthz",
        };
        loop {
            if let Ok(Some(status)) = kwok.child.try_wait() {
                return Err(KwokError::Exited {
                    status: status.to_string(),
                    log: tail(&kwok.log, 30),
                });
            }
            match http_ok(&check) {
                Ok(()) => return Ok(kwok),
                Err(why) if start.elapsed() > READY_WITHIN => {
                    return Err(KwokError::NotReady {
                        after: READY_WITHIN,
                        why,
                        log: tail(&kwok.log, 30),
                    });
                }
                Err(_) => std::thread::sleep(Duration::from_millis(200)),
            }
        }
    }

    /// Where its output goes.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// Stops the controller.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Kwok {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Node `name` as kwokctl's node template (`kustomize/kwokctl/resource/
/// node.yaml`) makes it, its default parameters (32 CPUs, 256 GiB, 110
/// pods, amd64 linux): annotated for KWOK, labelled `type: kwok`, no
/// taint. The status is written after the create (`nodes/status`), as a
/// registering kubelet does; KWOK's `node-initialize` then makes it Ready.
/// Its status also declares what a v1.36 kubelet declares for the restart
/// rules (`RestartAllContainersOnContainerExits`): kube-scheduler's
/// `NodeDeclaredFeatures` filter places a pod with a `RestartAllContainers`
/// rule (the wired batch Job's and JobSet's) only on such a node.
pub fn node(name: &str) -> (Value, Value) {
    let capacity = json!({"cpu": "32", "memory": "256Gi", "pods": "110"});
    let obj = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux",
                "kubernetes.io/hostname": name, "kubernetes.io/role": "agent",
                "node-role.kubernetes.io/agent": "", NODE_TYPE_LABEL.0: NODE_TYPE_LABEL.1,
            },
        },
    });
    let status = json!({"status": {
        "capacity": capacity, "allocatable": capacity,
        "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux"},
        "declaredFeatures": ["RestartAllContainersOnContainerExits"],
    }});
    (obj, status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configuration_is_kwok_s_own_with_the_pod_stages_delayed() {
        let root = Path::new(crate::PROJECT_ROOT);
        let Ok(tree) = components::manifests(root, Set::Operators, "kwok") else {
            // The built set is checked where the real components are
            // required (the real-server tests); here only the shape.
            eprintln!("SKIPPED: KWOK's manifests are not built");
            return;
        };
        let times = PodTimes {
            ready: Duration::from_millis(1820),
            stop: Duration::from_millis(2640),
        };
        let (text, stages) = configuration(&tree.join("kustomize"), 4321, &times).unwrap();
        let docs: Vec<Value> = text
            .split("\n---\n")
            .map(|d| serde_json::from_str(d).unwrap())
            .collect();
        assert_eq!(docs[0]["kind"], "KwokConfiguration");
        assert_eq!(docs[0]["options"]["serverAddress"], "127.0.0.1:4321");
        assert_eq!(docs[0]["options"]["enableCRDs"], json!([]));
        assert_eq!(docs[0]["options"]["podPlayStageParallelism"], 64);
        assert_eq!(
            docs[0]["options"]["manageNodesWithAnnotationSelector"],
            "kwok.x-k8s.io/node=fake"
        );
        let names: Vec<&str> = stages.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "node-initialize",
                "node-heartbeat-with-lease",
                "pod-ready",
                "pod-delete"
            ]
        );
        assert_eq!(stages[2].1, times.ready);
        assert_eq!(stages[3].1, times.stop);
        assert_eq!(docs[3]["spec"]["delay"]["durationMilliseconds"], 1820);
        // No stage completes a Job's pods.
        assert!(docs.iter().all(|d| d["metadata"]["name"] != "pod-complete"));
    }

    #[test]
    fn a_node_is_kwok_s_and_declares_the_restart_rules() {
        let (n, s) = node("kwok-0");
        assert_eq!(n["metadata"]["annotations"][NODE_ANNOTATION], "fake");
        assert_eq!(n["metadata"]["labels"]["type"], "kwok");
        assert!(n.get("spec").is_none(), "no taint");
        assert_eq!(s["status"]["allocatable"]["pods"], "110");
        assert_eq!(
            s["status"]["declaredFeatures"][0],
            "RestartAllContainersOnContainerExits"
        );
    }
}
