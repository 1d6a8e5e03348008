//! Fencing: an effect decided in one leadership term is carried out only
//! while that term lasts, to its end. The executor checks the term before
//! each request ([`Leadership::leads_in`]), and [`fenced`] drops a request
//! still under way when the term ends (the local deadline passes, the
//! replica is revoked, or a new term begins): a slow request cannot land
//! after a standby may have taken the Lease over, since the deadline keeps
//! the Lease's grace before that moment.

use crate::k8s::leader::Leadership;
use std::future::Future;

use super::core::effect::Outcome;

/// Run `work` (the requests of one effect of `term`) unless or until the
/// term ends; then it is dropped (its request cancelled) and the outcome
/// is [`Outcome::NotLeader`].
pub async fn fenced<F: Future<Output = Outcome>>(
    leader: &Leadership,
    term: u64,
    work: F,
) -> Outcome {
    tokio::select! {
        biased;
        _ = leader.lost(term) => Outcome::NotLeader,
        o = work => o,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};

    /// A request that lands (sets `landed`) only if it runs to its end,
    /// `takes` after it starts.
    async fn request(landed: Arc<AtomicBool>, takes: Duration) -> Outcome {
        tokio::time::sleep(takes).await;
        landed.store(true, Ordering::Release);
        Outcome::Ok("done".into())
    }

    #[tokio::test]
    async fn a_request_under_way_when_the_lease_lapses_never_lands() {
        let lead = Leadership::leading_until(Instant::now() + Duration::from_millis(150)).await;
        let term = lead.term();
        assert!(lead.leads_in(term), "it leads when the request leaves");
        let landed = Arc::new(AtomicBool::new(false));
        let started = Instant::now();
        let o = fenced(&lead, term, request(landed.clone(), Duration::from_secs(2))).await;
        assert!(matches!(o, Outcome::NotLeader), "{o:?}");
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "dropped at the lapse"
        );
        // Long after the request would have finished: it never landed.
        tokio::time::sleep(Duration::from_millis(2200)).await;
        assert!(!landed.load(Ordering::Acquire));
    }

    #[tokio::test]
    async fn a_request_within_its_term_lands() {
        // Positive control: the same request, the Lease held throughout.
        let lead = Leadership::leading_until(Instant::now() + Duration::from_secs(30)).await;
        let landed = Arc::new(AtomicBool::new(false));
        let o = fenced(
            &lead,
            lead.term(),
            request(landed.clone(), Duration::from_millis(100)),
        )
        .await;
        assert!(matches!(o, Outcome::Ok(_)));
        assert!(landed.load(Ordering::Acquire));
        // A request of another term never starts.
        let landed = Arc::new(AtomicBool::new(false));
        let o = fenced(
            &lead,
            lead.term() + 1,
            request(landed.clone(), Duration::ZERO),
        )
        .await;
        assert!(matches!(o, Outcome::NotLeader));
        assert!(!landed.load(Ordering::Acquire));
    }
}
