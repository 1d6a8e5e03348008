//! HCCL-Controller's rank tables, built by rebound (issue #7): for jobs
//! labelled `ring-controller.atlas: ascend-910` (Volcano Jobs, batch Jobs,
//! Deployments), the `hccl.json` key of the job's `rings-config-<job>`
//! ConfigMap lists every pod's chips once all pods are known
//! (`completed`), goes back to `initializing` when pods go, and is rebuilt
//! as their replacements get their chips. A job rebound restarted is
//! reported recovered only once its table is complete again.
//!
//! `table` and `recovery` are pure; `objects` trims watched objects;
//! `inputs` runs the watches; `controller` is the task and its writes.

pub mod controller;
mod inputs;
pub mod objects;
pub mod recovery;
pub mod table;

pub use controller::{Deps, spawn};
pub use table::Format;

#[cfg(test)]
mod tests {
    use crate::controller::ControllerArgs;
    use clap::Parser;

    #[derive(Parser)]
    struct P {
        #[command(flatten)]
        a: ControllerArgs,
    }

    #[test]
    fn off_by_default_and_enabled_by_the_flag_alone_or_with_a_value() {
        let d = ControllerArgs::defaults();
        assert!(!d.rank_tables);
        assert_eq!(d.rank_table_format, super::Format::V2);
        let on = P::try_parse_from(["rebound", "--rank-tables", "--rank-table-format", "v1"])
            .expect("flags");
        assert!(on.a.rank_tables);
        assert_eq!(on.a.rank_table_format, super::Format::V1);
        let set = P::try_parse_from(["rebound", "--rank-tables=false"]).expect("flags");
        assert!(!set.a.rank_tables);
        assert!(P::try_parse_from(["rebound", "--rank-table-format", "v3"]).is_err());
    }
}
