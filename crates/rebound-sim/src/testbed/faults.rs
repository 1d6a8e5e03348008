//! One fault-injection interface for both kinds of bed: the embedded
//! server's own `FaultInjector`, or the proxy's in front of a shared
//! cluster. The methods mean the same on both.

use std::time::Duration;

use crate::FaultInjector;
use crate::proxy::ProxyInjector;

/// The injector of a bed ([`super::Testbed::inject`]).
#[derive(Debug, Clone, Copy)]
pub enum Injector<'a> {
    /// The embedded server's.
    Embedded(&'a FaultInjector),
    /// The proxy's.
    Proxy(&'a ProxyInjector),
}

impl Injector<'_> {
    /// Ends every open watch stream now.
    pub fn drop_watches(&self) {
        match self {
            Injector::Embedded(i) => i.drop_watches(),
            Injector::Proxy(i) => i.drop_watches(),
        }
    }

    /// Answers the next `n` requests with `status` (429 carries
    /// `Retry-After: 1`).
    pub fn fail_next(&self, n: u32, status: u16) {
        match self {
            Injector::Embedded(i) => i.fail_next(n, status),
            Injector::Proxy(i) => i.fail_next(n, status),
        }
    }

    /// Like [`Self::fail_next`], for requests of this verb and/or resource.
    pub fn fail_next_matching(
        &self,
        n: u32,
        status: u16,
        verb: Option<&str>,
        resource: Option<&str>,
    ) {
        match self {
            Injector::Embedded(i) => i.fail_next_matching(n, status, verb, resource),
            Injector::Proxy(i) => i.fail_next_matching(n, status, verb, resource),
        }
    }

    /// Carries out the next `n` requests of this verb and/or resource,
    /// then answers `status` instead of the server's answer (a lost
    /// answer: the change is made and the client cannot know it).
    pub fn lose_next_answers(
        &self,
        n: u32,
        status: u16,
        verb: Option<&str>,
        resource: Option<&str>,
    ) {
        match self {
            Injector::Embedded(i) => i.lose_next_answers(n, status, verb, resource),
            Injector::Proxy(i) => i.lose_next_answers(n, status, verb, resource),
        }
    }

    /// Holds the watches of `resource` by clients whose user agent starts
    /// with `agent` for `d` (open ones end and reconnect into the hold).
    pub fn hold_watches(&self, agent: &str, resource: &str, d: Duration) {
        match self {
            Injector::Embedded(i) => i.hold_watches(agent, resource, d),
            Injector::Proxy(i) => i.hold_watches(agent, resource, d),
        }
    }

    /// Delays every request by `d`.
    pub fn set_latency(&self, d: Duration) {
        match self {
            Injector::Embedded(i) => i.set_latency(d),
            Injector::Proxy(i) => i.set_latency(d),
        }
    }

    /// Makes every resourceVersion issued so far too old (the next watch
    /// resuming from one gets `410 Expired`).
    pub fn expire_all_versions(&self) {
        match self {
            Injector::Embedded(i) => i.expire_all_versions(),
            Injector::Proxy(i) => i.expire_all_versions(),
        }
    }
}
