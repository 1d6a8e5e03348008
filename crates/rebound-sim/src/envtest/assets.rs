//! Where the real control plane's binaries come from, decided in one place:
//! `REBOUND_TEST_ASSETS` when set; else the xz-compressed binaries of
//! `../shared/k8s` beside the project, unpacked once into
//! `target/envtest-assets/` and checked against the sha256 table of that
//! folder's README (a later run re-hashes nothing while the unpacked file's
//! size and modification time are what they were when it was checked).
//! etcd comes from the assets directory or `PATH` (Debian's `etcd-server`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The binaries the control plane needs, found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assets {
    /// Directory of `kube-apiserver`, `kube-controller-manager` (and
    /// `kubectl`, when there).
    pub dir: PathBuf,
    /// The etcd binary.
    pub etcd: PathBuf,
}

/// Why no real control plane can be started; the message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum AssetsError {
    /// Neither `REBOUND_TEST_ASSETS` nor `../shared/k8s` gives the binaries.
    #[error(
        "no control-plane binaries: {ASSETS_ENV} is unset and {shared} has no kube-apiserver.xz (set {ASSETS_ENV} to a directory with kube-apiserver and kube-controller-manager)",
        ASSETS_ENV = super::ASSETS_ENV
    )]
    NoAssets {
        /// Where the unpacked copy would have come from.
        shared: PathBuf,
    },
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
    /// The README of `../shared/k8s` names no sha256 for a file.
    #[error("{readme} lists no sha256 for {name}")]
    NoChecksum {
        /// The README.
        readme: PathBuf,
        /// The file.
        name: String,
    },
    /// An unpacked binary is not the one the README describes.
    #[error("{path}: sha256 {actual}, expected {expected} (from {readme})")]
    Checksum {
        /// The unpacked file.
        path: PathBuf,
        /// Its hash.
        actual: String,
        /// The README's.
        expected: String,
        /// The README.
        readme: PathBuf,
    },
    /// `xz -dc` failed or could not run.
    #[error("unpacking {path} with xz: {message}")]
    Unpack {
        /// The compressed file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// A file operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was done.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> AssetsError {
    let what = what.into();
    move |source| AssetsError::Io { what, source }
}

/// The binaries unpacked from `../shared/k8s` (etcd is not there).
const BINARIES: [&str; 3] = ["kube-apiserver", "kube-controller-manager", "kubectl"];

/// Finds the control plane's binaries for the project at `project_root`
/// (see the module doc), unpacking `../shared/k8s` if that is the source.
pub fn resolve_assets(project_root: &Path) -> Result<Assets, AssetsError> {
    let dir = match std::env::var_os(super::ASSETS_ENV).filter(|v| !v.is_empty()) {
        Some(d) => PathBuf::from(d),
        None => {
            let shared = project_root.join("../shared/k8s");
            if !shared.join("kube-apiserver.xz").is_file() {
                return Err(AssetsError::NoAssets { shared });
            }
            let target = std::env::var_os("CARGO_TARGET_DIR")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .unwrap_or_else(|| project_root.join("target"));
            unpack_shared(&shared, &target.join("envtest-assets"))?
        }
    };
    for name in ["kube-apiserver", "kube-controller-manager"] {
        if !dir.join(name).is_file() {
            return Err(AssetsError::Missing {
                name: name.into(),
                dir,
            });
        }
    }
    let etcd = match dir.join("etcd") {
        local if local.is_file() => local,
        _ => on_path("etcd").ok_or_else(|| AssetsError::NoEtcd { dir: dir.clone() })?,
    };
    Ok(Assets { dir, etcd })
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

/// The sha256 of each unpacked binary, from the README's table rows
/// (`| \`kube-apiserver.xz\` | ... | \`<64 hex>\` |`).
pub(crate) fn readme_checksums(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| l.trim_start().starts_with('|')) {
        let ticks: Vec<&str> = line.split('`').skip(1).step_by(2).collect();
        let (Some(file), Some(hash)) = (ticks.first(), ticks.last()) else {
            continue;
        };
        let Some(name) = file.strip_suffix(".xz") else {
            continue;
        };
        if hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            out.push((name.to_string(), hash.to_ascii_lowercase()));
        }
    }
    out
}

fn sha256_file(path: &Path) -> Result<String, AssetsError> {
    use std::io::Read;
    let mut f = std::fs::File::open(path).map_err(io(format!("open {}", path.display())))?;
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f
            .read(&mut buf)
            .map_err(io(format!("read {}", path.display())))?;
        if n == 0 {
            break;
        }
        ctx.update(&buf[..n]);
    }
    Ok(ctx
        .finish()
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// `size mtime-ns sha256` of a file, the stamp that spares re-hashing.
fn stamp_of(path: &Path, sha: &str) -> Option<String> {
    let m = std::fs::metadata(path).ok()?;
    let mtime = m
        .modified()
        .ok()?
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_nanos();
    Some(format!("{} {mtime} {sha}", m.len()))
}

/// Unpacks (or re-uses) every binary of `shared` into `out`, verified.
fn unpack_shared(shared: &Path, out: &Path) -> Result<PathBuf, AssetsError> {
    for name in BINARIES {
        if name == "kubectl" && !shared.join("kubectl.xz").is_file() {
            continue; // a convenience, not needed to run the tests
        }
        unpack_verified(shared, out, name)?;
    }
    Ok(out.to_owned())
}

/// Unpacks (or re-uses) `shared/<name>.xz` as `out/<name>`, checked against
/// the sha256 the README of `shared` lists for it; the path of the binary.
pub(crate) fn unpack_verified(
    shared: &Path,
    out: &Path,
    name: &str,
) -> Result<PathBuf, AssetsError> {
    let readme = shared.join("README.md");
    let text =
        std::fs::read_to_string(&readme).map_err(io(format!("read {}", readme.display())))?;
    let sums = readme_checksums(&text);
    std::fs::create_dir_all(out).map_err(io(format!("create {}", out.display())))?;
    let xz = shared.join(format!("{name}.xz"));
    if !xz.is_file() {
        return Err(AssetsError::Missing {
            name: format!("{name}.xz"),
            dir: shared.to_owned(),
        });
    }
    let expected = sums
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, h)| h.clone())
        .ok_or_else(|| AssetsError::NoChecksum {
            readme: readme.clone(),
            name: name.into(),
        })?;
    let bin = out.join(name);
    let stamp_path = out.join(format!("{name}.sha256-stamp"));
    let fresh = std::fs::read_to_string(&stamp_path)
        .ok()
        .is_some_and(|s| stamp_of(&bin, &expected).is_some_and(|now| now == s.trim()));
    if fresh {
        return Ok(bin);
    }
    if bin.is_file() && sha256_file(&bin)? == expected {
        write_stamp(&bin, &stamp_path, &expected)?;
        return Ok(bin);
    }
    unpack_one(&xz, &bin, &expected, &readme)?;
    write_stamp(&bin, &stamp_path, &expected)?;
    Ok(bin)
}

/// The binaries a real node needs beside the control plane's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeAssets {
    /// kubelet v1.36.2.
    pub kubelet: PathBuf,
    /// The static `pause` binary, the sandbox image's only file.
    pub pause: PathBuf,
}

/// `kubelet` and `pause` in `dir` (what `rebound sim --assets DIR
/// --real-node` runs), or which one is missing.
pub fn node_assets_in(dir: &Path) -> Result<NodeAssets, AssetsError> {
    for name in ["kubelet", "pause"] {
        if !dir.join(name).is_file() {
            return Err(AssetsError::Missing {
                name: name.into(),
                dir: dir.to_owned(),
            });
        }
    }
    Ok(NodeAssets {
        kubelet: dir.join("kubelet"),
        pause: dir.join("pause"),
    })
}

/// The directory the binaries of `../shared/k8s` are unpacked into.
fn unpacked_dir(project_root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| project_root.join("target"))
        .join("envtest-assets")
}

/// Finds `kubelet` and `pause` for the project at `project_root`: in
/// `REBOUND_TEST_ASSETS` when set, else unpacked from `../shared/k8s` into
/// `target/envtest-assets/` and verified like the control plane's.
pub fn resolve_node_assets(project_root: &Path) -> Result<NodeAssets, AssetsError> {
    if let Some(d) = std::env::var_os(super::ASSETS_ENV).filter(|v| !v.is_empty()) {
        return node_assets_in(Path::new(&d));
    }
    let shared = project_root.join("../shared/k8s");
    if !shared.join("kubelet.xz").is_file() {
        return Err(AssetsError::Missing {
            name: "kubelet.xz".into(),
            dir: shared,
        });
    }
    let out = unpacked_dir(project_root);
    Ok(NodeAssets {
        kubelet: unpack_verified(&shared, &out, "kubelet")?,
        pause: unpack_verified(&shared, &out, "pause")?,
    })
}

/// Finds `kube-scheduler` for the project at `project_root`, as
/// [`resolve_node_assets`] finds the kubelet.
pub fn resolve_scheduler(project_root: &Path) -> Result<PathBuf, AssetsError> {
    if let Some(d) = std::env::var_os(super::ASSETS_ENV).filter(|v| !v.is_empty()) {
        let dir = PathBuf::from(d);
        let bin = dir.join("kube-scheduler");
        if !bin.is_file() {
            return Err(AssetsError::Missing {
                name: "kube-scheduler".into(),
                dir,
            });
        }
        return Ok(bin);
    }
    let shared = project_root.join("../shared/k8s");
    unpack_verified(&shared, &unpacked_dir(project_root), "kube-scheduler")
}

fn write_stamp(bin: &Path, stamp_path: &Path, sha: &str) -> Result<(), AssetsError> {
    if let Some(s) = stamp_of(bin, sha) {
        std::fs::write(stamp_path, s).map_err(io(format!("write {}", stamp_path.display())))?;
    }
    Ok(())
}

/// `xz -dc xz > bin.<pid>`, hash, chmod, rename: two processes unpacking
/// at once each write their own file and the last rename wins.
fn unpack_one(xz: &Path, bin: &Path, expected: &str, readme: &Path) -> Result<(), AssetsError> {
    use std::os::unix::fs::PermissionsExt;
    let tmp = bin.with_extension(format!("part-{}", std::process::id()));
    let file = std::fs::File::create(&tmp).map_err(io(format!("create {}", tmp.display())))?;
    let status = Command::new("xz")
        .arg("-dc")
        .arg(xz)
        .stdin(Stdio::null())
        .stdout(file)
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| AssetsError::Unpack {
            path: xz.to_owned(),
            message: format!("cannot run xz: {e}"),
        })?;
    if !status.status.success() {
        let _ = std::fs::remove_file(&tmp);
        return Err(AssetsError::Unpack {
            path: xz.to_owned(),
            message: String::from_utf8_lossy(&status.stderr).trim().to_string(),
        });
    }
    let actual = sha256_file(&tmp)?;
    if actual != expected {
        let _ = std::fs::remove_file(&tmp);
        return Err(AssetsError::Checksum {
            path: bin.to_owned(),
            actual,
            expected: expected.to_owned(),
            readme: readme.to_owned(),
        });
    }
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755))
        .map_err(io(format!("chmod {}", tmp.display())))?;
    std::fs::rename(&tmp, bin).map_err(io(format!("rename to {}", bin.display())))?;
    let _ = std::io::stderr().flush();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_readme_table_gives_each_binary_its_hash() {
        let text = "| file | unpacked | sha256 of the unpacked binary |\n|---|---|---|\n\
            | `kube-apiserver.xz` | `kube-apiserver` v1.36.2 | `048F10747f1eaad539ed3157e7b99fca7ccae100740faaa73720b85b1901b7e4` |\n\
            | `kubectl.xz` | `kubectl` v1.36.2 | `not-a-hash` |\n";
        assert_eq!(
            readme_checksums(text),
            vec![(
                "kube-apiserver".to_string(),
                "048f10747f1eaad539ed3157e7b99fca7ccae100740faaa73720b85b1901b7e4".to_string()
            )]
        );
    }

    #[test]
    fn the_shared_readme_lists_every_binary() {
        let readme = Path::new(crate::PROJECT_ROOT).join("../shared/k8s/README.md");
        let Ok(text) = std::fs::read_to_string(&readme) else {
            eprintln!("SKIPPED: {} is absent", readme.display());
            return;
        };
        let sums = readme_checksums(&text);
        for name in BINARIES
            .iter()
            .chain(&["kubelet", "pause", "kube-scheduler"])
        {
            assert!(sums.iter().any(|(n, _)| n == name), "{name}: {sums:?}");
        }
    }

    #[test]
    fn a_corrupt_unpacked_binary_is_replaced_and_a_wrong_hash_refused() {
        let dir = std::env::temp_dir().join(format!("rebound-assets-{}", std::process::id()));
        let shared = dir.join("shared");
        let out = dir.join("out");
        std::fs::create_dir_all(&shared).unwrap();
        let payload = b"#!/bin/sh\necho fake\n";
        let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
        ctx.update(payload);
        let sha: String = ctx
            .finish()
            .as_ref()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let plain = shared.join("payload");
        std::fs::write(&plain, payload).unwrap();
        for name in ["kube-apiserver", "kube-controller-manager"] {
            let st = Command::new("sh")
                .arg("-c")
                .arg(format!(
                    "xz -zc {} > {}",
                    plain.display(),
                    shared.join(format!("{name}.xz")).display()
                ))
                .status()
                .unwrap();
            assert!(st.success());
        }
        std::fs::write(
            shared.join("README.md"),
            format!(
                "| `kube-apiserver.xz` | x | `{sha}` |\n| `kube-controller-manager.xz` | x | `{}` |\n",
                "0".repeat(64)
            ),
        )
        .unwrap();
        let err = unpack_shared(&shared, &out).unwrap_err();
        assert!(
            matches!(&err, AssetsError::Checksum { path, .. } if path.ends_with("kube-controller-manager")),
            "{err}"
        );
        // The good one was unpacked, executable, and is stamped.
        let bin = out.join("kube-apiserver");
        assert_eq!(std::fs::read(&bin).unwrap(), payload);
        assert!(out.join("kube-apiserver.sha256-stamp").is_file());
        // A corrupted copy is noticed (its stamp no longer matches) and replaced.
        std::fs::write(&bin, b"corrupt").unwrap();
        std::fs::write(
            shared.join("README.md"),
            format!("| `kube-apiserver.xz` | x | `{sha}` |\n| `kube-controller-manager.xz` | x | `{sha}` |\n"),
        )
        .unwrap();
        unpack_shared(&shared, &out).unwrap();
        assert_eq!(std::fs::read(&bin).unwrap(), payload);
        assert_eq!(
            std::fs::read(out.join("kube-controller-manager")).unwrap(),
            payload
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
