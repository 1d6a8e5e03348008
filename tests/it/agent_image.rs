//! The two images the Dockerfile builds (CI cannot run docker): the
//! controller's static musl binary without NVML, last so it stays the
//! default target; the agent's glibc binary with the `nvml` feature on a
//! glibc base (`--target agent`). That such a binary loads the driver's
//! library is tests/it/agent_nvml.rs.

use std::path::Path;

fn read(rel: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// A build stage: its `FROM` line, its name, and its lines.
struct Stage {
    from: String,
    name: String,
    body: String,
}

fn stages(dockerfile: &str) -> Vec<Stage> {
    let mut out: Vec<Stage> = Vec::new();
    // Join continuation lines so a RUN reads as one.
    let joined = dockerfile.replace("\\\n", " ");
    for line in joined.lines() {
        if let Some(rest) = line.strip_prefix("FROM ") {
            let words: Vec<&str> = rest.split_whitespace().collect();
            let name = match words.as_slice() {
                [_, as_, n] if as_.eq_ignore_ascii_case("as") => n.to_string(),
                _ => String::new(),
            };
            out.push(Stage {
                from: words.first().copied().unwrap_or_default().to_string(),
                name,
                body: String::new(),
            });
        } else if let Some(s) = out.last_mut() {
            s.body.push_str(line);
            s.body.push('\n');
        }
    }
    out
}

fn stage<'a>(all: &'a [Stage], name: &str) -> &'a Stage {
    all.iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("the Dockerfile has no stage `{name}`"))
}

/// The stage a runtime stage copies `/usr/local/bin/rebound` from.
fn built_by<'a>(all: &'a [Stage], runtime: &Stage) -> &'a Stage {
    let from = runtime
        .body
        .lines()
        .find(|l| l.starts_with("COPY --from=") && l.contains("/usr/local/bin/rebound"))
        .and_then(|l| l.strip_prefix("COPY --from="))
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_else(|| panic!("stage {} copies no rebound binary", runtime.name));
    stage(all, from)
}

fn cargo_build(s: &Stage) -> &str {
    s.body
        .lines()
        .find(|l| l.contains("cargo build"))
        .unwrap_or_else(|| panic!("stage {} runs no cargo build", s.name))
}

#[test]
fn agent_image_is_glibc_with_nvml_and_controller_stays_static() {
    let d = read("Dockerfile");
    let all = stages(&d);

    let agent = stage(&all, "agent");
    assert!(
        agent.from.contains("distroless/cc"),
        "the agent runs on a glibc base: {}",
        agent.from
    );
    assert!(
        agent.body.contains(r#"CMD ["agent"]"#),
        "agent image runs the agent"
    );
    let build = cargo_build(built_by(&all, agent));
    assert!(
        build.contains("--features nvml"),
        "the agent binary is built with NVML: {build}"
    );
    assert!(
        !build.contains("musl"),
        "the agent binary is a glibc (dynamically linked) build: {build}"
    );
    // Without the simulator (the default `sim` feature), with NVML named
    // (tests/it/workspace.rs checks the crate graph of these flags).
    assert!(
        build.contains("--no-default-features"),
        "the agent binary leaves out the simulator: {build}"
    );
    assert!(
        built_by(&all, agent).from.contains("bookworm"),
        "built on bookworm, the glibc of distroless cc-debian12"
    );

    let last = all.last().expect("stages");
    assert!(
        last.from.contains("distroless/static"),
        "the default (last) image is the static controller: {}",
        last.from
    );
    assert!(last.body.contains(r#"CMD ["controller"]"#));
    let build = cargo_build(built_by(&all, last));
    assert!(
        build.contains("--no-default-features") && build.contains("rust-target"),
        "the controller is the static musl build without NVML: {build}"
    );

    // `nvml` is a default feature, so `cargo build` and `cargo test` build
    // (and tests/it/agent_nvml.rs checks) what the agent image ships.
    let cargo = read("Cargo.toml");
    let default = cargo
        .lines()
        .find(|l| l.starts_with("default = "))
        .expect("Cargo.toml [features] default");
    assert!(default.contains("\"nvml\""), "{default}");

    // Both documented.
    let docs = read("docs/agent.md");
    assert!(
        docs.contains("--target agent"),
        "docs/agent.md: the agent image"
    );
}

/// The maintainers' GPU check (tests/gpu/run.sh; CI has no GPU and does not
/// run it) passes only flags `rebound agent` has, so it does not rot.
#[test]
fn gpu_check_script_uses_real_agent_flags() {
    let script = read("tests/gpu/run.sh");
    let flags: Vec<&str> = script
        .lines()
        .filter(|l| l.trim_start().starts_with("args"))
        .flat_map(|l| l.split(|c: char| c.is_whitespace() || c == '(' || c == ')'))
        .filter(|w| w.starts_with("--"))
        .collect();
    assert!(
        flags.contains(&"--dry-run") && flags.contains(&"--once"),
        "{flags:?}"
    );
    for f in &flags {
        let mut argv = vec![f.to_string()];
        // Every flag but the switches takes a value.
        if !matches!(*f, "--once" | "--dry-run") {
            argv.push(match *f {
                "--dcgm-level" => "1".into(),
                "--dcgm-timeout" => "1m".into(),
                "--kmsg" | "--dcgm" => "false".into(),
                _ => "x".into(),
            });
        }
        rebound::agent::args::AgentArgs::from_args(&argv)
            .unwrap_or_else(|e| panic!("tests/gpu/run.sh passes {argv:?}: {e}"));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode =
            std::fs::metadata(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/gpu/run.sh"))
                .expect("tests/gpu/run.sh")
                .permissions()
                .mode();
        assert!(mode & 0o111 != 0, "tests/gpu/run.sh is executable");
    }
}
