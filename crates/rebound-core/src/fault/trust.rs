//! Trust domains (DESIGN.md §4): every fault, occurrence and line of
//! escalation history belongs to one domain, trusted (Node conditions,
//! device-plugin ConfigMaps in kube-system, Events in the root namespace)
//! or one tenant namespace. The domain is part of identity, so a tenant's
//! copy of a trusted fault is another fault: it cannot replace, remove,
//! age, count towards or absorb the trusted one.

use super::Fault;
use serde::Serialize;

/// Where a fault came from, as far as trust goes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Domain {
    /// A channel no tenant can write.
    #[default]
    Trusted,
    /// A tenant namespace (`""` for an untrusted fault that names none,
    /// e.g. a device-plugin ConfigMap outside kube-system): its faults may
    /// restart only that namespace's jobs.
    Tenant(String),
}

impl Domain {
    /// The domain of a fault: trusted, or the namespace it was seen in.
    pub fn of(f: &Fault) -> Domain {
        if f.trusted {
            Domain::Trusted
        } else {
            Domain::Tenant(f.namespace.clone().unwrap_or_default())
        }
    }

    /// Whether the domain is the trusted one.
    pub fn is_trusted(&self) -> bool {
        matches!(self, Domain::Trusted)
    }

    /// The tenant namespace, if it is one.
    pub fn tenant(&self) -> Option<&str> {
        match self {
            Domain::Trusted => None,
            Domain::Tenant(ns) => Some(ns),
        }
    }

    /// Whether a fault of this domain may concern a job in `namespace`:
    /// a trusted fault any job, a tenant's only its own namespace's (an
    /// untrusted fault without a namespace none).
    pub fn may_touch(&self, namespace: &str) -> bool {
        match self {
            Domain::Trusted => true,
            Domain::Tenant(ns) => !ns.is_empty() && ns == namespace,
        }
    }

    /// A short stable key for fingerprints and logs: `""` trusted,
    /// `tenant/<ns>` otherwise.
    pub fn key(&self) -> std::borrow::Cow<'_, str> {
        match self {
            Domain::Trusted => "".into(),
            Domain::Tenant(ns) => format!("tenant/{ns}").into(),
        }
    }
}

impl std::fmt::Display for Domain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Domain::Trusted => f.write_str("trusted"),
            Domain::Tenant(ns) => write!(f, "tenant {ns:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fault::FaultSource;

    #[test]
    fn a_tenant_touches_only_its_own_namespace() {
        let mut f = Fault::new(FaultSource::KubeEvent, "x", chrono::Utc::now());
        f.namespace = Some("team-a".into());
        let d = Domain::of(&f);
        assert!(d.may_touch("team-a"));
        assert!(!d.may_touch("team-b"));
        f.trusted = true;
        assert!(Domain::of(&f).may_touch("team-b"));
        f.trusted = false;
        f.namespace = None;
        assert!(!Domain::of(&f).may_touch(""), "no namespace: nobody's");
    }
}
