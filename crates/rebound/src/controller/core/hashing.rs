//! The core's hash maps and sets. In the product they are keyed at
//! random, as std's are: tenants choose many of their keys (namespaces,
//! job and pod names), and fixed keys would let one craft collisions.
//! Under test their keys are fixed, so that the order the core walks them
//! in, and with it the order of its effects, is the same on every run:
//! a seed of the adversarial simulation (tests/adversary.rs) then replays
//! the same schedule.

#[cfg(not(test))]
pub type State = std::collections::hash_map::RandomState;
#[cfg(test)]
pub type State = std::hash::BuildHasherDefault<std::hash::DefaultHasher>;

pub type HashMap<K, V> = std::collections::HashMap<K, V, State>;
pub type HashSet<T> = std::collections::HashSet<T, State>;
