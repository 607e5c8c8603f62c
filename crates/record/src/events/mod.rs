//! Event names as perf spells them: parsed into [`EventSelector`]s (the
//! words), then resolved to attr types and configs on this machine.

use shardrec_sys::abi;
use shardrec_sys::tracefs;

use crate::RecordError;

/// One `-e` name as written: the event and its modifiers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventSelector {
    /// As the user wrote it (`cs:u`, `syscalls:sys_enter_*`).
    pub text: String,
    /// Without the modifiers (`cs`).
    pub base: String,
    /// `:k` — kernel only.
    pub exclude_user: bool,
    /// `:u` — user only.
    pub exclude_kernel: bool,
}

/// Splits a `-e` argument (`a,b:u,sys:tp`) into its selectors.
pub fn parse_selectors(list: &str) -> Vec<EventSelector> {
    list.split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(|text| {
            let (base, exclude_user, exclude_kernel) = split_modifiers(text);
            EventSelector {
                text: text.to_string(),
                base: base.to_string(),
                exclude_user,
                exclude_kernel,
            }
        })
        .collect()
}

/// One event to record, resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventSpec {
    /// The name as the user wrote it (with modifiers).
    pub name: String,
    /// `PERF_TYPE_*`
    pub type_: u32,
    /// The type's config.
    pub config: u64,
    /// `:k` — kernel only.
    pub exclude_user: bool,
    /// `:u` — user only.
    pub exclude_kernel: bool,
    /// Not in the hypervisor either (set by the fallback to user space).
    pub exclude_hv: bool,
}

impl EventSpec {
    /// perf's fallback for a user whom `perf_event_paranoid` (above 1)
    /// keeps out of the kernel: an event that counted the kernel counts
    /// user space only, renamed as perf renames it (`cpu-clock:u`; a name
    /// that already has a `:` or `/` just gets `u`).
    pub fn fall_back_to_user_space(&mut self) {
        self.exclude_kernel = true;
        self.exclude_hv = true;
        let separator = if self.name.contains([':', '/']) {
            ""
        } else {
            ":"
        };
        self.name = format!("{}{separator}u", self.name);
    }

    /// A tracepoint: sampled with its raw fields, filtered by pid.
    pub fn is_tracepoint(&self) -> bool {
        self.type_ == abi::PERF_TYPE_TRACEPOINT
    }

    /// A tracepoint's system and name.
    pub fn tracepoint(&self) -> Option<(String, String)> {
        if !self.is_tracepoint() {
            return None;
        }
        let (base, _, _) = split_modifiers(&self.name);
        let (system, name) = base.split_once(':')?;
        Some((system.to_string(), name.to_string()))
    }
}

const SOFTWARE: &[(&str, u32)] = &[
    ("cpu-clock", abi::PERF_COUNT_SW_CPU_CLOCK),
    ("task-clock", abi::PERF_COUNT_SW_TASK_CLOCK),
    ("page-faults", abi::PERF_COUNT_SW_PAGE_FAULTS),
    ("faults", abi::PERF_COUNT_SW_PAGE_FAULTS),
    ("minor-faults", abi::PERF_COUNT_SW_PAGE_FAULTS_MIN),
    ("major-faults", abi::PERF_COUNT_SW_PAGE_FAULTS_MAJ),
    ("context-switches", abi::PERF_COUNT_SW_CONTEXT_SWITCHES),
    ("cs", abi::PERF_COUNT_SW_CONTEXT_SWITCHES),
    ("cpu-migrations", abi::PERF_COUNT_SW_CPU_MIGRATIONS),
    ("migrations", abi::PERF_COUNT_SW_CPU_MIGRATIONS),
    ("alignment-faults", abi::PERF_COUNT_SW_ALIGNMENT_FAULTS),
    ("emulation-faults", abi::PERF_COUNT_SW_EMULATION_FAULTS),
    ("dummy", abi::PERF_COUNT_SW_DUMMY),
];

const HARDWARE: &[(&str, u32)] = &[
    ("cycles", abi::PERF_COUNT_HW_CPU_CYCLES),
    ("cpu-cycles", abi::PERF_COUNT_HW_CPU_CYCLES),
    ("instructions", abi::PERF_COUNT_HW_INSTRUCTIONS),
    ("cache-references", abi::PERF_COUNT_HW_CACHE_REFERENCES),
    ("cache-misses", abi::PERF_COUNT_HW_CACHE_MISSES),
    ("branches", abi::PERF_COUNT_HW_BRANCH_INSTRUCTIONS),
    (
        "branch-instructions",
        abi::PERF_COUNT_HW_BRANCH_INSTRUCTIONS,
    ),
    ("branch-misses", abi::PERF_COUNT_HW_BRANCH_MISSES),
    ("bus-cycles", abi::PERF_COUNT_HW_BUS_CYCLES),
    (
        "stalled-cycles-frontend",
        abi::PERF_COUNT_HW_STALLED_CYCLES_FRONTEND,
    ),
    (
        "stalled-cycles-backend",
        abi::PERF_COUNT_HW_STALLED_CYCLES_BACKEND,
    ),
    ("ref-cycles", abi::PERF_COUNT_HW_REF_CPU_CYCLES),
];

/// Resolves selectors into events. Tracepoint globs
/// (`syscalls:sys_enter_*`) expand to every match.
pub fn resolve(selectors: &[EventSelector]) -> Result<Vec<EventSpec>, RecordError> {
    let mut specs = Vec::new();
    for selector in selectors {
        specs.extend(resolve_one(selector)?);
    }
    Ok(specs)
}

fn resolve_one(selector: &EventSelector) -> Result<Vec<EventSpec>, RecordError> {
    let (full, base) = (selector.text.as_str(), selector.base.as_str());
    let spec = |name: String, type_, config: u64| EventSpec {
        name,
        type_,
        config,
        exclude_user: selector.exclude_user,
        exclude_kernel: selector.exclude_kernel,
        exclude_hv: false,
    };
    if let Some(&(_, config)) = SOFTWARE.iter().find(|(n, _)| *n == base) {
        return Ok(vec![spec(
            full.to_string(),
            abi::PERF_TYPE_SOFTWARE,
            config as u64,
        )]);
    }
    if let Some(&(_, config)) = HARDWARE.iter().find(|(n, _)| *n == base) {
        return Ok(vec![spec(
            full.to_string(),
            abi::PERF_TYPE_HARDWARE,
            config as u64,
        )]);
    }
    let Some((system, name)) = base.split_once(':') else {
        return Err(RecordError::UnknownEvent {
            name: full.to_string(),
            suggestion: suggest(base),
        });
    };
    let root = tracefs::root().map_err(|e| RecordError::Tracefs(e.to_string()))?;
    let found = tracefs::matching(&root, system, name).unwrap_or_default();
    if found.is_empty() {
        return Err(RecordError::UnknownEvent {
            name: full.to_string(),
            suggestion: None,
        });
    }
    let suffix = &full[base.len()..];
    found
        .into_iter()
        .map(|(sys, ev)| {
            let id = tracefs::tracepoint_id(&root, &sys, &ev)
                .map_err(|e| RecordError::Tracefs(format!("{sys}:{ev}: {e}")))?;
            Ok(spec(
                format!("{sys}:{ev}{suffix}"),
                abi::PERF_TYPE_TRACEPOINT,
                id,
            ))
        })
        .collect()
}

/// Splits `name:uk` into the name and its exclusions. A trailing `:x` is a
/// modifier list only when every letter is one perf knows as a modifier.
fn split_modifiers(full: &str) -> (&str, bool, bool) {
    if let Some((base, mods)) = full.rsplit_once(':') {
        if !mods.is_empty() && mods.chars().all(|c| "ukhpPGHS".contains(c)) {
            let user = mods.contains('u');
            let kernel = mods.contains('k');
            // `:u` keeps user only; `:k` kernel only; both is everything.
            return (base, kernel && !user, user && !kernel);
        }
    }
    (full, false, false)
}

/// The known name closest to a misspelt one, if any is close.
fn suggest(name: &str) -> Option<String> {
    SOFTWARE
        .iter()
        .chain(HARDWARE)
        .map(|(known, _)| (edit_distance(name, known), *known))
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

    #[test]
    fn software_names_and_modifiers() {
        let specs = resolve(&parse_selectors("cpu-clock,cs:u,faults:k")).unwrap();
        assert_eq!(specs.len(), 3);
        assert_eq!(specs[0].config, abi::PERF_COUNT_SW_CPU_CLOCK as u64);
        assert!(specs[1].exclude_kernel && !specs[1].exclude_user);
        assert!(specs[2].exclude_user && !specs[2].exclude_kernel);
        assert_eq!(specs[1].name, "cs:u");
    }

    #[test]
    fn misspelt_names_get_a_suggestion() {
        match resolve(&parse_selectors("cyles")) {
            Err(RecordError::UnknownEvent { suggestion, .. }) => {
                assert_eq!(suggestion.as_deref(), Some("cycles"))
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            split_modifiers("sched:sched_switch"),
            ("sched:sched_switch", false, false)
        );
    }
}
