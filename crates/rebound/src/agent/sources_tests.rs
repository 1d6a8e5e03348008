//! The DCGM source keeps `dcgmi diag` off busy GPUs: a fake `dcgmi` records
//! which subcommands it was asked for.

use super::*;

/// A `dcgmi` stand-in appending its first argument to `calls`, answering
/// `diag` with a passing run and `health` with an empty report.
fn fake_dcgmi(dir: &Path) -> PathBuf {
    let bin = dir.join("dcgmi");
    let calls = dir.join("calls");
    std::fs::write(
        &bin,
        format!(
            "#!/bin/sh\necho \"$1\" >> '{}'\ncase \"$1\" in\n  diag) echo '{{\"DCGM GPU Diagnostic\": {{\"test_categories\": []}}}}' ;;\n  *) echo '{{}}' ;;\nesac\n",
            calls.display()
        ),
    )
    .expect("write fake dcgmi");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    bin
}

fn source(
    bin: &Path,
    diag_while_busy: bool,
    busy: fn(Option<&Path>) -> Option<bool>,
) -> DcgmSource {
    DcgmSource {
        binary: bin.display().to_string(),
        level: 1,
        interval: Duration::from_secs(60),
        timeout: Duration::from_secs(10),
        health: true,
        diag_while_busy,
        busy,
        nvml_library: None,
    }
}

async fn calls_of(src: DcgmSource, dir: &Path) -> Vec<String> {
    let _ = std::fs::remove_file(dir.join("calls"));
    let (tx, mut rx) = tokio::sync::mpsc::channel(64);
    assert_eq!(src.poll(&tx).await, None, "dcgmi is there");
    drop(tx);
    while rx.recv().await.is_some() {}
    std::fs::read_to_string(dir.join("calls"))
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

#[tokio::test]
async fn diag_stays_off_busy_gpus_unless_asked() {
    let dir = std::env::temp_dir().join(format!("rebound-dcgmi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp");
    let bin = fake_dcgmi(&dir);
    let busy: fn(Option<&Path>) -> Option<bool> = |_| Some(true);
    let idle: fn(Option<&Path>) -> Option<bool> = |_| Some(false);
    let unknown: fn(Option<&Path>) -> Option<bool> = |_| None;
    assert_eq!(calls_of(source(&bin, false, busy), &dir).await, ["health"]);
    assert_eq!(
        calls_of(source(&bin, false, idle), &dir).await,
        ["diag", "health"]
    );
    assert_eq!(
        calls_of(source(&bin, false, unknown), &dir).await,
        ["diag", "health"]
    );
    assert_eq!(
        calls_of(source(&bin, true, busy), &dir).await,
        ["diag", "health"]
    );
    let _ = std::fs::remove_dir_all(&dir);
}
