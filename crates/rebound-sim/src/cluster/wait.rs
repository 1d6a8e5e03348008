//! Waiting for a cluster to reach a state: running pods, or any polled
//! condition.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;

use super::ClusterError;

/// Whether a pod runs with every container ready (and is not being deleted).
pub fn pod_running(p: &Pod) -> bool {
    let Some(st) = &p.status else { return false };
    p.metadata.deletion_timestamp.is_none()
        && st.phase.as_deref() == Some("Running")
        && st
            .container_statuses
            .as_ref()
            .is_some_and(|cs| !cs.is_empty() && cs.iter().all(|c| c.ready))
}

/// Polls `check` until it yields a value or `timeout` passes.
pub async fn wait_for<T, F, Fut>(
    timeout: Duration,
    what: &str,
    mut check: F,
) -> Result<T, ClusterError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>, ClusterError>>,
{
    let start = Instant::now();
    loop {
        let t = Instant::now();
        if let Some(v) = check().await? {
            return Ok(v);
        }
        if start.elapsed() > timeout {
            return Err(ClusterError::Timeout {
                what: what.to_owned(),
                after: timeout,
            });
        }
        // Polling must not starve the cluster it waits for: a check that
        // costs much (listing thousands of pods) runs less often.
        let pause = (t.elapsed() * 4).clamp(Duration::from_millis(20), Duration::from_secs(2));
        tokio::time::sleep(pause).await;
    }
}
