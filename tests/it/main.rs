//! Integration tests, one binary (ECOSYSTEM.md: each test binary links ~200 MB).

mod agent;
mod agent_daemon;
mod agent_gpu_health;
mod agent_image;
#[cfg(feature = "nvml")]
mod agent_nvml;
mod agent_sources;
mod conformance;
mod controller_metrics;
mod crds;
mod demo;
mod doc_examples;
mod e2e;
mod fault_parsers;
mod inject;
mod inplace;
mod inplace_agent;
pub(crate) mod packaging;
mod samples;
mod samples_conditions;
mod sim_actors;
mod sim_bench;
mod sim_server;
mod trainer;
mod watchdog;
mod workspace;
