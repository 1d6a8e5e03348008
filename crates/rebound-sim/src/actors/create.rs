//! The one way the simulated operators (Kubeflow, Volcano, JobSet, batch
//! Job) create what they own, so that all four handle a create's answer
//! alike, as real operators do:
//!
//! - **409 AlreadyExists is success.** The operators choose their
//!   children's names themselves (`<job>-worker-0`, `<jobset>-workers-1`),
//!   so an object of that name is the one they wanted: made by an earlier
//!   attempt whose answer was lost, by a racing writer (the bulk set-up of
//!   `rebound sim`), or by a previous leader. The watch then shows it and
//!   the operator adopts it; retrying would only fail again.
//! - **Any other failure backs the job off.** The job's creates pause for
//!   an exponentially growing delay (200 ms doubling to 10 s, per job, as a
//!   controller's rate-limited work queue does), after which the job is
//!   reconciled again. A refusing or overloaded API server is then neither
//!   hammered nor able to wedge a job forever.
//!
//! [`spawn_create`] sends the request on the actor's [`Writer`] and hands
//! its [`Created`] back to the actor's loop; [`CreateBackoff`] is what the
//! loop keeps per job.

use std::collections::HashMap;
use std::fmt::Debug;
use std::time::{Duration, Instant};

use kube::Api;
use kube::api::PostParams;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::runtime::Writer;

/// What came of one create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Created {
    /// The server made the object.
    New,
    /// An object of that name already exists (409 AlreadyExists): for a
    /// name the operator chose, the object it wanted.
    Existed,
    /// The create failed; the text says why (for the log).
    Failed(String),
}

impl Created {
    /// Whether the object exists now (made or found).
    pub fn exists(&self) -> bool {
        !matches!(self, Self::Failed(_))
    }
}

/// The outcome of a create's answer: 409 with reason `AlreadyExists` is
/// [`Created::Existed`]; a 409 of another reason (a conflict, which a
/// create does not normally get) is a failure like any other.
pub(crate) fn outcome<K>(res: Result<K, kube::Error>) -> Created {
    match res {
        Ok(_) => Created::New,
        Err(kube::Error::Api(s)) if s.code == 409 && s.reason == "AlreadyExists" => {
            Created::Existed
        }
        Err(e) => Created::Failed(e.to_string()),
    }
}

/// Creates `obj` (a JSON object of kind `K`) through `api` and says what
/// came of it. An object that does not deserialize as `K` (a job template
/// that makes no valid pod) is a failure without a request.
pub(crate) async fn create<K>(api: &Api<K>, obj: Value) -> Created
where
    K: kube::Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    let name = obj["metadata"]["name"].as_str().unwrap_or("").to_owned();
    let kind = obj["kind"].as_str().unwrap_or("object").to_owned();
    let typed: K = match serde_json::from_value(obj) {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!(%kind, %name, error = %e, "sim operator: the template makes no valid object");
            return Created::Failed(format!("{kind} {name}: {e}"));
        }
    };
    let out = outcome(api.create(&PostParams::default(), &typed).await);
    if let Created::Failed(e) = &out {
        tracing::debug!(%kind, %name, error = %e, "sim operator: create failed; the job backs off");
    }
    out
}

/// Sends [`create`] on the actor's writer (bounded concurrency) and feeds
/// its outcome, wrapped by `done`, back into the actor's loop.
pub(crate) fn spawn_create<K, R>(
    writer: &Writer<R>,
    api: Api<K>,
    obj: Value,
    done: impl FnOnce(Created) -> R + Send + 'static,
) where
    K: kube::Resource + Clone + DeserializeOwned + Serialize + Debug + Send + Sync + 'static,
    R: Send + 'static,
{
    writer.spawn(async move { done(create(&api, obj).await) });
}

/// Per-job backoff of failed creates (keyed by the job's
/// `namespace/name`).
#[derive(Debug, Default)]
pub(crate) struct CreateBackoff {
    jobs: HashMap<String, Retry>,
}

#[derive(Debug)]
struct Retry {
    /// Failures since the job's creates last succeeded.
    failures: u32,
    /// No creates for the job before this.
    until: Instant,
    /// [`CreateBackoff::due`] has already reported the end of this wait.
    reported: bool,
}

impl CreateBackoff {
    /// The first wait after a failure.
    pub const BASE: Duration = Duration::from_millis(200);
    /// The longest wait.
    pub const MAX: Duration = Duration::from_secs(10);

    /// The wait after `failures` failures in a row (1 → [`Self::BASE`],
    /// doubling, at most [`Self::MAX`]).
    pub fn delay(failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(16);
        (Self::BASE * (1u32 << doublings)).min(Self::MAX)
    }

    /// Records the outcome of one of `job`'s creates at `now`; returns
    /// whether the job should be reconciled at once (after a success, as
    /// before; after a failure it waits for [`Self::due`]).
    ///
    /// A success during a wait (another create of the same job that was
    /// already in flight) leaves the wait alone; one after it ends clears
    /// the job's failures.
    pub fn record(&mut self, job: &str, out: &Created, now: Instant) -> bool {
        if out.exists() {
            if self.jobs.get(job).is_some_and(|r| r.until <= now) {
                self.jobs.remove(job);
            }
            return true;
        }
        let r = self.jobs.entry(job.to_owned()).or_insert(Retry {
            failures: 0,
            until: now,
            reported: false,
        });
        // Creates sent together fail together: one backoff step per wait,
        // not one per failed pod of the burst.
        if r.until <= now {
            r.failures += 1;
            r.until = now + Self::delay(r.failures);
            r.reported = false;
        }
        false
    }

    /// Whether `job`'s creates must wait at `now`.
    pub fn waiting(&self, job: &str, now: Instant) -> bool {
        self.jobs.get(job).is_some_and(|r| r.until > now)
    }

    /// The jobs whose wait has ended by `now` and that were not reported
    /// yet: the loop reconciles them (on its tick).
    pub fn due(&mut self, now: Instant) -> Vec<String> {
        self.jobs
            .iter_mut()
            .filter(|(_, r)| r.until <= now && !r.reported)
            .map(|(k, r)| {
                r.reported = true;
                k.clone()
            })
            .collect()
    }

    /// Forgets a job that went away.
    pub fn forget(&mut self, job: &str) {
        self.jobs.remove(job);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{Request, Response};
    use k8s_openapi::api::core::v1::Pod;
    use kube::Client;
    use kube::client::Body;
    use serde_json::json;
    use tower_test::mock;

    fn pod() -> Value {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "job-0-master-0", "namespace": "sim"},
               "spec": {"containers": [{"name": "pytorch", "image": "x"}]}})
    }

    /// A scripted API server answering one POST with `code` and `body`.
    async fn answer_create(code: u16, body: Value) -> (Created, Value) {
        let (svc, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
        let api: Api<Pod> = Api::namespaced(Client::new(svc, "sim"), "sim");
        let server = tokio::spawn(async move {
            let (req, send) = handle.next_request().await.expect("a request");
            assert_eq!(req.method().as_str(), "POST");
            assert_eq!(req.uri().path(), "/api/v1/namespaces/sim/pods");
            let sent = req.into_body().collect_bytes().await.expect("body");
            send.send_response(
                Response::builder()
                    .status(code)
                    .body(Body::from(serde_json::to_vec(&body).expect("json")))
                    .expect("response"),
            );
            serde_json::from_slice::<Value>(&sent).expect("json body")
        });
        let out = create(&api, pod()).await;
        (out, server.await.expect("server"))
    }

    fn status(code: u16, reason: &str, message: &str) -> Value {
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
               "reason": reason, "message": message,
               "details": {"name": "job-0-master-0", "kind": "pods"}})
    }

    #[tokio::test]
    async fn already_exists_is_success_and_sends_the_object_once() {
        let (out, sent) = answer_create(
            409,
            status(
                409,
                "AlreadyExists",
                "pods \"job-0-master-0\" already exists",
            ),
        )
        .await;
        assert_eq!(out, Created::Existed);
        assert!(out.exists());
        assert_eq!(sent["metadata"]["name"], "job-0-master-0");
    }

    #[tokio::test]
    async fn a_conflict_or_server_error_is_a_failure() {
        let (out, _) = answer_create(409, status(409, "Conflict", "the object changed")).await;
        assert!(matches!(out, Created::Failed(_)), "{out:?}");
        let (out, _) =
            answer_create(500, status(500, "InternalError", "etcdserver: timeout")).await;
        assert!(
            matches!(&out, Created::Failed(e) if e.contains("etcdserver")),
            "{out:?}"
        );
        let mut created = pod();
        created["metadata"]["uid"] = json!("u1");
        let (out, _) = answer_create(201, created).await;
        assert_eq!(out, Created::New);
    }

    #[tokio::test]
    async fn a_template_that_makes_no_object_fails_without_a_request() {
        let (svc, _handle) = mock::pair::<Request<Body>, Response<Body>>();
        let api: Api<Pod> = Api::namespaced(Client::new(svc, "sim"), "sim");
        let bad = json!({"apiVersion": "v1", "kind": "Pod",
                         "metadata": {"name": "p"}, "spec": {"containers": "not a list"}});
        assert!(matches!(create(&api, bad).await, Created::Failed(_)));
    }

    #[test]
    fn delays_double_from_the_base_to_the_cap() {
        assert_eq!(CreateBackoff::delay(1), Duration::from_millis(200));
        assert_eq!(CreateBackoff::delay(2), Duration::from_millis(400));
        assert_eq!(CreateBackoff::delay(4), Duration::from_millis(1600));
        assert_eq!(CreateBackoff::delay(7), Duration::from_secs(10));
        assert_eq!(CreateBackoff::delay(1000), Duration::from_secs(10));
    }

    #[test]
    fn a_failure_pauses_the_job_until_due_and_success_clears_it() {
        let mut b = CreateBackoff::default();
        let t0 = Instant::now();
        let fail = Created::Failed("500".into());
        assert!(!b.record("sim/j", &fail, t0), "a failure waits");
        // The rest of the burst fails too: still one step.
        assert!(!b.record("sim/j", &fail, t0 + Duration::from_millis(5)));
        assert!(b.waiting("sim/j", t0 + Duration::from_millis(199)));
        assert!(!b.waiting("sim/other", t0));
        assert!(b.due(t0 + Duration::from_millis(100)).is_empty());
        let t1 = t0 + Duration::from_millis(200);
        assert!(!b.waiting("sim/j", t1));
        assert_eq!(b.due(t1), ["sim/j"]);
        assert!(b.due(t1).is_empty(), "reported once");
        // The retry fails again: the wait doubles.
        assert!(!b.record("sim/j", &fail, t1));
        assert!(b.waiting("sim/j", t1 + Duration::from_millis(399)));
        assert!(!b.waiting("sim/j", t1 + Duration::from_millis(400)));
        // A success during a wait leaves it; one after clears the failures.
        let mut c = CreateBackoff::default();
        c.record("sim/k", &fail, t0);
        assert!(c.record("sim/k", &Created::Existed, t0 + Duration::from_millis(1)));
        assert!(c.waiting("sim/k", t0 + Duration::from_millis(2)));
        assert!(c.record("sim/k", &Created::New, t0 + Duration::from_millis(300)));
        c.record("sim/k", &fail, t0 + Duration::from_millis(300));
        assert!(
            !c.waiting("sim/k", t0 + Duration::from_millis(501)),
            "back to the first step after a success"
        );
        c.forget("sim/k");
        assert!(c.due(t0 + Duration::from_secs(60)).is_empty());
    }
}
