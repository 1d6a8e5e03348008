//! `rebound controller`'s `/metrics` right after start-up: every family
//! docs/metrics.md documents, each labelled one with the label values the
//! docs name, before anything was seen or decided (the API server here
//! never answers), so dashboards and alerts written against the docs see
//! their series from the first scrape.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The body of `GET path` on the controller's listener, once it answers.
fn get(port: u16, path: &str) -> Option<String> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
        .ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let (head, body) = buf.split_once("\r\n\r\n")?;
    head.contains(" 200 ").then(|| body.to_string())
}

/// docs/metrics.md's table: each metric with the label values it names
/// (the backticked words in the parentheses after a label).
fn documented() -> Vec<(String, Vec<(String, String)>)> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/metrics.md"))
        .expect("docs/metrics.md");
    let row = regex::Regex::new(r"(?m)^\| `(rebound_[a-z_]+)` \| [a-z]+ \| ([^|]*) \|").unwrap();
    let label = regex::Regex::new(r"`([a-z]+)` \(([^)]*)\)").unwrap();
    let word = regex::Regex::new(r"`([A-Za-z_]+)`").unwrap();
    row.captures_iter(&doc)
        .map(|r| {
            let values = label
                .captures_iter(&r[2])
                .flat_map(|l| {
                    let name = l[1].to_string();
                    word.captures_iter(&l[2])
                        .map(move |w| (name.clone(), w[1].to_string()))
                        .collect::<Vec<_>>()
                })
                .collect();
            (r[1].to_string(), values)
        })
        .collect()
}

#[test]
fn the_controller_serves_every_documented_family_right_after_start_up() {
    let dir = std::env::temp_dir().join(format!("rebound-metrics-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    // An API server that never answers: nothing is watched or decided.
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1', insecure-skip-tls-verify: true}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n",
    )
    .expect("write kubeconfig");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_rebound"))
        .args(["controller", "--leader-election", "false", "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .env("KUBECONFIG", &kubeconfig)
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start rebound controller");
    let deadline = Instant::now() + Duration::from_secs(60);
    let text = loop {
        if let Some(t) = get(port, "/metrics") {
            break Some(t);
        }
        if Instant::now() > deadline || child.try_wait().ok().flatten().is_some() {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    let text = text.expect("rebound controller served no /metrics within 60s");
    for name in rebound::controller::metrics::NAMES {
        assert!(
            text.lines().any(|l| l.starts_with(name)),
            "{name} has no sample right after start-up:\n{text}"
        );
    }
    let docs = documented();
    assert!(
        docs.len() >= 15,
        "only {} rows read from docs/metrics.md",
        docs.len()
    );
    let mut checked = 0;
    for (metric, values) in docs {
        for (label, value) in values {
            let want = format!("{label}=\"{value}\"");
            assert!(
                text.lines()
                    .any(|l| l.starts_with(&metric) && l.contains(&want)),
                "no {metric}{{{want}}} right after start-up"
            );
            checked += 1;
        }
    }
    assert!(checked >= 30, "only {checked} documented label values");
}

/// The watches the controller names are the ones whose restarts it counts
/// from the start (`metrics::WATCHES`).
#[test]
fn every_watch_of_the_controller_has_its_restart_series() {
    let src = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/crates/rebound/src/controller/watches.rs"
    ))
    .expect("watches.rs");
    let named = regex::Regex::new(r#"(?:wrap|WatchError)\("([a-z-]+)""#).unwrap();
    let mut n = 0;
    for c in named.captures_iter(&src) {
        assert!(
            rebound::controller::metrics::WATCHES.contains(&&c[1]),
            "watch {} is not in metrics::WATCHES",
            &c[1]
        );
        n += 1;
    }
    assert!(n >= 7, "only {n} watches found");
}
