//! The control plane's controllers beside the API server:
//! kube-controller-manager (garbage collection, namespaces,
//! ServiceAccounts, batch Jobs, node lifecycle) and, when asked,
//! kube-scheduler. Both run as the admin of the static token, on loopback,
//! each with a secure port and serving certificates of its own, without
//! leader election.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{ControlPlane, EnvtestError, free_port};

fn p(p: &Path) -> String {
    p.to_string_lossy().to_string()
}

impl ControlPlane {
    pub(super) fn start_controller_manager(
        &mut self,
        bin: &Path,
        sa_key: &Path,
        ca_crt: &Path,
        ca_key: &Path,
        flags: &[String],
    ) -> Result<(), EnvtestError> {
        let kc = p(&self.kubeconfig);
        let mut c = Command::new(bin);
        c.args(["--kubeconfig", &kc])
            .args(["--authentication-kubeconfig", &kc])
            .args(["--authorization-kubeconfig", &kc])
            .args(["--bind-address", "127.0.0.1"])
            .args(["--secure-port", &free_port()?.to_string()])
            .args(["--cert-dir", &p(&self.dir.join("kcm-certs"))])
            .arg("--leader-elect=false")
            .arg("--use-service-account-credentials=false")
            .args(["--service-account-private-key-file", &p(sa_key)])
            .args(["--root-ca-file", &p(ca_crt)])
            .args(["--cluster-signing-cert-file", &p(ca_crt)])
            .args(["--cluster-signing-key-file", &p(ca_key)])
            .args([
                "--controllers",
                "*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-route,-bootstrapsigner,-tokencleaner",
            ])
            .args(flags);
        self.spawn("kube-controller-manager", c)
    }

    /// kube-scheduler with its defaults (profile `default-scheduler`,
    /// client 50 requests/s, burst 100), as the admin: it binds every pod
    /// whose `schedulerName` is `default-scheduler` through `pods/binding`,
    /// under its own user agent (`kube-scheduler/v…`), which the audit log
    /// records.
    pub(super) fn start_scheduler(
        &mut self,
        bin: &PathBuf,
        flags: &[String],
    ) -> Result<(), EnvtestError> {
        let kc = p(&self.kubeconfig);
        let mut c = Command::new(bin);
        c.args(["--kubeconfig", &kc])
            .args(["--authentication-kubeconfig", &kc])
            .args(["--authorization-kubeconfig", &kc])
            .args(["--bind-address", "127.0.0.1"])
            .args(["--secure-port", &free_port()?.to_string()])
            .args(["--cert-dir", &p(&self.dir.join("scheduler-certs"))])
            .arg("--leader-elect=false")
            .args(flags);
        self.spawn("kube-scheduler", c)
    }
}
