//! Tests of the recovery core driven through its inputs alone: a model
//! cluster answers its effects the way the API server would (uid and
//! resourceVersion preconditions, label selectors, merge patches) and
//! feeds the results back as watch changes, so that interleavings the
//! real world produces (relists, dropped and duplicated events, failed
//! actions, leadership changes, controller restarts) can be generated.

mod adversary;
mod agent_access;
mod bed;
mod breaker;
mod devices;
mod endings;
mod episodes;
mod exactly_once;
mod fresh;
mod held_cordons;
mod model;
mod node_faults;
mod property;
mod regressions;
mod repeats;
mod resumes;
mod skips;
mod startup;
mod trainjob;
mod trust;
mod unseen_jobs;
mod wiring;
