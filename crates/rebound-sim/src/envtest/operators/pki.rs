//! The operators' webhook certificates: one CA and one serving certificate
//! for 127.0.0.1, made with the `openssl` command.
//!
//! Why openssl and not rcgen (which makes the control plane's): the
//! training-operator's certificate management (cert-controller) keeps its
//! CA in a Secret and reads the CA key as PKCS#1 RSA; ring, rcgen's
//! backend here, cannot make RSA keys. cert-controller also checks that the
//! CA certificate names its CA (`training-operator-ca`) and that the
//! serving certificate names the webhook Service
//! (`training-operator.kubeflow.svc`); with both, it keeps the bed's pair
//! instead of making its own.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{OperatorsError, io};

/// DNS names on the CA certificate (cert-controller verifies its CA
/// against its own name).
const CA_NAMES: &[&str] = &["training-operator-ca"];

/// DNS names on the serving certificate besides 127.0.0.1: the Services
/// the operators' own certificate managers expect to find.
const SERVICE_NAMES: &[&str] = &[
    "localhost",
    "training-operator.kubeflow.svc",
    "jobset-webhook-service.jobset-system.svc",
    "kubeflow-trainer-controller-manager.kubeflow-system.svc",
    "volcano-admission-service.volcano-system.svc",
];

/// The files of the bed's webhook PKI.
pub(crate) struct Pki {
    /// The CA certificate (PEM).
    pub(crate) ca_crt: PathBuf,
    /// The CA key (PKCS#1 RSA PEM).
    pub(crate) ca_key: PathBuf,
    /// The serving certificate (PEM).
    pub(crate) tls_crt: PathBuf,
    /// Its key (PKCS#1 RSA PEM).
    pub(crate) tls_key: PathBuf,
    /// The CA certificate's PEM text (for `caBundle`).
    pub(crate) ca_pem: String,
}

fn openssl(dir: &Path, what: &str, args: &[&str]) -> Result<(), OperatorsError> {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .map_err(|e| OperatorsError::Tool {
            what: format!("openssl ({what})"),
            message: format!("cannot run openssl: {e} (apt-get install -y openssl)"),
        })?;
    if !out.status.success() {
        return Err(OperatorsError::Tool {
            what: format!("openssl ({what})"),
            message: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    Ok(())
}

impl Pki {
    /// Makes the CA and the serving certificate in `dir/pki`, valid for ten
    /// years (cert-controller renews anything valid for less than 90 days).
    pub(crate) fn make(dir: &Path) -> Result<Pki, OperatorsError> {
        let pki = dir.join("pki");
        std::fs::create_dir_all(&pki).map_err(io("pki directory"))?;
        let names = |dns: &[&str], ip: bool| {
            let mut sans: Vec<String> = dns.iter().map(|n| format!("DNS:{n}")).collect();
            if ip {
                sans.insert(0, "IP:127.0.0.1".into());
            }
            sans.join(",")
        };
        std::fs::write(
            pki.join("ca.cnf"),
            format!(
                "[req]\ndistinguished_name=dn\nx509_extensions=v3\nprompt=no\n[dn]\nCN=rebound-testbed-webhooks\n[v3]\nbasicConstraints=critical,CA:TRUE\nkeyUsage=critical,digitalSignature,keyEncipherment,keyCertSign\nsubjectAltName={}\n",
                names(CA_NAMES, false)
            ),
        )
        .map_err(io("write ca.cnf"))?;
        std::fs::write(
            pki.join("tls.ext"),
            format!(
                "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName={}\n",
                names(SERVICE_NAMES, true)
            ),
        )
        .map_err(io("write tls.ext"))?;
        openssl(
            &pki,
            "CA key",
            &["genrsa", "-traditional", "-out", "ca.key", "2048"],
        )?;
        openssl(
            &pki,
            "CA certificate",
            &[
                "req", "-x509", "-key", "ca.key", "-out", "ca.crt", "-days", "3650", "-config",
                "ca.cnf",
            ],
        )?;
        openssl(
            &pki,
            "serving key",
            &["genrsa", "-traditional", "-out", "tls.key", "2048"],
        )?;
        openssl(
            &pki,
            "serving request",
            &[
                "req",
                "-new",
                "-key",
                "tls.key",
                "-out",
                "tls.csr",
                "-subj",
                "/CN=rebound-testbed-webhooks",
            ],
        )?;
        openssl(
            &pki,
            "serving certificate",
            &[
                "x509",
                "-req",
                "-in",
                "tls.csr",
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                "tls.crt",
                "-days",
                "3650",
                "-extfile",
                "tls.ext",
            ],
        )?;
        let ca_pem = std::fs::read_to_string(pki.join("ca.crt")).map_err(io("read ca.crt"))?;
        Ok(Pki {
            ca_crt: pki.join("ca.crt"),
            ca_key: pki.join("ca.key"),
            tls_crt: pki.join("tls.crt"),
            tls_key: pki.join("tls.key"),
            ca_pem,
        })
    }

    /// Copies the serving pair into `dir` as `tls.crt` and `tls.key` (what
    /// controller-runtime's webhook server reads from its certificate
    /// directory).
    pub(crate) fn install_serving(&self, dir: &Path) -> Result<(), OperatorsError> {
        std::fs::create_dir_all(dir).map_err(io(format!("create {}", dir.display())))?;
        std::fs::copy(&self.tls_crt, dir.join("tls.crt")).map_err(io("copy tls.crt"))?;
        std::fs::copy(&self.tls_key, dir.join("tls.key")).map_err(io("copy tls.key"))?;
        Ok(())
    }
}
