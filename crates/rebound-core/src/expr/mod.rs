//! CEL for rebound: compile once when an object changes, evaluate per fault.
//!
//! Variables are `fault`, `job`, `node` and `now` (DESIGN.md §3). Values are
//! built here from the core's own types with integers as CEL `int` (the trap
//! in ECOSYSTEM.md: JSON integers bound as `uint` break `job.restarts + 1`).
//!
//! Cost bound: cel-rust has no run-time cost limit, so the bound is static:
//! expressions are at most [`MAX_EXPRESSION_LEN`] bytes, and each is
//! estimated when compiled ([`cost`]: comprehensions multiply by the
//! largest size of what they iterate, bounded per variable) and refused
//! over [`cost::MAX_COST`], a compile error like any other.

pub mod cost;
mod free_vars;
pub mod regex_cache;
mod values;
mod views;

pub use values::{JobView, NodeView, Vars, fault_value, json_to_value};
pub use views::View;

use std::sync::{Arc, LazyLock};
use std::time::Duration;

/// Longest expression accepted (bytes); the CRD schema says the same.
pub const MAX_EXPRESSION_LEN: usize = 4096;
/// Longest list bound into an evaluation context (e.g. `node.faults`).
pub const MAX_LIST: usize = 64;

static ENV: LazyLock<Arc<cel::Env>> =
    LazyLock::new(|| Arc::new(regex_cache::with_matches(cel::Env::stdlib())));

/// Why an expression was not accepted; shown in `Ready=False` conditions.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CompileError {
    #[error("CEL syntax error: {0}")]
    Syntax(String),
    #[error("unknown variable `{name}`; available: {allowed}")]
    UnknownVariable { name: String, allowed: String },
    #[error("expression is {len} bytes long; the limit is {MAX_EXPRESSION_LEN}")]
    TooLong { len: usize },
    #[error("`{var}` has no field `{field}`; its fields: {allowed}")]
    UnknownField {
        var: String,
        field: String,
        allowed: String,
    },
    /// The worst case of the expression costs more than one evaluation may
    /// (nested comprehensions, an iteration over labels or annotations).
    #[error(
        "expression too expensive: estimated worst-case cost {estimate} exceeds the limit of {limit} \
         (comprehensions multiply by the size of what they iterate; labels and annotations \
         may hold 262144 entries: look keys up with `in` and `[]` instead of iterating)"
    )]
    TooExpensive { estimate: u64, limit: u64 },
    /// A literal `matches` pattern that is not a regex, or compiles to more
    /// than [`cost::REGEX_SIZE_MAX`].
    #[error("`matches` pattern {pattern:?} refused: {error}")]
    Pattern { pattern: String, error: String },
}

impl CompileError {
    /// The `Ready=False` condition reason this error gives its object.
    pub fn reason(&self) -> &'static str {
        match self {
            CompileError::TooExpensive { .. } => "ExpressionTooExpensive",
            CompileError::Pattern { error, .. } if error.contains("size limit") => {
                "ExpressionTooExpensive"
            }
            _ => "InvalidExpression",
        }
    }
}

/// Why an evaluation gave no usable answer; counted and treated as no match.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EvalError {
    #[error("CEL evaluation failed: {0}")]
    Execution(String),
    #[error("CEL expression returned {got}, expected {expected}")]
    WrongType { got: String, expected: &'static str },
}

/// A compiled CEL program with its source, cheap to clone and share.
#[derive(Clone)]
pub struct Expr {
    source: Arc<str>,
    program: Arc<cel::Program>,
    vars: VarSet,
}

/// Which of the four variables an expression reads: only those are bound
/// (binding converts every value into the interpreter's representation,
/// the largest cost of an evaluation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VarSet {
    pub fault: bool,
    pub job: bool,
    pub node: bool,
    pub now: bool,
}

impl VarSet {
    /// Both sets.
    pub fn union(self, o: VarSet) -> VarSet {
        VarSet {
            fault: self.fault || o.fault,
            job: self.job || o.job,
            node: self.node || o.node,
            now: self.now || o.now,
        }
    }
}

impl std::fmt::Debug for Expr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Expr({:?})", self.source)
    }
}

impl PartialEq for Expr {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

/// The variables a policy expression may use.
pub const POLICY_VARS: &[&str] = &["fault", "job", "node", "now"];
/// The variables a classification rule may use (no job: classification
/// happens before a job is known).
pub const CLASSIFY_VARS: &[&str] = &["fault", "node", "now"];

impl Expr {
    /// Compile `source`, rejecting variables outside `allowed`.
    pub fn compile(source: &str, allowed: &[&str]) -> Result<Expr, CompileError> {
        Self::compile_bounded(source, allowed, cost::MAX_COST)
    }

    /// [`Self::compile`] with another cost bound: tests that exercise what
    /// the views do on iterations the bound refuses.
    #[cfg(test)]
    pub(crate) fn compile_unbounded(source: &str, allowed: &[&str]) -> Result<Expr, CompileError> {
        Self::compile_bounded(source, allowed, u64::MAX)
    }

    fn compile_bounded(
        source: &str,
        allowed: &[&str],
        max_cost: u64,
    ) -> Result<Expr, CompileError> {
        if source.len() > MAX_EXPRESSION_LEN {
            return Err(CompileError::TooLong { len: source.len() });
        }
        let program = ENV
            .compile(source)
            .map_err(|e| CompileError::Syntax(e.to_string().replace('\n', "; ")))?;
        let free = free_vars::free_vars(program.expression());
        if let Some(name) = free.iter().find(|v| !allowed.contains(&v.as_str())) {
            return Err(CompileError::UnknownVariable {
                name: name.to_string(),
                allowed: allowed.join(", "),
            });
        }
        for (var, field) in free_vars::selected_fields(program.expression()) {
            let known: &[&str] = match var.as_str() {
                "fault" => &views::FAULT_FIELDS,
                "job" => &views::JOB_FIELDS,
                "node" => &views::NODE_FIELDS,
                _ => continue,
            };
            if !known.contains(&field.as_str()) {
                return Err(CompileError::UnknownField {
                    var,
                    field,
                    allowed: known.join(", "),
                });
            }
        }
        for pattern in cost::literal_patterns(program.expression()) {
            if let Err(e) = regex::RegexBuilder::new(&pattern)
                .size_limit(cost::REGEX_SIZE_MAX)
                .build()
            {
                return Err(CompileError::Pattern {
                    error: e.to_string().replace('\n', "; "),
                    pattern,
                });
            }
        }
        let estimate = cost::estimate(program.expression());
        if estimate > max_cost {
            return Err(CompileError::TooExpensive {
                estimate,
                limit: max_cost,
            });
        }
        let vars = VarSet {
            fault: free.contains("fault"),
            job: free.contains("job"),
            node: free.contains("node"),
            now: free.contains("now"),
        };
        Ok(Expr {
            source: source.into(),
            program: Arc::new(program),
            vars,
        })
    }

    /// The variables the expression reads.
    pub fn vars(&self) -> VarSet {
        self.vars
    }

    /// The worst-case cost estimate the expression was accepted with.
    pub fn cost(&self) -> u64 {
        cost::estimate(self.program.expression())
    }

    /// The expression as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    fn eval(&self, scope: &Scope<'_>) -> Result<cel::Value, EvalError> {
        self.program
            .execute(&scope.ctx)
            .map_err(|e| EvalError::Execution(e.to_string()))
    }

    /// Evaluate as a condition.
    pub fn eval_bool(&self, vars: &Vars) -> Result<bool, EvalError> {
        self.eval_bool_in(&Scope::new(vars))
    }

    /// Evaluate as a duration.
    pub fn eval_duration(&self, vars: &Vars) -> Result<Duration, EvalError> {
        self.eval_duration_in(&Scope::new(vars))
    }

    /// Evaluate as a condition in a prepared scope (the hot path: one
    /// scope per fault, shared by every expression evaluated for it).
    pub fn eval_bool_in(&self, scope: &Scope<'_>) -> Result<bool, EvalError> {
        match self.eval(scope)? {
            cel::Value::Bool(b) => Ok(b),
            other => Err(EvalError::WrongType {
                got: type_name(&other),
                expected: "bool",
            }),
        }
    }

    /// Evaluate as a duration in a prepared scope (`duration("30s")`, a
    /// string in humantime syntax, or an int of seconds).
    pub fn eval_duration_in(&self, scope: &Scope<'_>) -> Result<Duration, EvalError> {
        match self.eval(scope)? {
            cel::Value::Duration(d) => d.to_std().map_err(|_| EvalError::WrongType {
                got: "negative duration".into(),
                expected: "duration",
            }),
            cel::Value::Int(s) if s >= 0 => Ok(Duration::from_secs(s as u64)),
            cel::Value::String(s) => {
                crate::api::duration::parse(&s).map_err(|_| EvalError::WrongType {
                    got: format!("string {s:?}"),
                    expected: "duration",
                })
            }
            other => Err(EvalError::WrongType {
                got: type_name(&other),
                expected: "duration",
            }),
        }
    }
}

/// The variables of one evaluation bound into a CEL context once, shared
/// by every expression evaluated for the same fault.
pub struct Scope<'v> {
    ctx: cel::Context<'v, 'v>,
}

impl Scope<'static> {
    /// Bind all of `vars` (eager values: `rebound explain` and tests).
    pub fn new(vars: &Vars) -> Scope<'static> {
        let mut ctx = cel::Context::with_env(ENV.clone());
        ctx.add_variable_from_value("fault", vars.fault.clone());
        ctx.add_variable_from_value("job", vars.job.clone());
        ctx.add_variable_from_value("node", vars.node.clone());
        ctx.add_variable_from_value("now", vars.now.clone());
        Scope { ctx }
    }
}

impl<'v> Scope<'v> {
    /// Bind only the variables in `needed`, as [`View`]s of the core's
    /// values that build a field when an expression reads it: the hot path.
    pub fn build(
        needed: VarSet,
        fault: &'v crate::fault::Fault,
        level: Option<crate::fault::Level>,
        job: Option<&'v JobView>,
        node: Option<&'v NodeView>,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Scope<'v> {
        let mut ctx = cel::Context::with_env(ENV.clone());
        if needed.fault {
            ctx.add_variable_as_val("fault", Box::new(View::Fault(fault, level)));
        }
        if needed.job {
            ctx.add_variable_as_val("job", Box::new(View::job(job)));
        }
        if needed.node {
            ctx.add_variable_as_val("node", Box::new(View::node(node)));
        }
        if needed.now {
            ctx.add_variable_as_val(
                "now",
                Box::new(cel::common::types::CelTimestamp::from(now.fixed_offset())),
            );
        }
        Scope { ctx }
    }
}

fn type_name(v: &cel::Value) -> String {
    format!("{:?}", v.type_of())
}

#[cfg(test)]
mod tests;
