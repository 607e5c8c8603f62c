//! The terms any event takes in its term list (`cpu-clock/period=10000/`),
//! which override the command line's options for that event, as in perf.

use super::grammar::{self, Term};
use super::pmu::Configs;
use crate::{CallGraph, DEFAULT_DWARF_STACK};

/// Per-event overrides from the term list.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventTerms {
    /// `period=N`: sample every N events.
    pub period: Option<u64>,
    /// `freq=HZ`: sample at HZ.
    pub freq: Option<u64>,
    /// `call-graph=fp|dwarf|no` (with `stack-size=` for dwarf).
    pub call_graph: Option<CallGraph>,
    /// `max-stack=N`: frames per callchain.
    pub max_stack: Option<u16>,
    /// `time=0|1`: timestamps in samples.
    pub time: Option<bool>,
    /// `inherit=0|1`, `no-inherit`: follow new children.
    pub inherit: Option<bool>,
    /// `name=NAME`: the event's name in perf.data.
    pub name: Option<String>,
}

/// Takes `term` if it is one every event knows; false leaves it to the PMU.
pub fn take(terms: &mut EventTerms, configs: &mut Configs, term: &Term) -> Result<bool, String> {
    let value = term.value.as_deref();
    let number = || {
        value
            .and_then(grammar::parse_number)
            .ok_or_else(|| format!("term '{}' needs a number", term.key))
    };
    match term.key.as_str() {
        "config" => configs.config = number()?,
        "config1" => configs.config1 = number()?,
        "config2" => configs.config2 = number()?,
        "period" => terms.period = Some(number()?),
        "freq" => terms.freq = Some(number()?),
        "time" => terms.time = Some(number()? != 0),
        "inherit" => terms.inherit = Some(number()? != 0),
        "no-inherit" => terms.inherit = Some(false),
        "max-stack" => {
            let frames = number()?;
            terms.max_stack =
                Some(u16::try_from(frames).map_err(|_| format!("max-stack={frames} is too many"))?)
        }
        "name" => {
            terms.name = Some(value.ok_or("term 'name' needs a value")?.to_string());
        }
        "call-graph" => terms.call_graph = Some(call_graph(value, terms.call_graph)?),
        "stack-size" => {
            let size = u32::try_from(number()?).map_err(|_| "stack-size is too big".to_string())?;
            terms.call_graph = Some(CallGraph::Dwarf(size));
        }
        "overwrite" | "no-overwrite" | "percore" | "aux-output" | "aux-sample-size"
        | "driver-config" | "branch_type" | "metric-id" => {
            return Err(format!(
                "term '{}' is not supported by shardrec yet",
                term.key
            ))
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// `call-graph=` keeps a dwarf stack size given before it by `stack-size=`.
fn call_graph(value: Option<&str>, before: Option<CallGraph>) -> Result<CallGraph, String> {
    match value {
        Some("fp") => Ok(CallGraph::FramePointer),
        Some("no") => Ok(CallGraph::None),
        Some("dwarf") => Ok(match before {
            Some(CallGraph::Dwarf(size)) => CallGraph::Dwarf(size),
            _ => CallGraph::Dwarf(DEFAULT_DWARF_STACK),
        }),
        Some(other) => Err(format!("call-graph={other}: use fp, dwarf or no")),
        None => Err("term 'call-graph' needs a value".into()),
    }
}
