//! The control plane's certificates and keys, made in-process: a CA, the
//! API server's serving certificate (loopback names) and the
//! service-account key pair.

use super::EnvtestError;

pub(super) struct Pki {
    pub(super) ca_cert: String,
    pub(super) ca_key: String,
    pub(super) server_cert: String,
    pub(super) server_key: String,
    pub(super) sa_key: String,
    pub(super) sa_pub: String,
}

pub(super) fn pki() -> Result<Pki, EnvtestError> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, SanType};
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.distinguished_name
        .push(DnType::CommonName, "rebound-envtest-ca");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key)?;
    let server_key = KeyPair::generate()?;
    let mut sp = CertificateParams::new(vec![
        "localhost".to_string(),
        "kubernetes".to_string(),
        "kubernetes.default.svc".to_string(),
    ])?;
    sp.subject_alt_names
        .push(SanType::IpAddress(std::net::IpAddr::V4(
            std::net::Ipv4Addr::LOCALHOST,
        )));
    sp.distinguished_name
        .push(DnType::CommonName, "kube-apiserver");
    let issuer = rcgen::Issuer::from_params(&ca, &ca_key);
    let server_cert = sp.signed_by(&server_key, &issuer)?;
    let sa = KeyPair::generate()?;
    Ok(Pki {
        ca_cert: ca_cert.pem(),
        ca_key: ca_key.serialize_pem(),
        server_cert: server_cert.pem(),
        server_key: server_key.serialize_pem(),
        sa_key: sa.serialize_pem(),
        sa_pub: sa.public_key_pem(),
    })
}
