//! The restart agents of the simulated pods, run in-process: each agent
//! container that starts gets a task running the real agent's runner
//! ([`rebound::inplace::agent::run`]) with its own GET and watch of its job,
//! as the real agent would (the API load is part of what the simulation
//! measures). Verdicts come back to the kubelet loop tagged with the pod
//! and the run of the agent container they belong to; a stopped container
//! stops its task.

use std::collections::HashMap;

use kube::Client;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::spec::AgentWiring;
use rebound::inplace::Verdict;
use rebound::inplace::agent;

/// A verdict of one agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AgentVerdict {
    /// `namespace/name` of the pod.
    pub pod: String,
    /// The pod's uid (a pod recreated under the name is another pod).
    pub uid: String,
    /// The run of the agent container.
    pub run: u64,
    /// What the agent decided.
    pub verdict: Verdict,
}

/// The running agents, one per pod at most.
pub(crate) struct Agents {
    client: Client,
    tx: mpsc::UnboundedSender<AgentVerdict>,
    tasks: HashMap<String, JoinHandle<()>>,
}

impl Agents {
    /// Agents that talk through `client` and report on `tx`.
    pub(crate) fn new(client: Client, tx: mpsc::UnboundedSender<AgentVerdict>) -> Agents {
        Agents {
            client,
            tx,
            tasks: HashMap::new(),
        }
    }

    /// Starts the agent of run `run` of pod `pod` (stopping an older one).
    pub(crate) fn start(&mut self, pod: &str, uid: &str, run: u64, wiring: &AgentWiring) {
        self.stop(pod);
        let client = self.client.clone();
        let tx = self.tx.clone();
        let job = wiring.job.clone();
        let cfg = wiring.args.runner_config();
        let (pod_key, uid) = (pod.to_owned(), uid.to_owned());
        let task = tokio::spawn(async move {
            agent::run(client, &job, &cfg, |r| {
                let _ = tx.send(AgentVerdict {
                    pod: pod_key.clone(),
                    uid: uid.clone(),
                    run,
                    verdict: r.verdict,
                });
            })
            .await;
        });
        self.tasks.insert(pod.to_owned(), task);
    }

    /// Stops the agent of `pod`, if any.
    pub(crate) fn stop(&mut self, pod: &str) {
        if let Some(t) = self.tasks.remove(pod) {
            t.abort();
        }
    }
}

impl Drop for Agents {
    fn drop(&mut self) {
        for (_, t) in self.tasks.drain() {
            t.abort();
        }
    }
}
