//! ClusterD's fault view (`cluster-info-node-cm`, `cluster-info-device-<m>`,
//! `fault-job-info`). Not yet implemented.
