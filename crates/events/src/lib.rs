//! Events as perf spells them: `-e` values are parsed ([`grammar`]) when
//! the command line is read, then resolved against this machine (tables,
//! sysfs PMUs, tracefs) into [`EventSpec`]s when the plan is made.

pub mod attrs;
mod call_graph;
mod cgroup;
mod defaults;
mod error;
pub mod grammar;
pub mod modifiers;
mod names;
mod options;
mod pmu;
pub mod terms;

use shardrec_sys::abi;
use shardrec_sys::tracefs;

pub use attrs::{AttrPlan, AttrScope};
pub use call_graph::{CallGraph, DEFAULT_DWARF_STACK};
pub use cgroup::Cgroup;
pub use error::EventError;
use grammar::{EventName, ParsedEvent, ParsedGroup};
pub use modifiers::Modifiers;
pub use options::{AddressSpace, SampleOptions, Sampling};
use pmu::{Configs, Pmu};
use terms::EventTerms;

/// One `-e` value, parsed, with the `--filter` that followed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventArg {
    /// As typed.
    pub text: String,
    /// Its groups and events.
    pub groups: Vec<ParsedGroup>,
    /// `--filter` given after it: perf attaches it to the last event.
    pub filter: Option<String>,
}

impl EventArg {
    /// Parses one `-e` value; the error names what is wrong in it.
    pub fn parse(text: &str) -> Result<EventArg, String> {
        EventArg::parse_for("-e", text)
    }

    /// Parses the value of `option`, which takes `-e`'s syntax; the error
    /// names the option and what is wrong in the value.
    pub fn parse_for(option: &str, text: &str) -> Result<EventArg, String> {
        Ok(EventArg {
            text: text.to_string(),
            groups: grammar::parse(text).map_err(|e| format!("{option} {text}: {e}"))?,
            filter: None,
        })
    }
}

/// One event to record, resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventSpec {
    /// Its name in perf.data (as written, or `name=`).
    pub name: String,
    /// `PERF_TYPE_*` or a PMU's type.
    pub type_: u32,
    /// `config`, `config1` (`bp_addr`), `config2` (`bp_len`).
    pub configs: Configs,
    /// A breakpoint's `HW_BREAKPOINT_*` access bits.
    pub bp_type: u32,
    /// Its modifiers and its group's.
    pub modifiers: Modifiers,
    /// Its term list's overrides.
    pub terms: EventTerms,
    /// The index of its group's leader, when it is a member of a group.
    pub leader: Option<usize>,
    /// An ftrace filter (`--filter`), for a tracepoint.
    pub filter: Option<String>,
    /// A sample filter (`--filter` after a sampling event), run in the
    /// kernel at each overflow.
    pub sample_filter: Option<shardrec_filter::SampleFilter>,
    /// `-G`: counted only in this cgroup.
    pub cgroup: Option<Cgroup>,
    /// A tracepoint's system and name (its display name may be `name=`'s).
    tracepoint: Option<(String, String)>,
    /// Asked for, or added by the recorder.
    role: Role,
    /// What the kernel's refusals made of it, as perf's fallbacks do:
    /// the name asked for, and why each change (none: recorded as asked).
    pub changed: Option<(String, Vec<&'static str>)>,
}

/// Why an event is recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// The user asked for it.
    Asked,
    /// perf's tracking dummy, which the recorder adds itself.
    TrackingDummy,
    /// `--off-cpu`'s output event.
    OffCpu,
}

/// The name perf gives `--off-cpu`'s event.
pub const OFF_CPU_NAME: &str = "offcpu-time";

impl EventSpec {
    fn new(name: String, type_: u32, config: u64) -> EventSpec {
        EventSpec {
            name,
            type_,
            configs: Configs {
                config,
                ..Configs::default()
            },
            bp_type: 0,
            modifiers: Modifiers::new(),
            terms: EventTerms::default(),
            leader: None,
            filter: None,
            sample_filter: None,
            cgroup: None,
            tracepoint: None,
            role: Role::Asked,
            changed: None,
        }
    }

    /// Notes that the event is changed from what was asked, and why.
    fn changing(&mut self, why: &'static str) {
        let name = self.name.clone();
        self.changed.get_or_insert((name, Vec::new())).1.push(why);
    }

    /// perf's tracking event for system-wide recordings: a dummy that
    /// carries the side-band (mmap, comm, task) and is enabled when it is
    /// opened, so maps made while existing tasks are synthesized are not
    /// missed.
    pub fn tracking_dummy() -> EventSpec {
        let mut spec = EventSpec::new(
            "dummy:HG".into(),
            abi::PERF_TYPE_SOFTWARE,
            abi::PERF_COUNT_SW_DUMMY as u64,
        );
        spec.modifiers = Modifiers::default();
        spec.role = Role::TrackingDummy;
        spec
    }

    /// The tracking dummy (enabled at once, sampling every hit).
    pub fn is_tracking_dummy(&self) -> bool {
        self.role == Role::TrackingDummy
    }

    /// `--off-cpu`'s event, perf's `offcpu-time`: a BPF output event on
    /// each CPU, where the off-CPU program writes the waits that end there.
    pub fn off_cpu() -> EventSpec {
        let mut spec = EventSpec::new(
            OFF_CPU_NAME.into(),
            abi::PERF_TYPE_SOFTWARE,
            abi::PERF_COUNT_SW_BPF_OUTPUT as u64,
        );
        spec.modifiers = Modifiers::default();
        spec.role = Role::OffCpu;
        spec
    }

    /// `--off-cpu`'s event.
    pub fn is_off_cpu(&self) -> bool {
        self.role == Role::OffCpu
    }

    /// The event's config.
    pub fn config(&self) -> u64 {
        self.configs.config
    }

    /// A tracepoint: sampled with its raw fields, filtered by pid.
    pub fn is_tracepoint(&self) -> bool {
        self.type_ == abi::PERF_TYPE_TRACEPOINT
    }

    /// The kernel's refusal of this tracepoint's filter, in words: EINVAL
    /// is a bad `--filter` expression.
    pub fn filter_refused(&self, error: std::io::Error) -> EventError {
        match (&self.filter, error.raw_os_error()) {
            (Some(filter), Some(libc::EINVAL)) => EventError::Usage(format!(
                "--filter '{filter}' is not a valid filter for {} (its fields are in tracefs events/{}/format)",
                self.name,
                self.tracepoint()
                    .map(|(system, name)| format!("{system}/{name}"))
                    .unwrap_or_default()
            )),
            _ => EventError::Filter {
                event: self.name.clone(),
                source: error,
            },
        }
    }

    /// A breakpoint (`mem:`), which records every hit by default.
    pub fn is_breakpoint(&self) -> bool {
        self.type_ == abi::PERF_TYPE_BREAKPOINT
    }

    /// Whether, leading a `:S` group, this event lets the next member
    /// sample for the group (see [`pmu::lends_sampling`]); x86 only.
    pub fn lends_sampling(&self) -> bool {
        let core = Pmu::find("cpu").or_else(|| Pmu::find("cpu_core"));
        let has = |name: &str| core.as_ref().is_some_and(|pmu| pmu.alias(name).is_some());
        let core_has = core.is_some().then_some(&has as &dyn Fn(&str) -> bool);
        let x86 = cfg!(any(target_arch = "x86", target_arch = "x86_64"));
        x86 && pmu::lends_sampling(self.type_, self.config(), core_has)
    }

    /// An event of AMD's IBS PMUs (`ibs_op`, `ibs_fetch`), as perf tells
    /// them: by their PMU's name.
    pub fn is_on_amd_ibs(&self) -> bool {
        Pmu::all()
            .iter()
            .any(|pmu| pmu.name.starts_with("ibs") && pmu.type_ == self.type_)
    }

    /// A tracepoint's system and name.
    pub fn tracepoint(&self) -> Option<(String, String)> {
        self.tracepoint.clone()
    }
}

/// A `-G NAME[,NAME]` and how many `-e` came before it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CgroupArg {
    /// The `-e` options given before it.
    pub after_events: usize,
    /// The names, comma separated.
    pub names: String,
}

/// Resolves every `-e` into events, in order. Groups get their leader's
/// index; tracepoint globs expand to every match; each `-G` goes to the
/// events before it.
pub fn resolve(args: &[EventArg], cgroups: &[CgroupArg]) -> Result<Vec<EventSpec>, EventError> {
    let mut specs = Vec::new();
    if let Some(early) = cgroups.iter().find(|c| c.after_events == 0) {
        return Err(EventError::Usage(format!(
            "-G {}: must define events before cgroups",
            early.names
        )));
    }
    for (given, arg) in args.iter().enumerate() {
        let mut last = specs.len();
        for group in &arg.groups {
            let first = specs.len();
            for event in &group.events {
                last = specs.len();
                for mut spec in resolve_event(event)? {
                    let own = spec.modifiers;
                    spec.modifiers.apply(&group.modifiers);
                    // perf gives a group's `D` and `e` to its leader only.
                    if group.braced && specs.len() > first {
                        spec.modifiers.pinned = own.pinned;
                        spec.modifiers.exclusive = own.exclusive;
                    }
                    specs.push(spec);
                }
            }
            if group.braced && specs.len() - first > 1 {
                specs[first + 1..]
                    .iter_mut()
                    .for_each(|s| s.leader = Some(first));
            }
        }
        if let Some(filter) = &arg.filter {
            attach_filter(&mut specs[last..], filter)?;
        }
        for cgroup in cgroups.iter().filter(|c| c.after_events == given + 1) {
            cgroup::assign(&mut specs, &cgroup.names)
                .map_err(|e| EventError::Usage(format!("-G {}: {e}", cgroup.names)))?;
        }
    }
    Ok(specs)
}

/// perf's `--filter` goes to the last event given before it (every
/// tracepoint of its glob): for a tracepoint it is the kernel's ftrace
/// filter; for any other event a sample filter, compiled to BPF (perf
/// 6.1 has filters for tracepoints only).
fn attach_filter(specs: &mut [EventSpec], filter: &str) -> Result<(), EventError> {
    if specs.is_empty() {
        return Err(EventError::Usage(format!(
            "--filter '{filter}' should follow a -e event"
        )));
    }
    if specs.iter().all(EventSpec::is_tracepoint) {
        specs
            .iter_mut()
            .for_each(|s| s.filter = Some(filter.to_string()));
        return Ok(());
    }
    if specs.iter().any(EventSpec::is_tracepoint) {
        return Err(EventError::Usage(format!(
            "--filter '{filter}' follows tracepoints and other events at once: give each its own -e"
        )));
    }
    let parsed = shardrec_filter::SampleFilter::parse(filter)
        .map_err(|e| EventError::Usage(e.to_string()))?;
    specs
        .iter_mut()
        .for_each(|s| s.sample_filter = Some(parsed.clone()));
    Ok(())
}

fn resolve_event(event: &ParsedEvent) -> Result<Vec<EventSpec>, EventError> {
    let unknown = |suggestion| EventError::Unknown {
        name: event.text.clone(),
        suggestion,
    };
    let bad_term = |reason: String| EventError::Usage(format!("-e {}: {reason}", event.text));
    let mut spec = match &event.name {
        EventName::Tracepoint(system, name) => return tracepoints(event, system, name),
        EventName::Breakpoint { addr, len, access } => breakpoint(event, *addr, *len, access)?,
        EventName::Raw(config) => EventSpec::new(event.text.clone(), abi::PERF_TYPE_RAW, *config),
        EventName::Numeric(type_, config) => EventSpec::new(event.text.clone(), *type_, *config),
        EventName::Word(word) => match symbol(word) {
            Some((type_, config)) => EventSpec::new(event.text.clone(), type_, config),
            None if event.slashed => {
                let pmu = Pmu::find(word).ok_or_else(|| unknown(None))?;
                let mut spec = EventSpec::new(event.text.clone(), pmu.type_, 0);
                pmu_terms(&pmu, &mut spec, event).map_err(bad_term)?;
                spec.modifiers = Modifiers::of_event(&event.modifiers);
                return Ok(vec![spec]);
            }
            None => bare_alias(event, word).ok_or_else(|| unknown(suggest(word)))?,
        },
    };
    finish(&mut spec, event)?;
    Ok(vec![spec])
}

/// The event's term list (terms every event knows), the name from
/// `name=`, and the modifiers.
fn finish(spec: &mut EventSpec, event: &ParsedEvent) -> Result<(), EventError> {
    let bad_term = |reason: String| EventError::Usage(format!("-e {}: {reason}", event.text));
    for term in &event.terms {
        if !terms::take(&mut spec.terms, &mut spec.configs, term).map_err(bad_term)? {
            return Err(bad_term(format!("unknown term '{}'", term.key)));
        }
    }
    if let Some(name) = &spec.terms.name {
        spec.name = name.clone();
    }
    spec.modifiers = Modifiers::of_event(&event.modifiers);
    Ok(())
}

/// A hardware, software or hardware cache event name.
fn symbol(word: &str) -> Option<(u32, u64)> {
    names::lookup(names::SOFTWARE, word)
        .map(|c| (abi::PERF_TYPE_SOFTWARE, c))
        .or_else(|| names::lookup(names::HARDWARE, word).map(|c| (abi::PERF_TYPE_HARDWARE, c)))
        .or_else(|| names::hw_cache(word).map(|c| (abi::PERF_TYPE_HW_CACHE, c)))
}

/// `pmu/term,alias,.../`: generic terms, aliases from `events/`, format
/// terms from `format/`.
fn pmu_terms(pmu: &Pmu, spec: &mut EventSpec, event: &ParsedEvent) -> Result<(), String> {
    for term in &event.terms {
        if terms::take(&mut spec.terms, &mut spec.configs, term)? {
            continue;
        }
        match (term.value.is_none(), pmu.alias(&term.key)) {
            (true, Some(alias)) => {
                for term in &alias {
                    pmu.set_term(&mut spec.configs, term)?;
                }
            }
            _ => pmu.set_term(&mut spec.configs, term)?,
        }
    }
    if let Some(name) = &spec.terms.name {
        spec.name = name.clone();
    }
    Ok(())
}

/// A PMU event named without its PMU (`-e tsc`), as perf finds it in
/// every PMU's `events/`.
fn bare_alias(event: &ParsedEvent, word: &str) -> Option<EventSpec> {
    Pmu::all().into_iter().find_map(|pmu| {
        let alias = pmu.alias(word)?;
        let mut spec = EventSpec::new(event.text.clone(), pmu.type_, 0);
        for term in &alias {
            pmu.set_term(&mut spec.configs, term).ok()?;
        }
        Some(spec)
    })
}

/// `HW_BREAKPOINT_R`, `_W`, `_X`.
const BP_R: u32 = 1;
const BP_W: u32 = 2;
const BP_X: u32 = 4;

/// `mem:ADDR[/LEN][:ACCESS]`: read-write by default, 4 bytes long (a long
/// for execute), as perf sets them.
fn breakpoint(
    event: &ParsedEvent,
    addr: u64,
    len: Option<u64>,
    access: &Option<String>,
) -> Result<EventSpec, EventError> {
    let bp_type = match access {
        None => BP_R | BP_W,
        Some(letters) => letters.chars().fold(0, |bits, c| {
            bits | match c {
                'r' => BP_R,
                'w' => BP_W,
                _ => BP_X,
            }
        }),
    };
    let default_len = if bp_type == BP_X { 8 } else { 4 };
    let mut spec = EventSpec::new(event.text.clone(), abi::PERF_TYPE_BREAKPOINT, 0);
    spec.bp_type = bp_type;
    spec.configs.config1 = addr;
    spec.configs.config2 = len.unwrap_or(default_len);
    Ok(spec)
}

fn tracepoints(
    event: &ParsedEvent,
    system: &str,
    name: &str,
) -> Result<Vec<EventSpec>, EventError> {
    let root = tracefs::root().map_err(|e| EventError::Tracefs(e.to_string()))?;
    let found = tracefs::matching(&root, system, name).unwrap_or_default();
    if found.is_empty() {
        return Err(EventError::Unknown {
            name: event.text.clone(),
            suggestion: None,
        });
    }
    let suffix = match event.modifiers.as_str() {
        "" => String::new(),
        mods => format!(":{mods}"),
    };
    found
        .into_iter()
        .map(|(sys, ev)| {
            let id = tracefs::tracepoint_id(&root, &sys, &ev)
                .map_err(|e| EventError::Tracefs(format!("{sys}:{ev}: {e}")))?;
            let mut spec =
                EventSpec::new(format!("{sys}:{ev}{suffix}"), abi::PERF_TYPE_TRACEPOINT, id);
            spec.tracepoint = Some((sys, ev));
            finish(&mut spec, event)?;
            Ok(spec)
        })
        .collect()
}

/// The known name closest to a misspelt one, if any is close.
fn suggest(name: &str) -> Option<String> {
    names::all_names()
        .map(|known| (edit_distance(name, known), known))
        .filter(|(d, _)| *d <= 2)
        .min()
        .map(|(_, known)| known.to_string())
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let cost = usize::from(ca != cb);
            let next = (row[j + 1] + 1).min(row[j] + 1).min(prev + cost);
            prev = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn specs(text: &str) -> Vec<EventSpec> {
        resolve(&[EventArg::parse(text).unwrap()], &[]).unwrap()
    }

    #[test]
    fn software_names_and_modifiers() {
        let specs = specs("cpu-clock,cs:u,faults:k");
        assert_eq!(specs.len(), 3);
        assert_eq!(specs[0].config(), abi::PERF_COUNT_SW_CPU_CLOCK as u64);
        let (u, k) = (specs[1].modifiers, specs[2].modifiers);
        assert!(u.exclude_kernel && !u.exclude_user);
        assert!(k.exclude_user && !k.exclude_kernel);
        assert_eq!(specs[1].name, "cs:u");
    }

    #[test]
    fn groups_terms_pmus_and_breakpoints() {
        let specs = specs("{cpu-clock,task-clock}:S,cpu-clock/period=10000,name=tick/,msr/tsc/,r003c,mem:0x1000:w");
        assert_eq!(specs[1].leader, Some(0));
        assert!(specs[0].modifiers.sample_read && specs[1].modifiers.sample_read);
        assert_eq!(specs[2].terms.period, Some(10000));
        assert_eq!(specs[2].name, "tick");
        assert_eq!(specs[3].config(), 0);
        assert_eq!(specs[3].type_, Pmu::find("msr").map_or(0, |p| p.type_));
        assert_eq!(
            (specs[4].type_, specs[4].config()),
            (abi::PERF_TYPE_RAW, 0x3c)
        );
        assert_eq!((specs[5].bp_type, specs[5].configs.config2), (BP_W, 4));
    }

    #[test]
    fn a_groups_pinning_goes_to_its_leader() {
        let specs = specs("{cpu-clock,task-clock,cs:e}:D,faults:D");
        let pinned: Vec<bool> = specs.iter().map(|s| s.modifiers.pinned).collect();
        assert_eq!(pinned, [true, false, false, true]);
        assert!(specs[2].modifiers.exclusive && !specs[0].modifiers.exclusive);
    }

    #[test]
    fn misspelt_names_get_a_suggestion() {
        match resolve(&[EventArg::parse("cyles").unwrap()], &[]) {
            Err(EventError::Unknown { suggestion, .. }) => {
                assert_eq!(suggestion.as_deref(), Some("cycles"))
            }
            other => panic!("{other:?}"),
        }
    }
}
