//! Every sample policy does what its comments and samples/README.md say,
//! through `rebound explain` over the shipped samples.

use super::explain::{assert_outcome, decide};
use rebound::policy::JobAction;

const OPTED_IN: &str = "labels.kcover.io/cascading-recovery=true";

/// The samples' policies and what checks each.
pub fn all() -> Vec<(&'static str, fn())> {
    vec![
        ("cluster-default.yaml", cluster_default),
        ("team-policy.yaml", team_policy),
        ("dry-run.yaml", dry_run),
    ]
}

fn exit1(ns: &str, job: &str, ago: &str) -> String {
    format!(
        "-f samples/ --fault source=PodExit,exitCode=1,reason=Error,namespace={ns},pod={job}-0 --job kind=Job,name={job},namespace={ns},{OPTED_IN} --restarts-ago {ago}"
    )
}

/// Every job kind opted in, in every namespace without a policy of its
/// own; cooldown 1m, 2m from the third restart, 10m from the tenth; five
/// self-inflicted restarts an hour, hardware ones free; logs saved; nodes
/// cordoned and tainted.
fn cluster_default() {
    let run = |ago: &str, want: &str| assert_outcome(&exit1("team-c", "j", ago), want);
    run("2h", "acts");
    run("30s,2h", "Cooldown");
    run("70s,2h", "acts");
    run("90s,2h,3h", "Cooldown");
    run("3m,2h,3h", "acts");
    run("11m,20m,30m,40m,50m", "BudgetExhausted");
    // Not opted in: no policy.
    assert_outcome(
        "-f samples/ --fault source=PodExit,exitCode=1,pod=j-0,namespace=team-c --job kind=Job,name=j,namespace=team-c",
        "NoPolicy",
    );
    // Hardware: free of the budget, logs saved, the node separated.
    let d = decide(&format!(
        "-f samples/ --fault source=NvidiaXid,code=79,node=gpu-7 --job kind=Job,name=j,namespace=team-c,{OPTED_IN} --restarts-ago 11m,20m,30m,40m,50m"
    ));
    assert_eq!(
        d.jobs[0].policy.as_deref(),
        Some("rebound-system/cluster-default")
    );
    assert!(d.jobs[0].acts(), "{:?}", d.jobs[0].reasons);
    assert!(matches!(
        d.jobs[0].action,
        Some(JobAction::RestartJob {
            preserve_logs: Some((300, _))
        })
    ));
    assert!(
        d.node
            .as_ref()
            .is_some_and(|n| n.acts() && n.actions.len() == 2)
    );
    // A GPU's reset fault: one device isolated under DRA, after a
    // validation (explain says so; offline it shows the node's action).
    let d = decide(&format!(
        "-f samples/ --fault source=NvidiaXid,code=48,node=gpu-7,device=3 --job kind=Job,name=j,namespace=team-c,{OPTED_IN}"
    ));
    let node = d.node.as_ref().expect("a node decision");
    assert!(
        node.reasons
            .iter()
            .any(|r| r.starts_with("isolation: Device")
                && r.contains("device 3")
                && r.contains("validation Job passes")),
        "{:?}",
        node.reasons
    );
    assert!(
        d.jobs[0]
            .reasons
            .iter()
            .any(|r| r.starts_with("device scope")),
        "{:?}",
        d.jobs[0].reasons
    );
}

/// team-a: its three kinds, a gate (20 restarts, a pause annotation), the
/// failing pod first, cooldown 1m then 5m, ten restarts in six hours.
fn team_policy() {
    let job = |kind: &str, extra: &str, ago: &str| {
        format!(
            "-f samples/ --fault source=PodExit,exitCode=1,reason=Error,namespace=team-a,pod=llm-worker-0 --job kind={kind},name=llm,namespace=team-a,{OPTED_IN}{extra} --restarts-ago {ago}"
        )
    };
    let d = decide(&job("PyTorchJob", "", "2h"));
    assert_eq!(d.jobs[0].policy.as_deref(), Some("team-a/llm-training"));
    assert!(
        matches!(&d.jobs[0].action, Some(JobAction::RestartPod { pod, .. }) if pod == "llm-worker-0"),
        "the pod first: {:?}",
        d.jobs[0].action
    );
    // A batch Job of team-a is not one of its kinds: the cluster default.
    let d = decide(&job("Job", "", "2h"));
    assert_eq!(
        d.jobs[0].policy.as_deref(),
        Some("rebound-system/cluster-default")
    );
    assert_outcome(
        &job("PyTorchJob", ",annotations.rebound.dev/pause=true", "2h"),
        "GateFalse",
    );
    assert_outcome(&job("PyTorchJob", "", "2m,2h,3h"), "Cooldown");
    assert_outcome(&job("PyTorchJob", "", "6m,2h,3h"), "acts");
    let ten = (1..=10)
        .map(|h| format!("{}m", h * 20))
        .collect::<Vec<_>>()
        .join(",");
    assert_outcome(&job("PyTorchJob", "", &ten), "BudgetExhausted");
}

/// team-b: everything decided, nothing done.
fn dry_run() {
    let d = decide(&exit1("team-b", "j", "2h"));
    assert_eq!(d.jobs[0].policy.as_deref(), Some("team-b/try-rebound"));
    assert_eq!(d.jobs[0].skip.as_ref().map(|s| s.name()), Some("DryRun"));
    assert!(
        d.jobs[0].action.is_some(),
        "the action it would take is recorded"
    );
}
