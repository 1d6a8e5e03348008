//! Standing in for MindCluster on Ascend clusters (issue #7): ClusterD's
//! cluster-wide fault view for the Volcano scheduler plugin, and
//! HCCL-Controller's `hccl.json` rank tables. Both run inside the controller,
//! act only while it leads, and are off unless enabled by flags.

pub mod clusterd;
pub mod ranktable;
