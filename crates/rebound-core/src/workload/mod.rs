//! Which job a pod belongs to, per job kind, and what each kind's own
//! restart rules say (DESIGN.md §5).
//!
//! Pure: reads object metadata and job objects, makes no API calls, so the
//! controller can call it per watch event.

mod job_ref;
pub mod labels;
pub mod operator;
mod owner;
mod restart_policy;
mod selector;

pub use job_ref::JobRef;
pub use owner::job_of_pod;
pub use restart_policy::restart_policy_never;
pub use selector::pod_selector;

#[cfg(test)]
mod tests;
