//! A static, worst-case cost estimate of a compiled CEL expression.
//!
//! cel-rust 0.15 has no cost tracking of its own: its parser caps the
//! recursion depth (96) and can cap the node count, but an evaluation runs
//! to the end whatever it costs, and `when` runs inside the recovery core's
//! step. Comprehension macros multiply: `[1,…,10].all(a, [1,…,10].all(b,
//! …))` ten deep is 10^10 loop steps in a few hundred bytes. So an
//! expression is estimated when it is compiled, from its parsed AST, and
//! refused when the estimate exceeds [`MAX_COST`].
//!
//! The estimate is an upper bound, not an average:
//! - every node evaluated costs one unit; a comprehension (`all`,
//!   `exists`, `exists_one`, `map`, `filter`) costs the largest size its
//!   range can have × (its condition + its step + 1), so nesting multiplies;
//! - a list literal's size is its element count; the size of a variable's
//!   list or map is the documented maximum below ([`FAULT_STRING_MAX`],
//!   [`MAP_ENTRIES_MAX`], [`super::MAX_LIST`], …), enforced by the binding
//!   where Kubernetes does not enforce it itself;
//! - work proportional to a value's size (string functions, equality,
//!   concatenation, `in` on a list, `string()`) costs one unit per ten
//!   bytes or elements touched, Kubernetes' own traversal factor
//!   (`StringTraversalCostFactor` 0.1 in k8s.io/apiserver's CEL library);
//!   `matches` costs that × the pattern's length (a regex scan is at worst
//!   input × pattern);
//! - a conditional costs its condition and the dearer branch.
//!
//! Sizes are tracked as a `Shape` (module `shape`): the length of the
//! value itself, the longest length of anything nested in it, and its
//! total size, so that a comprehension over a variable's elements
//! (`node.faults.all(f, f…)`) knows how long each element can be.

mod patterns;
mod shape;
mod walker;

pub use patterns::literal_patterns;
pub use walker::estimate;

/// The most an expression may cost, in estimate units.
///
/// The arithmetic: the engine targets 200,000 decisions a second, 5 µs a
/// fault, and ordinary expressions cost 10–100 units (every sample and
/// documented example is under 10,000: a `matches` on a 4 KiB message is
/// ~6,000). Measured, an expression at this bound (two nested `all` over
/// 94 elements) evaluates in ~130 µs, and string-heavy ones at the bound in
/// under 1 ms: one such tenant policy slows the faults it gates to a
/// thousand or more a second instead of 200,000, and a step of the core
/// that evaluates a hundred of them still ends far below the step
/// watchdog's 5 s. Ten times more would let a few tenant policies stall a
/// step for seconds.
pub const MAX_COST: u64 = 100_000;

/// Longest string of a `fault` field bound into an evaluation (bytes):
/// longer ones are cut at a character boundary when bound. The kubelet
/// caps a termination message at 4096 bytes (`terminationMessagePath`), and
/// the other fields (codes, reasons, names) are far shorter; an Event's or
/// a Node condition's message has no cap of its own, so the binding
/// enforces this one ([`truncate`]). A node fault code (`node.faults`) is
/// bounded the same way.
pub const FAULT_STRING_MAX: u64 = 4096;

/// Most entries of `job.labels`, `job.annotations` or `node.labels`.
///
/// Annotations: Kubernetes caps their total size (keys and values) at
/// 256 KiB (`TotalAnnotationSizeLimitB` in apimachinery's validation), and
/// a key has at least one byte: 262,144 entries. Labels: the count is not
/// capped, but an object is at most 1.5 MiB (etcd's default
/// `--max-request-bytes`) and a label takes at least 6 bytes of JSON
/// (`"a":"",`): 262,144 again. Iterating a job's labels or annotations is
/// therefore refused; look keys up with `in` and `[]` instead (a hash
/// lookup, one unit).
pub const MAP_ENTRIES_MAX: u64 = 262_144;

/// Longest label or annotation key: a DNS-subdomain prefix (253), `/` and
/// a 63-character name (apimachinery's qualified-name validation).
pub const LABEL_KEY_MAX: u64 = 317;
/// Longest label value (apimachinery: 63 characters).
pub const LABEL_VALUE_MAX: u64 = 63;
/// Longest annotation value: the whole 256 KiB annotation budget.
pub const ANNOTATION_VALUE_MAX: u64 = 256 * 1024;
/// Longest object name (a DNS subdomain) and namespace.
pub const NAME_MAX: u64 = 253;

/// Largest compiled size of a literal `matches` pattern (bytes, the regex
/// crate's `size_limit`): a short pattern with counted repetitions
/// (`((a{100}){100}){100}`) compiles to megabytes, so literal patterns are
/// checked against this limit when the expression is compiled (about a
/// millisecond of compiling at most), and evaluations compile each pattern
/// once under the same limit ([`super::regex_cache`]), not on every call
/// as cel's own `matches` does.
pub const REGEX_SIZE_MAX: usize = 64 * 1024;

/// What a `matches` pattern computed at run time costs: a new pattern each
/// evaluation is compiled each evaluation, which no estimate can bound
/// tightly, so such an expression is refused; write the pattern as a
/// literal.
pub const DYNAMIC_PATTERN_COST: u64 = 1_000_000;

/// Cut `s` to at most [`FAULT_STRING_MAX`] bytes at a character boundary:
/// what the cost estimate assumes of every `fault` string.
pub fn truncate(s: &str) -> &str {
    let max = FAULT_STRING_MAX as usize;
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}
