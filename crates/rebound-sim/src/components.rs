//! Where the real components built by `tools/real-components/build` are:
//! the Kubernetes binaries, the job operators, KWOK and helm, each set in
//! `<cache>/<set>-<key>/` (`bin/`, `manifests/<component>/`), where
//! `<key>` is the first 12 hex digits of the sha256 of the set's `go.mod`,
//! its `go.sum` and the build script, one after the other. The script and
//! this module compute the key the same way, so a change to a pin is a new
//! directory and a stale build is never used.
//!
//! The cache is `REBOUND_COMPONENTS_CACHE`, else
//! `$XDG_CACHE_HOME/rebound/components`, else `~/.cache/rebound/components`:
//! outside the work tree, shared by every checkout on the machine.

use std::path::{Path, PathBuf};

/// The environment variable naming the cache directory.
pub const CACHE_ENV: &str = "REBOUND_COMPONENTS_CACHE";

/// The script that builds the sets, relative to the project root.
pub const BUILD_SCRIPT: &str = "tools/real-components/build";

/// One Go module of `tools/real-components/`, built as one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Set {
    /// kube-apiserver, kube-controller-manager, kube-scheduler, kubelet,
    /// kubectl (k8s.io/kubernetes v1.36) and the pause binary.
    Kubernetes136,
    /// The same of v1.37.
    Kubernetes137,
    /// JobSet, Kubeflow Trainer v2, KWOK and helm.
    Operators,
    /// vc-controller-manager, vc-scheduler, vc-webhook-manager.
    Volcano,
    /// The Kubeflow training-operator v1.
    TrainingOperator,
}

impl Set {
    /// The set's directory name under `tools/real-components/`.
    pub fn name(self) -> &'static str {
        match self {
            Set::Kubernetes136 => "kubernetes-1.36",
            Set::Kubernetes137 => "kubernetes-1.37",
            Set::Operators => "operators",
            Set::Volcano => "volcano",
            Set::TrainingOperator => "training-operator",
        }
    }
}

/// Why a set cannot be used; the message says what to run.
#[derive(Debug, thiserror::Error)]
pub enum ComponentsError {
    /// The set's sources (go.mod, go.sum, the script) cannot be read.
    #[error("reading {path}: {source}")]
    Source {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The set of the current pins is not built.
    #[error(
        "the real components' set {set} is not built (no {dir}): run {script} {set} (cold: minutes; see tools/real-components/README.md)"
    )]
    NotBuilt {
        /// The set.
        set: &'static str,
        /// Where it would be.
        dir: PathBuf,
        /// The build script.
        script: String,
    },
    /// A built set lacks a file it should have.
    #[error("{path} is missing from a built set (remove {dir} and run {script} again)")]
    Missing {
        /// The file.
        path: PathBuf,
        /// The set's directory.
        dir: PathBuf,
        /// The build script.
        script: String,
    },
}

/// The cache directory (see the module doc).
pub fn cache_root() -> PathBuf {
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    if let Some(d) = env(CACHE_ENV) {
        return PathBuf::from(d);
    }
    let base = env("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| env("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| std::env::temp_dir().join("rebound-cache"));
    base.join("rebound").join("components")
}

/// The key of `set` for the project at `root`: sha256 of go.mod, go.sum
/// and the build script, first 12 hex digits.
pub fn key(root: &Path, set: Set) -> Result<String, ComponentsError> {
    let tools = root.join("tools/real-components");
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for path in [
        tools.join(set.name()).join("go.mod"),
        tools.join(set.name()).join("go.sum"),
        root.join(BUILD_SCRIPT),
    ] {
        let bytes = std::fs::read(&path).map_err(|source| ComponentsError::Source {
            path: path.clone(),
            source,
        })?;
        ctx.update(&bytes);
    }
    Ok(ctx
        .finish()
        .as_ref()
        .iter()
        .take(6)
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// The directory the current pins of `set` are built into, whether or not
/// it exists yet.
pub fn dir_for(root: &Path, set: Set) -> Result<PathBuf, ComponentsError> {
    dir_in(&cache_root(), root, set)
}

fn dir_in(cache: &Path, root: &Path, set: Set) -> Result<PathBuf, ComponentsError> {
    Ok(cache.join(format!("{}-{}", set.name(), key(root, set)?)))
}

fn script(root: &Path) -> String {
    root.join(BUILD_SCRIPT).display().to_string()
}

/// The built directory of `set`, or why there is none.
pub fn built(root: &Path, set: Set) -> Result<PathBuf, ComponentsError> {
    built_in(&cache_root(), root, set)
}

fn built_in(cache: &Path, root: &Path, set: Set) -> Result<PathBuf, ComponentsError> {
    let dir = dir_in(cache, root, set)?;
    if dir.join(".complete").is_file() {
        Ok(dir)
    } else {
        Err(ComponentsError::NotBuilt {
            set: set.name(),
            dir,
            script: script(root),
        })
    }
}

/// A program of a built set.
pub fn bin(root: &Path, set: Set, name: &str) -> Result<PathBuf, ComponentsError> {
    existing(root, built(root, set)?, Path::new("bin").join(name))
}

/// A component's manifests directory of a built set (`manifests/<component>`).
pub fn manifests(root: &Path, set: Set, component: &str) -> Result<PathBuf, ComponentsError> {
    existing(
        root,
        built(root, set)?,
        Path::new("manifests").join(component),
    )
}

fn existing(root: &Path, dir: PathBuf, rel: PathBuf) -> Result<PathBuf, ComponentsError> {
    let path = dir.join(rel);
    if path.exists() {
        Ok(path)
    } else {
        Err(ComponentsError::Missing {
            path,
            dir,
            script: script(root),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The script's key and this module's agree: `build --dir SET` prints
    /// the directory [`dir_for`] computes (the script hashes with
    /// sha256sum, this module with ring).
    #[test]
    fn the_script_and_the_test_bed_name_the_same_directory() {
        let root = Path::new(crate::PROJECT_ROOT);
        for set in [
            Set::Kubernetes136,
            Set::Kubernetes137,
            Set::Operators,
            Set::Volcano,
            Set::TrainingOperator,
        ] {
            let out = std::process::Command::new("bash")
                .arg(root.join(BUILD_SCRIPT))
                .args(["--dir", set.name()])
                .output()
                .expect("run the build script");
            assert!(out.status.success(), "{out:?}");
            let printed = String::from_utf8_lossy(&out.stdout).trim().to_string();
            assert_eq!(
                PathBuf::from(printed),
                dir_for(root, set).unwrap(),
                "{set:?}"
            );
        }
    }

    #[test]
    fn an_unbuilt_set_names_the_command_that_builds_it_and_a_built_one_is_found() {
        let root = Path::new(crate::PROJECT_ROOT);
        let cache = std::env::temp_dir().join(format!("rebound-components-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&cache);
        let err = built_in(&cache, root, Set::Volcano).unwrap_err();
        let msg = err.to_string();
        assert!(
            matches!(err, ComponentsError::NotBuilt { .. })
                && msg.contains("tools/real-components/build volcano"),
            "{msg}"
        );
        // A directory without `.complete` is a build that did not finish.
        let dir = dir_in(&cache, root, Set::Volcano).unwrap();
        std::fs::create_dir_all(dir.join("bin")).unwrap();
        assert!(built_in(&cache, root, Set::Volcano).is_err());
        std::fs::write(dir.join(".complete"), "").unwrap();
        assert_eq!(built_in(&cache, root, Set::Volcano).unwrap(), dir);
        let missing = existing(root, dir.clone(), Path::new("bin").join("vc-scheduler"));
        assert!(matches!(missing, Err(ComponentsError::Missing { .. })));
        std::fs::write(dir.join("bin/vc-scheduler"), "").unwrap();
        assert!(existing(root, dir, Path::new("bin").join("vc-scheduler")).is_ok());
        let _ = std::fs::remove_dir_all(&cache);
    }
}
