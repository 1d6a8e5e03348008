//! `rebound restart-agent`: the in-pod agent of in-place restarts
//! (docs/in-place.md), run as a native sidecar. It follows its job's
//! restart generation with [`super::agent::run`], answers the kubelet's
//! startup probe on `GET /barrier` (200 once the barrier is open, 503
//! while it holds) and exits with the restart rule's code when its pod is
//! behind, so that the kubelet restarts every container of the pod in
//! place.
//!
//! It is meant to cost almost nothing per pod: one current-thread runtime,
//! one `GET` and one watch of one object, a two-route probe server, no
//! metrics server.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;

use super::agent::{self, AgentError, JobRef, RunnerConfig};
use super::{DEFAULT_EXIT_CODE, DEFAULT_PROBE_PORT, PROBE_PATH, Verdict};

/// Environment variable of the job's API resource (`group/version/plural`).
pub const ENV_JOB_API: &str = "REBOUND_JOB_API";
/// Environment variable of the job's name (downward API: the pod's
/// job-name label).
pub const ENV_JOB_NAME: &str = "REBOUND_JOB_NAME";
/// Environment variable of the pod's namespace (downward API
/// `metadata.namespace`).
pub const ENV_NAMESPACE: &str = "POD_NAMESPACE";
/// Environment variable of the exit code (`--exit-code`).
pub const ENV_EXIT_CODE: &str = "REBOUND_EXIT_CODE";
/// Environment variable of the probe port (`--probe-port`).
pub const ENV_PROBE_PORT: &str = "REBOUND_PROBE_PORT";
/// Environment variable of `--fail-open-after`.
pub const ENV_FAIL_OPEN_AFTER: &str = "REBOUND_FAIL_OPEN_AFTER";

/// Flags of `rebound restart-agent`; each also reads an environment
/// variable, so that `rebound inject` can wire the job through the
/// downward API.
#[derive(clap::Args, Clone, Debug, PartialEq, Eq)]
pub struct RestartAgentArgs {
    /// The job's API resource: `group/version/plural`, e.g.
    /// `kubeflow.org/v1/pytorchjobs`, `batch.volcano.sh/v1alpha1/jobs`,
    /// `batch/v1/jobs` (core kinds: `v1/pods`).
    #[arg(long, env = ENV_JOB_API)]
    pub job_api: String,
    /// The job's name (downward API: the pod's job-name label).
    #[arg(long, env = ENV_JOB_NAME)]
    pub job_name: String,
    /// The pod's (and the job's) namespace.
    #[arg(long, env = ENV_NAMESPACE)]
    pub namespace: String,
    /// Exit code when the pod is behind its job's generation: the code the
    /// pod's `RestartAllContainers` rule matches.
    #[arg(long, env = ENV_EXIT_CODE, default_value_t = DEFAULT_EXIT_CODE,
          value_parser = super::parse_exit_code)]
    pub exit_code: i32,
    /// Port of the startup probe (`GET /barrier`) and `/healthz`.
    #[arg(long, env = ENV_PROBE_PORT, default_value_t = DEFAULT_PROBE_PORT)]
    pub probe_port: u16,
    /// Open the barrier if the job could not be read at all for this long
    /// (no RBAC, no object): broken wiring must not keep training from
    /// starting. humantime: `60s`, `2m`.
    #[arg(long, env = ENV_FAIL_OPEN_AFTER, default_value = "60s",
          value_parser = humantime::parse_duration)]
    pub fail_open_after: Duration,
}

/// One parser for the command line of an agent container, used where the
/// flags arrive as data (the simulated kubelet runs the agent in-process
/// from the container's command, arguments and environment).
#[derive(clap::Parser, Debug)]
#[command(name = "restart-agent", no_binary_name = false)]
struct Standalone {
    #[command(flatten)]
    args: RestartAgentArgs,
}

impl RestartAgentArgs {
    /// The job to follow.
    pub fn job(&self) -> Result<JobRef, AgentError> {
        JobRef::parse(&self.job_api, &self.namespace, &self.job_name)
    }

    /// The runner's configuration for these flags.
    pub fn runner_config(&self) -> RunnerConfig {
        RunnerConfig {
            fail_open_after: self.fail_open_after,
            ..RunnerConfig::default()
        }
    }

    /// The flags of an agent container: `argv` is its command and
    /// arguments (what follows `restart-agent` counts, so `["rebound",
    /// "restart-agent", "--exit-code=90"]` and `["--exit-code=90"]` both
    /// work), `env` its resolved environment. Environment variables are
    /// turned into flags, which flags on the command line override, as the
    /// real binary reads them.
    pub fn from_container(argv: &[String], env: &[(String, String)]) -> Result<Self, String> {
        let after = argv
            .iter()
            .position(|a| a == "restart-agent")
            .map_or(0, |i| i + 1);
        let flags: Vec<&String> = argv[after..].iter().collect();
        let mut full: Vec<String> = vec!["restart-agent".into()];
        let by_env = [
            (ENV_JOB_API, "--job-api"),
            (ENV_JOB_NAME, "--job-name"),
            (ENV_NAMESPACE, "--namespace"),
            (ENV_EXIT_CODE, "--exit-code"),
            (ENV_PROBE_PORT, "--probe-port"),
            (ENV_FAIL_OPEN_AFTER, "--fail-open-after"),
        ];
        for (var, flag) in by_env {
            let given = flags
                .iter()
                .any(|f| f.as_str() == flag || f.starts_with(&format!("{flag}=")));
            if given {
                continue;
            }
            if let Some((_, v)) = env.iter().rev().find(|(k, _)| k == var) {
                full.push(format!("{flag}={v}"));
            }
        }
        full.extend(flags.into_iter().cloned());
        <Standalone as clap::Parser>::try_parse_from(full)
            .map(|s| s.args)
            .map_err(|e| e.to_string())
    }
}

/// Why the agent could not run.
#[derive(Debug, thiserror::Error)]
pub enum RestartAgentError {
    /// The flags name no usable job.
    #[error("restart agent: {0}")]
    Config(#[from] AgentError),
    /// No client configuration (not in a pod, no kubeconfig).
    #[error("restart agent: kubernetes client: {0}")]
    Client(#[source] kube::Error),
    /// The probe port could not be bound.
    #[error("restart agent: cannot serve the probe on port {port}: {source}")]
    Probe {
        /// The port asked for.
        port: u16,
        /// What bind said.
        source: std::io::Error,
    },
    /// The runtime could not be built.
    #[error("restart agent: runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// SIGTERM could not be handled.
    #[error("restart agent: cannot handle SIGTERM: {0}")]
    Signal(#[source] std::io::Error),
}

async fn barrier(State(open): State<Arc<AtomicBool>>) -> (StatusCode, &'static str) {
    if open.load(Ordering::Relaxed) {
        (StatusCode::OK, "open\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "holding\n")
    }
}

/// The probe server: `GET /barrier` and `GET /healthz`.
pub fn probe_router(open: Arc<AtomicBool>) -> Router {
    Router::new()
        .route(PROBE_PATH, get(barrier))
        .route("/healthz", get(|| async { "ok\n" }))
        .with_state(open)
}

/// Runs the agent until its pod is behind, and returns the exit code the
/// process must exit with (the caller exits: nothing else is left to do).
pub fn run(args: RestartAgentArgs) -> Result<i32, RestartAgentError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(RestartAgentError::Runtime)?;
    rt.block_on(serve(args))
}

async fn serve(args: RestartAgentArgs) -> Result<i32, RestartAgentError> {
    let job = args.job()?;
    let open = Arc::new(AtomicBool::new(false));
    let addr = SocketAddr::from((Ipv4Addr::UNSPECIFIED, args.probe_port));
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| RestartAgentError::Probe {
            port: args.probe_port,
            source,
        })?;
    let app = probe_router(open.clone());
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "restart agent: probe server stopped");
        }
    });
    let client = kube::Client::try_default()
        .await
        .map_err(RestartAgentError::Client)?;
    tracing::info!(job = %job, exit_code = args.exit_code, port = args.probe_port, "restart agent: following the job's restart generation");
    // The agent is its container's PID 1, which the kernel gives no
    // default action for SIGTERM: without a handler, every stop of the pod
    // (a delete, a Recreate) waited the whole terminationGracePeriodSeconds
    // for the agent (measured on a real kubelet: delete → gone 12.9 s with
    // a 10 s grace period). Asked to stop, it stops at once, with 0 (never
    // the rule's code, so nothing restarts).
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(RestartAgentError::Signal)?;
    let cfg = args.runner_config();
    let run = agent::run(client, &job, &cfg, |r| {
        open.store(r.verdict == Verdict::Open, Ordering::Relaxed);
        match r.verdict {
            Verdict::Exit => {}
            _ => tracing::info!(job = %job, "restart agent: {r}"),
        }
    });
    tokio::select! {
        report = run => {
            tracing::warn!(job = %job, exit_code = args.exit_code, "restart agent: {report}");
            Ok(args.exit_code)
        }
        _ = term.recv() => {
            tracing::info!(job = %job, "restart agent: stopped (SIGTERM)");
            Ok(0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| (*x).to_owned()).collect()
    }

    fn env(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn an_exit_code_the_agent_fails_with_is_refused() {
        let args = |code: &str| {
            let e = env(&[
                (ENV_JOB_API, "kubeflow.org/v1/pytorchjobs"),
                (ENV_JOB_NAME, "train"),
                (ENV_NAMESPACE, "ml"),
                (ENV_EXIT_CODE, code),
            ]);
            RestartAgentArgs::from_container(&s(&["rebound", "restart-agent"]), &e)
        };
        assert_eq!(args("87").map(|a| a.exit_code), Ok(87));
        for code in ["1", "101", "137", "143"] {
            let err = args(code).expect_err("a failure exit");
            assert!(err.contains("cannot be the restart exit code"), "{err}");
        }
    }

    #[test]
    fn a_container_is_read_from_its_environment_and_flags() {
        let e = env(&[
            (ENV_JOB_API, "kubeflow.org/v1/pytorchjobs"),
            (ENV_JOB_NAME, "train"),
            (ENV_NAMESPACE, "ml"),
            (ENV_EXIT_CODE, "90"),
        ]);
        let a =
            RestartAgentArgs::from_container(&s(&["rebound", "restart-agent"]), &e).expect("args");
        assert_eq!(a.exit_code, 90);
        assert_eq!(a.probe_port, DEFAULT_PROBE_PORT);
        assert_eq!(a.fail_open_after, Duration::from_secs(60));
        let job = a.job().expect("job");
        assert_eq!(
            (
                job.group.as_str(),
                job.version.as_str(),
                job.plural.as_str()
            ),
            ("kubeflow.org", "v1", "pytorchjobs")
        );
        assert_eq!((job.namespace.as_str(), job.name.as_str()), ("ml", "train"));
        // A flag beats the environment, as with the real binary.
        let a = RestartAgentArgs::from_container(
            &s(&[
                "rebound",
                "restart-agent",
                "--exit-code",
                "91",
                "--fail-open-after=5s",
            ]),
            &e,
        )
        .expect("args");
        assert_eq!(
            (a.exit_code, a.fail_open_after),
            (91, Duration::from_secs(5))
        );
    }

    #[test]
    fn missing_wiring_and_bad_codes_are_refused() {
        let e = env(&[(ENV_JOB_API, "batch/v1/jobs"), (ENV_NAMESPACE, "ml")]);
        let err = RestartAgentArgs::from_container(&s(&["restart-agent"]), &e).unwrap_err();
        assert!(err.contains("--job-name"), "{err}");
        let e = env(&[
            (ENV_JOB_API, "batch/v1/jobs"),
            (ENV_NAMESPACE, "ml"),
            (ENV_JOB_NAME, "j"),
        ]);
        assert!(RestartAgentArgs::from_container(&s(&["--exit-code=0"]), &e).is_err());
        assert!(RestartAgentArgs::from_container(&s(&["--exit-code=256"]), &e).is_err());
        let a = RestartAgentArgs::from_container(&[], &e).expect("core-group kinds parse");
        assert_eq!(a.job().expect("job").group, "batch");
        let mut bad = a.clone();
        bad.job_api = "pytorchjobs".into();
        assert!(matches!(bad.job(), Err(AgentError::BadApi(_))));
        let mut core = a;
        core.job_api = "v1/pods".into();
        let j = core.job().expect("core group");
        assert_eq!((j.group.as_str(), j.version.as_str()), ("", "v1"));
    }
}
