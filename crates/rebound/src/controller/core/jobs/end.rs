//! How a recovery ended, told where users look: a `JobResumed` Event with
//! the time the job lost, or a `JobNotResumed` Event with why it did not
//! come back (its operator gave up, its pods were not back within the
//! bound, the job changed under it), the `rebound_time_to_resume_seconds`
//! histogram by kind and tier, `rebound_jobs_not_resumed_total`, and the
//! policy's status. A recovery whose restart was never made ends without
//! either (its caller wrote the `RestartSkipped` that says why).

use super::super::{Core, Now};
use super::Recovery;
use crate::metrics::{KindLabels, ResumeLabels};
use crate::recover::{Notice, reasons};
use std::time::Duration;

/// How a recovery ended.
#[derive(Clone, Debug, PartialEq)]
pub enum End {
    /// Every pod of the job's new generation runs and is Ready.
    Resumed,
    /// The restart was made and the job does not run again: why.
    NotResumed(String),
    /// No restart was made; the caller said why.
    Dropped,
}

impl Core {
    pub(in crate::controller::core) fn report_end(&mut self, rec: &Recovery, end: End, now: Now) {
        let kind = rec.job.kind.as_str();
        match end {
            End::Resumed => {
                let lost = (now.wall - rec.cause.fault.last_seen)
                    .to_std()
                    .unwrap_or_default();
                let secs = lost.as_secs_f64();
                self.metrics
                    .time_to_resume
                    .get_or_create(&ResumeLabels {
                        kind,
                        tier: rec.tier.name(),
                    })
                    .observe(secs);
                if let Some(p) = &rec.cause.policy {
                    self.status.resumed(p, lost);
                }
                tracing::info!(job = %rec.job.id(), tier = rec.tier.name(), seconds = secs, "job running again");
                let note = format!(
                    "running again {} after the fault ({} restart for {}): every pod of the new generation runs and is Ready",
                    format_lost(lost),
                    rec.tier.name(),
                    super::super::effect::describe(&rec.cause.fault),
                );
                self.job_event(
                    &rec.job,
                    Notice::normal(reasons::JOB_RESUMED, "Resume", note),
                );
            }
            End::NotResumed(why) => {
                self.metrics
                    .not_resumed
                    .get_or_create(&KindLabels { kind: kind.into() })
                    .inc();
                if let Some(p) = &rec.cause.policy {
                    self.status.not_resumed(p);
                }
                tracing::warn!(job = %rec.job.id(), tier = rec.tier.name(), %why, "job not running again");
                let note = format!(
                    "not running again after its {} restart for {}: {why}",
                    rec.tier.name(),
                    super::super::effect::describe(&rec.cause.fault),
                );
                self.job_event(
                    &rec.job,
                    Notice::warning(reasons::JOB_NOT_RESUMED, "Resume", note),
                );
            }
            End::Dropped => return,
        }
        if matches!(
            rec.job.kind,
            crate::api::WorkloadKind::Pod | crate::api::WorkloadKind::VolcanoJob
        ) {
            // A bare pod carries no record to follow; a Volcano Job is
            // never written beside its own controller's restart (issue
            // 32): a new leader does not follow its restarts (resume.rs).
            return;
        }
        self.effect(
            super::super::effect::EffectKind::MarkEnded {
                job: rec.job.clone(),
                at: rec.started,
            },
            None,
        );
    }
}

/// Seconds to a tenth below a minute, humantime above.
fn format_lost(d: Duration) -> String {
    if d < Duration::from_secs(60) {
        format!("{:.1}s", d.as_secs_f64())
    } else {
        crate::api::duration::format(Duration::from_secs(d.as_secs()))
    }
}
