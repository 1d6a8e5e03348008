//! From what was injected and what was seen to the reaction figures: each
//! fault is matched with the controller's first action on its job or node,
//! on the server's clock (request log or audit log) and on the client's
//! (effects seen through a watch).

use crate::proxy::route::decode_query;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::SystemTime;

use super::serverlog::ServerRequest;
use super::stats::{Percentiles, percentiles};

/// What a fault should make the controller act on.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Subject {
    /// A job (by name), restarted.
    Job(String),
    /// A node (by name), cordoned.
    Node(String),
}

/// One injected fault.
#[derive(Debug, Clone)]
pub struct Injected {
    /// When the injection started (before the injector's GET).
    pub start: SystemTime,
    /// When the injector had the answer to its status write.
    pub answered: Option<SystemTime>,
    /// What should react.
    pub subject: Subject,
    /// Resource of the object whose status write carries the fault.
    pub resource: &'static str,
    /// That object's name.
    pub name: String,
}

impl Injected {
    /// A fault injected from `start` on.
    pub fn new(start: SystemTime, subject: Subject, resource: &'static str, name: &str) -> Self {
        Injected {
            start,
            answered: None,
            subject,
            resource,
            name: name.to_owned(),
        }
    }

    /// When the server completed the status write that carries the fault
    /// (the first successful one after the injection started).
    pub fn committed(&self, reqs: &[ServerRequest]) -> Option<SystemTime> {
        reqs.iter()
            .filter(|r| r.received >= self.start && r.status < 300)
            .filter(|r| matches!(r.verb.as_str(), "patch" | "update") && r.subresource == "status")
            .find(|r| r.resource == self.resource && r.name.as_deref() == Some(&self.name))
            .map(|r| r.completed)
    }
}

/// Milliseconds from `a` to `b`, negative when `b` came first.
pub fn ms_between(a: SystemTime, b: SystemTime) -> f64 {
    match b.duration_since(a) {
        Ok(d) => d.as_secs_f64() * 1000.0,
        Err(e) => -e.duration().as_secs_f64() * 1000.0,
    }
}

/// The subject of a controller action, recognised in the server's log: a
/// `deletecollection` of a job's pods (by its `...job-name` label) or a
/// patch of a node.
pub fn action_subject(r: &ServerRequest) -> Option<Subject> {
    if !r.by_controller() || r.status >= 300 {
        return None;
    }
    match (r.verb.as_str(), r.resource.as_str(), r.subresource.as_str()) {
        ("deletecollection", "pods", "") => {
            let q = decode_query(&r.query);
            let sel = q
                .split('&')
                .find_map(|kv| kv.strip_prefix("labelSelector="))?;
            let job = sel.split(',').find_map(|kv| {
                kv.split_once('=')
                    .filter(|(k, _)| k.ends_with("job-name"))
                    .map(|(_, v)| v.to_string())
            })?;
            Some(Subject::Job(job))
        }
        ("patch", "nodes", "") => Some(Subject::Node(r.name.clone()?)),
        _ => None,
    }
}

/// Reaction percentiles on one clock.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Reactions {
    /// From the fault's write (committed at the server, or answered to the
    /// injector) to the action.
    pub from_write: Percentiles,
    /// From the injection's start to the action.
    pub from_injection: Percentiles,
    /// From the fault's write committed to the action committed (the
    /// action request's answer: for a `deletecollection`, every pod
    /// marked deleted). Server clock only; empty on the client's.
    pub to_committed: Percentiles,
}

/// Server clock: the fault's write completed → the first action request
/// arriving, for each fault that has both in `reqs`.
pub fn server_reactions(injected: &[Injected], reqs: &[ServerRequest]) -> Reactions {
    let actions: Vec<(SystemTime, Subject)> = reqs
        .iter()
        .filter_map(|r| action_subject(r).map(|s| (r.received, s)))
        .collect();
    let mut from_write = Vec::new();
    let mut from_injection = Vec::new();
    let mut to_committed = Vec::new();
    for inj in injected {
        let Some(at) = first_after(&actions, inj) else {
            continue;
        };
        from_injection.push(ms_between(inj.start, at));
        if let Some(c) = inj.committed(reqs) {
            from_write.push(ms_between(c, at));
            // The same first action's answer.
            let done = reqs
                .iter()
                .filter(|r| r.received == at)
                .find(|r| action_subject(r).as_ref() == Some(&inj.subject))
                .map(|r| r.completed);
            if let Some(done) = done {
                to_committed.push(ms_between(c, done));
            }
        }
    }
    Reactions {
        from_write: percentiles(from_write),
        from_injection: percentiles(from_injection),
        to_committed: percentiles(to_committed),
    }
}

/// Client clock: the injector's write answered → the action's effect seen
/// through a watch.
pub fn client_reactions(injected: &[Injected], effects: &[(SystemTime, Subject)]) -> Reactions {
    let mut from_write = Vec::new();
    let mut from_injection = Vec::new();
    for inj in injected {
        let Some(at) = first_after(effects, inj) else {
            continue;
        };
        from_injection.push(ms_between(inj.start, at));
        if let Some(a) = inj.answered {
            from_write.push(ms_between(a, at));
        }
    }
    Reactions {
        from_write: percentiles(from_write),
        from_injection: percentiles(from_injection),
        to_committed: Percentiles::default(),
    }
}

/// How many subjects the server's log shows acted on (a job's pods
/// deleted, a node patched) that no effect seen through the watch names
/// yet. A node patch that only uncordons has no effect to see, so a
/// subject counts as seen once any effect of it was.
pub fn unseen_subjects(reqs: &[ServerRequest], effects: &[(SystemTime, Subject)]) -> usize {
    let seen: HashSet<&Subject> = effects.iter().map(|(_, s)| s).collect();
    reqs.iter()
        .filter_map(action_subject)
        .collect::<HashSet<Subject>>()
        .iter()
        .filter(|s| !seen.contains(s))
        .count()
}

fn first_after(seen: &[(SystemTime, Subject)], inj: &Injected) -> Option<SystemTime> {
    seen.iter()
        .filter(|(at, s)| *at >= inj.start && *s == inj.subject)
        .map(|(at, _)| *at)
        .min()
}

/// What the server's log says the controller did.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ControllerWrites {
    /// Restart requests per job.
    pub restarts: HashMap<String, usize>,
    /// Writes by `verb resource[/subresource]`.
    pub by_verb: BTreeMap<String, u64>,
    /// Most writes in one second (of the measured phase).
    pub peak_per_second: usize,
}

/// Counts the controller's writes in `reqs` (all from the measured phase,
/// which began at `since`).
pub fn controller_writes(reqs: &[ServerRequest], since: SystemTime) -> ControllerWrites {
    let mut w = ControllerWrites::default();
    let mut per_sec: HashMap<u64, usize> = HashMap::new();
    for r in reqs.iter().filter(|r| r.received >= since) {
        if let Some(Subject::Job(j)) = action_subject(r) {
            *w.restarts.entry(j).or_default() += 1;
        }
        let write = matches!(
            r.verb.as_str(),
            "deletecollection" | "create" | "patch" | "update" | "delete"
        );
        if write && r.by_controller() {
            *w.by_verb.entry(r.verb_key()).or_default() += 1;
            let sec = r.received.duration_since(since).map_or(0, |d| d.as_secs());
            *per_sec.entry(sec).or_default() += 1;
        }
    }
    w.peak_per_second = per_sec.values().copied().max().unwrap_or(0);
    w
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[allow(clippy::too_many_arguments)]
    fn req(
        t0: SystemTime,
        verb: &str,
        resource: &str,
        sub: &str,
        name: Option<&str>,
        query: &str,
        at_ms: u64,
        took_ms: u64,
        controller: bool,
    ) -> ServerRequest {
        let received = t0 + Duration::from_millis(at_ms);
        ServerRequest {
            received,
            completed: received + Duration::from_millis(took_ms),
            verb: verb.into(),
            resource: resource.into(),
            subresource: sub.into(),
            namespace: Some("sim".into()),
            name: name.map(str::to_owned),
            query: query.into(),
            status: 200,
            user_agent: Some(
                if controller {
                    "rebound-controller/0.1.0"
                } else {
                    "rebound-sim"
                }
                .into(),
            ),
        }
    }

    #[test]
    fn a_fault_is_committed_when_its_status_write_is_answered() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let reqs = vec![
            req(
                t0,
                "get",
                "pods",
                "",
                Some("job-1-worker-0"),
                "",
                1,
                1,
                false,
            ),
            req(
                t0,
                "patch",
                "pods",
                "status",
                Some("job-11-worker-0"),
                "",
                2,
                1,
                false,
            ),
            req(
                t0,
                "patch",
                "pods",
                "status",
                Some("job-1-worker-0"),
                "",
                3,
                2,
                false,
            ),
        ];
        let inj = Injected::new(t0, Subject::Job("job-1".into()), "pods", "job-1-worker-0");
        assert_eq!(inj.committed(&reqs), Some(t0 + Duration::from_millis(5)));
        let none = Injected::new(t0, Subject::Job("job-2".into()), "pods", "job-2-worker-0");
        assert_eq!(none.committed(&reqs), None);
    }

    #[test]
    fn reactions_pair_each_fault_with_the_controllers_first_action_on_it() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let sel = "labelSelector=training.kubeflow.org%2Fjob-name%3Djob-1";
        let reqs = vec![
            req(
                t0,
                "patch",
                "pods",
                "status",
                Some("job-1-worker-0"),
                "",
                10,
                2,
                false,
            ),
            // Someone else's deletecollection is no action of the controller.
            req(t0, "deletecollection", "pods", "", None, sel, 13, 5, false),
            req(t0, "deletecollection", "pods", "", None, sel, 15, 5, true),
            req(t0, "deletecollection", "pods", "", None, sel, 40, 5, true),
            req(t0, "patch", "nodes", "status", Some("n1"), "", 20, 1, false),
            req(t0, "patch", "nodes", "", Some("n1"), "", 30, 1, true),
        ];
        let mut a = Injected::new(t0, Subject::Job("job-1".into()), "pods", "job-1-worker-0");
        a.answered = Some(t0 + Duration::from_millis(16));
        let b = Injected::new(
            t0 + Duration::from_millis(19),
            Subject::Node("n1".into()),
            "nodes",
            "n1",
        );
        let r = server_reactions(&[a.clone(), b.clone()], &reqs);
        assert_eq!(r.from_write.count, 2);
        // job: committed at 12, action at 15; node: committed at 21, action at 30.
        let close = |x: f64, y: f64| (x - y).abs() < 1e-6;
        assert!(
            close(r.from_write.p50, 3.0) && close(r.from_write.max, 9.0),
            "{r:?}"
        );
        assert!(close(r.from_injection.max, 15.0), "{r:?}");
        // To the first action's answer: job 15 + 5 - 12 = 8, node 30 + 1 - 21 = 10
        // (the later deletecollection at 40 is not the first action).
        assert_eq!(r.to_committed.count, 2, "{r:?}");
        assert!(
            close(r.to_committed.p50, 8.0) && close(r.to_committed.max, 10.0),
            "{r:?}"
        );
        let w = controller_writes(&reqs, t0);
        assert_eq!(w.restarts["job-1"], 2);
        assert_eq!(w.by_verb["deletecollection pods"], 2);
        assert_eq!(w.by_verb["patch nodes"], 1);
        assert_eq!(w.peak_per_second, 3);
        // The client saw the restart 1 ms before its own patch was answered.
        let effects = vec![
            (t0 + Duration::from_millis(15), Subject::Job("job-1".into())),
            (t0 + Duration::from_millis(35), Subject::Node("n1".into())),
        ];
        let c = client_reactions(&[a, b], &effects);
        assert_eq!(c.from_write.count, 1, "the node's answer was not recorded");
        assert!(close(c.from_write.p50, -1.0), "{c:?}");
        assert_eq!(c.from_injection.count, 2);
        // Settling waits for the effects of both actions, and only for them.
        assert_eq!(unseen_subjects(&reqs, &effects[..1]), 1);
        assert_eq!(unseen_subjects(&reqs, &effects), 0);
        assert_eq!(unseen_subjects(&reqs[..3], &[]), 1);
    }

    #[test]
    fn queries_are_percent_decoded() {
        assert_eq!(
            decode_query("labelSelector=a%2Fb%3Dc%2Cd+e"),
            "labelSelector=a/b=c,d e"
        );
    }
}
