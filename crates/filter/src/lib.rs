//! `--filter` on a sampling event: the expression language later perf
//! versions document for BPF sample filters, parsed ([`parse`]), its
//! names resolved on this host, and compiled into a
//! `BPF_PROG_TYPE_PERF_EVENT` program ([`compile`]) that the kernel runs
//! at each overflow: a sample for which it returns 0 is never written to
//! the ring. No clang, no object files: the instructions are ours, so the
//! program loads wherever the kernel has perf-event programs (4.9+; the
//! terms' helpers all exist by 5.x).
//!
//! ```
//! let filter = shardrec_filter::SampleFilter::parse("pid == 1, (cpu == 0 || user)")?;
//! let program = filter.compile(4);
//! assert!(program.insns.len() > 10);
//! # Ok::<(), shardrec_filter::FilterError>(())
//! ```
//!
//! The program counts what it keeps and drops, per CPU, in an array map
//! ([`counters`] gives the layout), so a recording tells dropped samples
//! from lost ones.

mod asm;
pub mod compile;
pub mod counters;
mod names;
mod parse;
pub mod pinned;

pub use compile::FilterProgram;
pub use parse::{Expr, Field, FilterError, Op, Term, Value};

/// A parsed, resolved filter and the text it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SampleFilter {
    /// As given on the command line.
    pub text: String,
    /// The conditions, every one of which a kept sample meets.
    pub expr: Expr,
}

impl SampleFilter {
    /// Parses `text`, resolving user, group and cgroup names on this host.
    pub fn parse(text: &str) -> Result<SampleFilter, FilterError> {
        Ok(SampleFilter {
            text: text.to_string(),
            expr: parse::parse(text, &names::HostNames)?,
        })
    }

    /// Whether any condition reads `field`.
    pub fn uses(&self, field: Field) -> bool {
        self.expr.terms().any(|t| t.field == field)
    }

    /// The program, counting into `slots` per-CPU counter slots (one per
    /// possible CPU).
    pub fn compile(&self, slots: u32) -> FilterProgram {
        compile::compile(&self.expr, slots)
    }
}
