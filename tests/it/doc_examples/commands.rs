//! The command blocks of README.md, docs/getting-started.md and
//! samples/README.md: run where they can run without a cluster, and
//! checked offline where they cannot (what they name exists, their flags
//! parse, what their comments claim holds).

use super::explain::{self, decide};
use super::{read, root};
use rebound::policy::{JobAction, NodeAction};
use std::process::Command;

/// The command lines of a block: comments and `\` continuations handled,
/// each split as a shell does.
fn lines(block: &str) -> Vec<Vec<String>> {
    block
        .replace("\\\n", " ")
        .lines()
        .map(|l| l.split(" #").next().unwrap_or("").trim().to_string())
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| shlex::split(&l).unwrap_or_else(|| panic!("unbalanced quotes: {l}")))
        .collect()
}

/// The comment of a block's line starting with `prefix`.
fn comment_of<'a>(block: &'a str, prefix: &str) -> &'a str {
    block
        .lines()
        .find(|l| l.trim_start().starts_with(prefix))
        .and_then(|l| l.split_once(" #"))
        .map(|(_, c)| c.trim())
        .unwrap_or("")
}

/// `rebound ARGS --help` succeeds: the subcommand and every flag exist
/// (clap checks the arguments before `--help` as it meets them).
fn flags_parse(args: &[String]) {
    let out = Command::new(env!("CARGO_BIN_EXE_rebound"))
        .args(args)
        .arg("--help")
        .output()
        .expect("run rebound");
    assert!(
        out.status.success(),
        "`rebound {}` does not parse: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// What `cargo run [--release] -- ARGS` passes to the binary.
fn after_dashes(words: &[String]) -> Option<Vec<String>> {
    let i = words.iter().position(|w| w == "--")?;
    Some(words[i + 1..].to_vec())
}

/// `cargo run … -- ARGS` lines: the binary takes their arguments.
pub fn cargo_run_parses(block: &str) {
    let mut n = 0;
    for l in lines(block) {
        if l.first().map(String::as_str) == Some("cargo")
            && l.get(1).map(String::as_str) == Some("run")
            && let Some(args) = after_dashes(&l)
        {
            flags_parse(&args);
            n += 1;
        }
    }
    assert!(n > 0, "no `cargo run -- …` line in {block:?}");
}

/// `cargo run --release -- demo`: run by `demo::the_demo_recovers_every_fault_and_one_job_in_place`
/// (it takes a minute; not twice).
pub fn demo(block: &str) {
    cargo_run_parses(block);
    let t = read("tests/it/demo.rs");
    assert!(
        t.contains(".arg(\"demo\")")
            && t.contains("fn the_demo_recovers_every_fault_and_one_job_in_place"),
        "tests/it/demo.rs no longer runs `rebound demo`"
    );
}

/// kubectl against `demo --serve`'s server: needs that server running; the
/// kubeconfig it names is the one the demo writes by default.
pub fn kubectl_on_the_demo(block: &str) {
    let sim = read("crates/rebound-sim/src/demo.rs");
    let name = "rebound-demo.kubeconfig";
    assert!(block.contains(name) && sim.contains(&format!("default_value = \"{name}\"")));
    assert!(
        lines(block)
            .iter()
            .all(|l| l[0] == "export" || l[0] == "kubectl")
    );
}

/// `explain` over the samples with XID 79 on gpu-7 for an opted-in
/// PyTorchJob of team-a: the node is separated, the job restarted by
/// team-a's policy (as samples/README.md shows).
pub fn explain_xid79(block: &str) {
    let l = lines(block).remove(0);
    let i = l
        .iter()
        .position(|w| w == "explain")
        .expect("an explain command");
    let d = decide(&shlex::try_join(l[i + 1..].iter().map(String::as_str)).expect("join"));
    assert_eq!(d.level.to_string(), "Separate");
    assert_eq!(d.rule, "nvidia-xid/node-reboot-required");
    let node = d.node.as_ref().expect("a node decision");
    assert!(node.acts() && node.actions.contains(&NodeAction::Cordon));
    assert!(matches!(
        node.actions.last(),
        Some(NodeAction::Taint { .. })
    ));
    let j = &d.jobs[0];
    assert!(j.acts(), "{:?}", j.reasons);
    assert!(matches!(j.action, Some(JobAction::RestartJob { .. })));
    assert_eq!(j.policy.as_deref(), Some("team-a/llm-training"));
}

/// concepts.md's inline `rebound explain`: "prints the level, the chosen
/// policy, the decision and every reason" (the binary's text).
pub fn explain_prints_everything(span: &str) {
    explain_xid79(span);
    let out = binary(span);
    for want in [
        "level:",
        "Separate",
        "policy team-a/llm-training",
        "restart job",
    ] {
        assert!(out.contains(want), "no {want:?} in:\n{out}");
    }
}

/// Run a `rebound …` line with the built binary; its stdout.
fn binary(line: &str) -> String {
    let l = lines(line).remove(0);
    assert_eq!(l[0], "rebound");
    let out = Command::new(env!("CARGO_BIN_EXE_rebound"))
        .args(&l[1..])
        .current_dir(root())
        .output()
        .expect("run rebound");
    assert!(
        out.status.success(),
        "`{line}` failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// samples/README.md's `rebound explain`, run by the binary.
pub fn samples_explain(block: &str) {
    explain_xid79(block);
    let _ = binary(block);
}

/// The output samples/README.md shows for its `rebound explain`: each of
/// its lines is a line of what the binary prints, in order.
pub fn samples_explain_output(block: &str) {
    let readme = read("samples/README.md");
    let cmd = readme
        .split("```sh\n")
        .filter_map(|b| b.split("```").next())
        .find(|b| b.starts_with("rebound explain"))
        .expect("the command before the output");
    let out = binary(cmd.trim());
    let got: Vec<&str> = out.lines().map(str::trim_end).collect();
    let mut at = 0;
    for want in block.lines().map(str::trim_end) {
        match got[at..].iter().position(|g| *g == want) {
            Some(i) => at += i + 1,
            None => panic!(
                "the output shown has {want:?}, which the binary does not print (in order):\n{out}"
            ),
        }
    }
}

/// A RecoveryPolicy `spec` fragment: it is a spec, it compiles, and its
/// comment's default is the default.
pub fn tiers_fragment(block: &str) {
    let v: serde_json::Value = serde_saphyr::from_str(block).expect("YAML");
    let p = explain::policy("team-a", v["spec"].clone());
    let d = decide(&format!(
        "-f {p} {} --fault source=NvidiaXid,code=13 --job {} --wiring admission",
        explain::CLASSIFICATIONS,
        explain::JOB
    ));
    let reasons = d.jobs[0].reasons.join("; ");
    assert!(reasons.contains("wired at admission"), "{reasons}");
    let tiers = |p: &str| {
        let loaded = rebound::explain::load_paths(&[p.into()]).expect("loads");
        let (engine, _) =
            rebound::explain::engine_from(&loaded, "rebound-system", 10).expect("compiles");
        engine
            .policies
            .get("team-a", "example")
            .expect("the policy")
            .restart
            .tiers
            .clone()
    };
    use rebound::api::RecoveryTier::*;
    assert_eq!(tiers(&p), vec![InPlace, ReplaceFaulty, Recreate]);
    if block.contains("# default: [Recreate]") {
        let plain = explain::policy("team-a", serde_json::json!({}));
        assert_eq!(tiers(&plain), vec![Recreate]);
    }
}

/// Kubernetes objects in config/ (what `kubectl apply -k DIR` sends).
fn kustomize(dir: &str) -> Vec<serde_json::Value> {
    crate::packaging::kustomize(dir)
}

/// `kubectl apply -k DIR`: needs a cluster; what DIR renders holds what
/// the comment says it does.
pub fn apply_k(block: &str) {
    for l in lines(block) {
        let Some(i) = l.iter().position(|w| w == "-k") else {
            continue;
        };
        let dir = l[i + 1].trim_end_matches('/');
        let objs = kustomize(dir);
        let kinds: Vec<&str> = objs.iter().filter_map(|o| o["kind"].as_str()).collect();
        assert!(kinds.contains(&"Deployment"), "{dir} renders no controller");
        let comment = comment_of(block, &format!("kubectl apply -k {}", l[i + 1]));
        for (claim, kind) in [
            ("CRDs", "CustomResourceDefinition"),
            ("RBAC", "ClusterRole"),
            ("agent DaemonSet", "DaemonSet"),
        ] {
            assert!(
                !comment.contains(claim) || kinds.contains(&kind),
                "`kubectl apply -k {dir}` says {comment:?}; it renders {kinds:?}"
            );
        }
        // The admission policy is there exactly where the line says so:
        // an older server refuses the whole apply.
        if !comment.is_empty() || dir.contains("admission") {
            assert_eq!(
                comment.contains("admission policy"),
                kinds.contains(&"MutatingAdmissionPolicy"),
                "`kubectl apply -k {dir}` says {comment:?}; it renders {kinds:?}"
            );
        }
        if comment.contains("2 replicas") {
            let d = objs
                .iter()
                .find(|o| o["kind"] == "Deployment")
                .expect("Deployment");
            assert_eq!(d["spec"]["replicas"], 2);
        }
    }
}

/// `helm install NAME chart/rebound …`: needs a cluster; `helm template`
/// with the same arguments renders (with a helm binary), every `--set`
/// names a value.
pub fn helm_install(block: &str) {
    let values = crate::packaging::chart_values();
    for l in lines(block).into_iter().filter(|l| l[0] == "helm") {
        assert_eq!(l[1], "install");
        assert!(root().join(&l[3]).join("Chart.yaml").is_file(), "{}", l[3]);
        for w in l.windows(2).filter(|w| w[0] == "--set") {
            let key = w[1].split('=').next().unwrap_or("");
            let mut node = &values;
            for seg in key.split('.') {
                node = node
                    .get(seg)
                    .unwrap_or_else(|| panic!("--set {key}: no such value"));
            }
        }
        let args: Vec<&str> = l[2..]
            .iter()
            .map(String::as_str)
            .filter(|w| *w != "--create-namespace")
            .collect();
        if crate::packaging::helm_render(&args).is_none() {
            eprintln!(
                "notice: no helm binary; `{}` checked as text only",
                l.join(" ")
            );
        }
    }
}

/// `kubectl apply -f FILES`: needs a cluster; the samples named load and
/// compile without warnings (rebound explain's loader).
pub fn apply_samples(block: &str) {
    let mut n = 0;
    for l in lines(block)
        .into_iter()
        .filter(|l| l[0] == "kubectl" && l[1] == "apply")
    {
        let files: Vec<std::path::PathBuf> = l
            .windows(2)
            .filter(|w| w[0] == "-f")
            .map(|w| root().join(&w[1]))
            .collect();
        let loaded = rebound::explain::load_paths(&files).expect("the files load");
        let (_, warnings) =
            rebound::explain::engine_from(&loaded, "rebound-system", 10).expect("they compile");
        assert!(warnings.is_empty(), "{warnings:?}");
        n += files.len();
    }
    assert!(n > 0);
    for l in lines(block).into_iter().filter(|l| l[1] == "get") {
        // `rp` and `fc` are the CRDs' short names.
        for short in l[2].split(',') {
            assert!(
                rebound::api::crds().iter().any(|c| c
                    .spec
                    .names
                    .short_names
                    .as_ref()
                    .is_some_and(|s| s.iter().any(|x| x == short))),
                "{short} is no short name"
            );
        }
    }
}

/// `kubectl apply --server-side -f crds/`: needs a cluster; crds/ holds
/// the CRDs the code generates (tests/it/crds.rs checks they are equal).
pub fn apply_crds(block: &str) {
    assert!(block.contains("-f crds/"));
    let n = std::fs::read_dir(root().join("crds"))
        .expect("crds/")
        .count();
    assert_eq!(n, rebound::api::crds().len());
}

/// `kubectl label pytorchjob NAME kcover.io/cascading-recovery=true`: the
/// label the cluster default selects.
pub fn label_opt_in(block: &str) {
    let l = lines(block).remove(0);
    let (k, v) = l[4].split_once('=').expect("a label");
    let p = read("samples/policies/cluster-default.yaml");
    assert!(
        p.contains(&format!("{k}: \"{v}\"")),
        "cluster-default does not select {k}={v}"
    );
}

/// "Check it": the Lease the controller holds has the name the block
/// gives, for config/default and for the Helm release `rebound`.
pub fn check_it(block: &str) {
    let lease = lines(block)
        .into_iter()
        .find(|l| l.iter().any(|w| w == "lease"))
        .and_then(|l| l.last().cloned())
        .expect("a lease");
    let deploy = kustomize("config/default")
        .into_iter()
        .find(|o| o["kind"] == "Deployment")
        .expect("Deployment");
    let args = deploy["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    #[derive(clap::Parser)]
    struct Controller {
        #[command(flatten)]
        args: rebound::controller::ControllerArgs,
    }
    let default = <Controller as clap::Parser>::try_parse_from(["controller"])
        .expect("the controller's defaults parse")
        .args
        .lease_name;
    assert!(
        args.contains(&format!("--lease-name={lease}"))
            || (!args.contains("--lease-name") && default == lease),
        "config/default's controller holds no Lease {lease}: {args}"
    );
    let helm = comment_of(block, "kubectl -n rebound-system get lease");
    assert!(
        helm.contains(&format!("{lease} for release rebound"))
            && helm.contains("<fullname>-controller"),
        "the Helm name is `<fullname>-controller`, {lease} for `helm install rebound`: {helm:?}"
    );
    if let Some(objs) = crate::packaging::helm_render(&[
        "rebound",
        "chart/rebound",
        "--namespace",
        "rebound-system",
    ]) {
        let d = objs
            .iter()
            .find(|o| o["kind"] == "Deployment")
            .expect("Deployment");
        let args = d["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
        assert!(
            args.contains(&format!("--lease-name={lease}")),
            "helm: {args}"
        );
    }
}

/// `docker build …`: needs Docker; the Dockerfile has the targets named,
/// and the images are the ones config/default runs.
pub fn docker(block: &str) {
    let df = read("Dockerfile");
    for l in lines(block).into_iter().filter(|l| l[1] == "build") {
        if let Some(i) = l.iter().position(|w| w == "--target") {
            assert!(
                df.contains(&format!(" AS {}", l[i + 1])),
                "no target {}",
                l[i + 1]
            );
        }
    }
    let k = read("config/default/kustomization.yaml");
    for image in ["rebound", "rebound-agent"] {
        assert!(block.contains(&format!("/{image}:")) && k.contains(&format!("name: {image}")));
    }
}

/// The test suite itself (`cargo test`): what CI runs.
pub fn the_suite(block: &str) {
    let ci = read(".ci/run");
    for l in lines(block) {
        let words: Vec<&str> = l
            .iter()
            .map(String::as_str)
            .filter(|w| !w.contains('='))
            .collect();
        assert_eq!(&words[..2], ["cargo", "test"]);
        if words.contains(&"--locked") && words.len() == 3 {
            assert!(
                ci.contains("cargo test --locked"),
                ".ci/run does not run `cargo test --locked`"
            );
        }
        if let Some(i) = words.iter().position(|w| *w == "--test") {
            assert_eq!(words[i + 1], "it");
            assert!(root().join("tests/it/e2e").is_dir());
        }
    }
    if block.contains("::real") {
        let m = read("tests/it/e2e/mod.rs");
        assert!(m.contains("async fn embedded()") && m.contains("async fn real()"));
    }
}

/// docs/benchmarks.md's commands: the bench, the binary's flags and the example.
pub fn measure(block: &str) {
    for l in lines(block) {
        // Environment settings before the command (`VAR=value cargo …`).
        let l: Vec<String> = l.into_iter().skip_while(|w| w.contains('=')).collect();
        assert_eq!(l[0], "cargo", "a benchmark command is a cargo command");
        match (l[1].as_str(), l.iter().position(|w| w == "--")) {
            ("test", _) => test_exists(&l),
            ("bench", _) => {
                let name = &l[l.iter().position(|w| w == "--bench").expect("--bench") + 1];
                assert!(
                    read("crates/rebound-core/Cargo.toml").contains(&format!("name = \"{name}\""))
                );
            }
            ("run", Some(_)) => flags_parse(&after_dashes(&l).unwrap_or_default()),
            ("run", None) => {
                let name = &l[l.iter().position(|w| w == "--example").expect("--example") + 1];
                assert!(root().join(format!("examples/{name}.rs")).is_file());
            }
            (other, _) => panic!("unknown cargo command {other}"),
        }
    }
}

/// `cargo test --locked --test it a::b::name -- --ignored`: the test
/// `name` is in tests/it/a/b.rs (the ignored measurements are run by
/// hand, so nothing else would notice one renamed away).
fn test_exists(l: &[String]) {
    let at = l.iter().position(|w| w == "--test").expect("--test");
    assert_eq!(l[at + 1], "it", "the integration tests are in tests/it");
    let path = &l[at + 2];
    let (module, name) = path.rsplit_once("::").expect("a test path a::b::name");
    let file = root().join(format!("tests/it/{}.rs", module.replace("::", "/")));
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    assert!(
        text.contains(&format!("fn {name}(")),
        "{} has no test {name}",
        file.display()
    );
}

/// `python3 tools/gen-samples.py`: rewrites the generated samples from
/// ../shared (tests/it/samples compare them with the data); it exists.
pub fn gen_samples(block: &str) {
    let l = lines(block).remove(0);
    assert!(root().join(&l[1]).is_file());
}

/// samples/README.md's override: XID 13 becomes Separate, exit code 2
/// Ignore, everything else keeps the shipped levels.
pub fn override_classifications(block: &str) {
    let fc = {
        let p =
            std::env::temp_dir().join(format!("rebound-doc-override-{}.yaml", std::process::id()));
        std::fs::write(&p, block).expect("write");
        p.to_string_lossy().into_owned()
    };
    let level = |fault: &str| {
        decide(&format!("-f samples/ -f {fc} --fault {fault}"))
            .level
            .to_string()
    };
    assert_eq!(level("source=NvidiaXid,code=13,node=gpu-7"), "Separate");
    assert_eq!(level("source=PodExit,exitCode=2,pod=p"), "Ignore");
    assert_eq!(level("source=NvidiaXid,code=79,node=gpu-7"), "Separate");
    assert_eq!(
        level("source=PodExit,exitCode=1,pod=p"),
        level_shipped("source=PodExit,exitCode=1,pod=p")
    );
}

fn level_shipped(fault: &str) -> String {
    decide(&format!("-f samples/ --fault {fault}"))
        .level
        .to_string()
}

/// An inline `rebound …` command: its flags parse (placeholders as the
/// text names them replaced by a value).
pub fn rebound_flags(span: &str) {
    let l = lines(&span.replace("--job-kind K", "--job-kind pytorchjob")).remove(0);
    assert_eq!(l[0], "rebound");
    flags_parse(&l[1..]);
}

/// A `kubectl apply -k` of the admission overlay and the `helm template`
/// that renders the policy without a server: what they name exists.
pub fn install_admission(block: &str) {
    apply_k(block);
    for l in lines(block).into_iter().filter(|l| l[0] == "helm") {
        let args: Vec<&str> = l[2..].iter().map(String::as_str).collect();
        if let Some(objs) = crate::packaging::helm_render(&args) {
            assert!(objs.iter().any(|o| o["kind"] == "MutatingAdmissionPolicy"));
        }
    }
}
