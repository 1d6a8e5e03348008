//! OCI image archives written in-process, for the real node's containerd
//! (`ctr -n k8s.io images import`): nothing can be pulled on the machines
//! the tests run on, so the test bed builds its images from files it has
//! (the static `pause`, the `rebound` binary and the shared libraries it
//! links).
//!
//! An archive is an OCI image layout in a tar stream (`oci-layout`,
//! `index.json`, `blobs/sha256/...`) holding one manifest, its config and
//! one layer. The layer is an uncompressed tar
//! (`application/vnd.oci.image.layer.v1.tar`, which the OCI spec allows and
//! containerd imports): the debug `rebound` binary is ~170 MB, and gzip in
//! an unoptimised test build would cost more time than it saves on a local
//! import. The tar writer is a minimal ustar one (regular files,
//! directories), so no archive crate is needed; sha256 comes from `ring`,
//! already a dependency.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// Why an image archive could not be written.
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    /// A file operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was done.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A path too long for a plain ustar header (100 bytes).
    #[error("tar path too long for ustar: {0}")]
    PathTooLong(String),
    /// `ldd` could not say what a binary links.
    #[error("ldd {binary}: {message}")]
    Ldd {
        /// The binary.
        binary: PathBuf,
        /// What went wrong.
        message: String,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> OciError {
    let what = what.into();
    move |source| OciError::Io { what, source }
}

/// One file of an image's layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerFile {
    /// Absolute path in the image (`/usr/local/bin/rebound`).
    pub path: String,
    /// Permission bits.
    pub mode: u32,
    /// Where its content is read from (symlinks followed).
    pub source: PathBuf,
}

/// An image to write: its names, one layer of files, its command.
#[derive(Debug, Clone, Default)]
pub struct ImageSpec {
    /// Full references (`docker.io/library/rebound-e2e:e2e`): the kubelet
    /// asks containerd for normalised names, so give those.
    pub names: Vec<String>,
    /// The layer's files; parent directories are added.
    pub files: Vec<LayerFile>,
    /// The image's `Cmd`.
    pub cmd: Vec<String>,
    /// The image's environment (`PATH=...`).
    pub env: Vec<String>,
}

/// A writer that hashes and counts what passes through.
struct Hashing<W> {
    inner: W,
    ctx: ring::digest::Context,
    len: u64,
}

impl<W: Write> Hashing<W> {
    fn new(inner: W) -> Self {
        Hashing {
            inner,
            ctx: ring::digest::Context::new(&ring::digest::SHA256),
            len: 0,
        }
    }

    fn finish(self) -> (W, String, u64) {
        (self.inner, hex(self.ctx.finish().as_ref()), self.len)
    }
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.ctx.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}

fn sha256(b: &[u8]) -> String {
    hex(ring::digest::digest(&ring::digest::SHA256, b).as_ref())
}

/// A ustar header for `path` (relative, `/` separated).
fn header(path: &str, mode: u32, size: u64, kind: u8) -> Result<[u8; 512], OciError> {
    let mut h = [0u8; 512];
    let name = path.as_bytes();
    if name.len() > 100 {
        return Err(OciError::PathTooLong(path.to_string()));
    }
    h[..name.len()].copy_from_slice(name);
    let octal = |h: &mut [u8], v: u64, width: usize| {
        let s = format!("{v:0w$o}\0", w = width - 1);
        h[..width].copy_from_slice(s.as_bytes());
    };
    octal(&mut h[100..108], u64::from(mode), 8);
    octal(&mut h[108..116], 0, 8);
    octal(&mut h[116..124], 0, 8);
    octal(&mut h[124..136], size, 12);
    octal(&mut h[136..148], 0, 12);
    h[156] = kind;
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|b| u32::from(*b)).sum();
    let s = format!("{sum:06o}\0 ");
    h[148..156].copy_from_slice(s.as_bytes());
    Ok(h)
}

/// Minimal tar stream writer.
struct Tar<W: Write> {
    out: W,
}

impl<W: Write> Tar<W> {
    fn dir(&mut self, path: &str) -> Result<(), OciError> {
        let h = header(&format!("{}/", path.trim_end_matches('/')), 0o755, 0, b'5')?;
        self.out.write_all(&h).map_err(io("write tar"))
    }

    fn file(
        &mut self,
        path: &str,
        mode: u32,
        size: u64,
        src: &mut dyn Read,
    ) -> Result<(), OciError> {
        let h = header(path, mode, size, b'0')?;
        self.out.write_all(&h).map_err(io("write tar"))?;
        let copied = std::io::copy(&mut src.take(size), &mut self.out)
            .map_err(io(format!("copy {path} into the tar")))?;
        if copied != size {
            return Err(OciError::Io {
                what: format!("copy {path} into the tar"),
                source: std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "file shrank"),
            });
        }
        let pad = (512 - size % 512) % 512;
        self.out
            .write_all(&vec![0u8; pad as usize])
            .map_err(io("write tar"))
    }

    fn bytes(&mut self, path: &str, body: &[u8]) -> Result<(), OciError> {
        self.file(path, 0o644, body.len() as u64, &mut &body[..])
    }

    fn finish(mut self) -> Result<W, OciError> {
        self.out.write_all(&[0u8; 1024]).map_err(io("write tar"))?;
        self.out.flush().map_err(io("flush tar"))?;
        Ok(self.out)
    }
}

/// Every parent directory of `files`, shortest first.
fn parents(files: &[LayerFile]) -> BTreeSet<String> {
    let mut dirs = BTreeSet::new();
    for f in files {
        let mut p = Path::new(f.path.trim_start_matches('/')).parent();
        while let Some(d) = p.filter(|d| !d.as_os_str().is_empty()) {
            dirs.insert(d.to_string_lossy().to_string());
            p = d.parent();
        }
    }
    dirs
}

/// Writes `spec` as an OCI image archive at `out` (its layer is staged
/// beside it and removed).
pub fn write_archive(spec: &ImageSpec, out: &Path) -> Result<(), OciError> {
    let staged = out.with_extension("layer");
    let file =
        std::fs::File::create(&staged).map_err(io(format!("create {}", staged.display())))?;
    let mut tar = Tar {
        out: Hashing::new(std::io::BufWriter::new(file)),
    };
    for d in parents(&spec.files) {
        tar.dir(&d)?;
    }
    for f in &spec.files {
        let mut src =
            std::fs::File::open(&f.source).map_err(io(format!("open {}", f.source.display())))?;
        let size = src
            .metadata()
            .map_err(io(format!("stat {}", f.source.display())))?
            .len();
        tar.file(f.path.trim_start_matches('/'), f.mode, size, &mut src)?;
    }
    let (_, layer_digest, layer_size) = tar.finish()?.finish();
    let config = serde_json::json!({
        "architecture": "amd64",
        "os": "linux",
        "config": {"Env": spec.env, "Cmd": spec.cmd},
        "rootfs": {"type": "layers", "diff_ids": [format!("sha256:{layer_digest}")]},
    })
    .to_string();
    let config_digest = sha256(config.as_bytes());
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": format!("sha256:{config_digest}"),
            "size": config.len(),
        },
        "layers": [{
            "mediaType": "application/vnd.oci.image.layer.v1.tar",
            "digest": format!("sha256:{layer_digest}"),
            "size": layer_size,
        }],
    })
    .to_string();
    let manifest_digest = sha256(manifest.as_bytes());
    let index = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": spec.names.iter().map(|n| serde_json::json!({
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": format!("sha256:{manifest_digest}"),
            "size": manifest.len(),
            "annotations": {
                "io.containerd.image.name": n,
                "org.opencontainers.image.ref.name": n.rsplit(':').next().unwrap_or("latest"),
            },
        })).collect::<Vec<_>>(),
    })
    .to_string();
    let file = std::fs::File::create(out).map_err(io(format!("create {}", out.display())))?;
    let mut tar = Tar {
        out: std::io::BufWriter::new(file),
    };
    tar.bytes("oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#)?;
    tar.bytes("index.json", index.as_bytes())?;
    tar.dir("blobs")?;
    tar.dir("blobs/sha256")?;
    tar.bytes(&format!("blobs/sha256/{config_digest}"), config.as_bytes())?;
    tar.bytes(
        &format!("blobs/sha256/{manifest_digest}"),
        manifest.as_bytes(),
    )?;
    let mut layer =
        std::fs::File::open(&staged).map_err(io(format!("open {}", staged.display())))?;
    tar.file(
        &format!("blobs/sha256/{layer_digest}"),
        0o644,
        layer_size,
        &mut layer,
    )?;
    tar.finish()?;
    let _ = std::fs::remove_file(&staged);
    Ok(())
}

/// `binary` at `at` in the image, with every shared library `ldd` lists
/// for it at the path it resolves to here (the ELF interpreter included),
/// so a dynamically linked binary runs in an otherwise empty image.
pub fn binary_with_libraries(binary: &Path, at: &str) -> Result<Vec<LayerFile>, OciError> {
    let out = std::process::Command::new("ldd")
        .arg(binary)
        .output()
        .map_err(|e| OciError::Ldd {
            binary: binary.to_owned(),
            message: format!("cannot run ldd: {e}"),
        })?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() && !text.contains("statically linked") {
        return Err(OciError::Ldd {
            binary: binary.to_owned(),
            message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    let mut files = vec![LayerFile {
        path: at.to_string(),
        mode: 0o755,
        source: binary.to_owned(),
    }];
    files.extend(ldd_libraries(&text).into_iter().map(|p| LayerFile {
        path: p.clone(),
        mode: 0o755,
        source: PathBuf::from(p),
    }));
    Ok(files)
}

/// The absolute library paths of `ldd` output: `name => /path (addr)` and
/// the interpreter's `/path (addr)`; the vDSO has no file.
fn ldd_libraries(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        let path = match line.split_once("=>") {
            Some((_, rest)) => rest.trim(),
            None => line,
        };
        let path = path.split(" (").next().unwrap_or_default().trim();
        if path.starts_with('/') && !out.iter().any(|p| p == path) {
            out.push(path.to_string());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_output_gives_libraries_and_interpreter_not_the_vdso() {
        let text = "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x1)\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x2)\n\t/lib64/ld-linux-x86-64.so.2 (0x3)\n";
        assert_eq!(
            ldd_libraries(text),
            vec![
                "/lib/x86_64-linux-gnu/libgcc_s.so.1",
                "/lib/x86_64-linux-gnu/libc.so.6",
                "/lib64/ld-linux-x86-64.so.2"
            ]
        );
    }

    #[test]
    fn an_archive_is_an_oci_layout_whose_blobs_match_their_digests() {
        let dir = std::env::temp_dir().join(format!("rebound-oci-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let payload = dir.join("payload");
        std::fs::write(&payload, b"hello").unwrap();
        let spec = ImageSpec {
            names: vec!["docker.io/library/t:e2e".into()],
            files: vec![LayerFile {
                path: "/usr/bin/hello".into(),
                mode: 0o755,
                source: payload,
            }],
            cmd: vec!["/usr/bin/hello".into()],
            env: vec![],
        };
        let out = dir.join("t.tar");
        write_archive(&spec, &out).unwrap();
        let listing = std::process::Command::new("tar")
            .arg("-tf")
            .arg(&out)
            .output()
            .unwrap();
        let names = String::from_utf8_lossy(&listing.stdout).to_string();
        assert!(
            names.contains("oci-layout") && names.contains("index.json"),
            "{names}"
        );
        let x = dir.join("x");
        std::fs::create_dir_all(&x).unwrap();
        let st = std::process::Command::new("tar")
            .arg("-xf")
            .arg(&out)
            .arg("-C")
            .arg(&x)
            .status()
            .unwrap();
        assert!(st.success());
        for e in std::fs::read_dir(x.join("blobs/sha256")).unwrap() {
            let e = e.unwrap();
            let body = std::fs::read(e.path()).unwrap();
            assert_eq!(sha256(&body), e.file_name().to_string_lossy());
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
