//! Integration tests, one binary (ECOSYSTEM.md: each test binary links ~200 MB).

mod agent;
mod crds;
mod fault_parsers;
mod samples;
mod sim_actors;
