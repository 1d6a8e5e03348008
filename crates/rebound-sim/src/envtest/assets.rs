//! Where the real control plane's binaries come from, decided in one place:
//! `REBOUND_TEST_ASSETS` when set (a directory holding them); else the
//! Kubernetes set that `tools/real-components/build` made from the
//! `k8s.io/kubernetes` Go module ([`crate::components`]). etcd comes from
//! the assets directory or `PATH` (Debian's `etcd-server`).

use crate::components::{self, ComponentsError, Set};
use std::path::{Path, PathBuf};

/// The binaries the control plane needs, found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assets {
    /// Directory of `kube-apiserver`, `kube-controller-manager` (and
    /// `kubectl`, `kube-scheduler`, `kubelet`, `pause` when there).
    pub dir: PathBuf,
    /// The etcd binary.
    pub etcd: PathBuf,
}

/// Why no real control plane can be started; the message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum AssetsError {
    /// `REBOUND_TEST_ASSETS` is unset and the components are not built.
    #[error("no control-plane binaries ({ASSETS_ENV} is unset): {0}", ASSETS_ENV = super::ASSETS_ENV)]
    Components(#[from] ComponentsError),
    /// The named directory lacks a binary.
    #[error("{name} is not in {dir}")]
    Missing {
        /// The binary.
        name: String,
        /// Where it was looked for.
        dir: PathBuf,
    },
    /// No etcd binary in the assets directory or on `PATH`.
    #[error(
        "etcd is neither in {dir} nor on PATH (install Debian's etcd-server: apt-get install -y etcd-server)"
    )]
    NoEtcd {
        /// The assets directory.
        dir: PathBuf,
    },
}

/// The directory of the Kubernetes binaries: `REBOUND_TEST_ASSETS` when
/// set, else the built Kubernetes set's `bin/`.
fn binaries_dir(project_root: &Path) -> Result<PathBuf, AssetsError> {
    match std::env::var_os(super::ASSETS_ENV).filter(|v| !v.is_empty()) {
        Some(d) => Ok(PathBuf::from(d)),
        None => Ok(components::built(project_root, Set::Kubernetes136)?.join("bin")),
    }
}

/// Finds the control plane's binaries for the project at `project_root`
/// (see the module doc).
pub fn resolve_assets(project_root: &Path) -> Result<Assets, AssetsError> {
    let dir = binaries_dir(project_root)?;
    for name in ["kube-apiserver", "kube-controller-manager"] {
        in_dir(&dir, name)?;
    }
    let etcd = match dir.join("etcd") {
        local if local.is_file() => local,
        _ => on_path("etcd").ok_or_else(|| AssetsError::NoEtcd { dir: dir.clone() })?,
    };
    Ok(Assets { dir, etcd })
}

fn in_dir(dir: &Path, name: &str) -> Result<PathBuf, AssetsError> {
    let path = dir.join(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(AssetsError::Missing {
            name: name.into(),
            dir: dir.to_owned(),
        })
    }
}

/// An executable of this name in a `PATH` directory.
fn on_path(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// The binaries a real node needs beside the control plane's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeAssets {
    /// The kubelet of the Kubernetes set.
    pub kubelet: PathBuf,
    /// The static `pause` binary, the sandbox image's only file.
    pub pause: PathBuf,
}

/// `kubelet` and `pause` in `dir` (what `rebound sim --assets DIR
/// --real-node` runs), or which one is missing.
pub fn node_assets_in(dir: &Path) -> Result<NodeAssets, AssetsError> {
    Ok(NodeAssets {
        kubelet: in_dir(dir, "kubelet")?,
        pause: in_dir(dir, "pause")?,
    })
}

/// Finds `kubelet` and `pause` for the project at `project_root`, where
/// [`resolve_assets`] finds the control plane.
pub fn resolve_node_assets(project_root: &Path) -> Result<NodeAssets, AssetsError> {
    node_assets_in(&binaries_dir(project_root)?)
}

/// Finds `kube-scheduler` for the project at `project_root`, where
/// [`resolve_assets`] finds the control plane.
pub fn resolve_scheduler(project_root: &Path) -> Result<PathBuf, AssetsError> {
    in_dir(&binaries_dir(project_root)?, "kube-scheduler")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_without_the_api_server_is_refused_by_name() {
        let dir = std::env::temp_dir().join(format!("rebound-assets-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("kubelet"), "").unwrap();
        let err = node_assets_in(&dir).unwrap_err();
        assert!(
            matches!(&err, AssetsError::Missing { name, .. } if name == "pause"),
            "{err}"
        );
        std::fs::write(dir.join("pause"), "").unwrap();
        let node = node_assets_in(&dir).unwrap();
        assert_eq!(node.pause, dir.join("pause"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
