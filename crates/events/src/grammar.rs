//! perf's event syntax, read without looking at the machine: a `-e` value
//! becomes groups of events, each with its name, term list and modifiers.
//! What each name means here (a PMU, a tracepoint, a cache event) is
//! [`super::resolve`]'s job.

/// One event as written: `name`, `name/terms/`, `pmu/terms/`, `mem:ADDR`,
/// each with optional modifiers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedEvent {
    /// The whole text, as perf names the event (`cs:u`, `msr/tsc/`).
    pub text: String,
    /// What the name is, as far as the syntax tells.
    pub name: EventName,
    /// `/key=value,flag/`, in order.
    pub terms: Vec<Term>,
    /// Whether a term list in slashes followed the name, if only an empty
    /// one (`ibs_op//`, as `perf mem` names AMD's IBS): the name is then
    /// a PMU's.
    pub slashed: bool,
    /// The modifier letters (`u`, `pp`, `S`...), without the colon.
    pub modifiers: String,
}

/// The name part of an event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EventName {
    /// A word: a hardware, software or cache event, a PMU (when a term
    /// list follows) or a PMU's event alias.
    Word(String),
    /// `rNNNN`: a raw hardware event in hex.
    Raw(u64),
    /// `TYPE:CONFIG`, both numbers.
    Numeric(u32, u64),
    /// `system:name`, globs allowed.
    Tracepoint(String, String),
    /// `mem:ADDR[/LEN][:ACCESS]`.
    Breakpoint {
        /// The address watched.
        addr: u64,
        /// Bytes watched, if given.
        len: Option<u64>,
        /// `r`, `w`, `x` letters, if given.
        access: Option<String>,
    },
}

/// One term of a term list: `key=value`, or a bare `key`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Term {
    /// The key (`period`, `event`, `call-graph`...).
    pub key: String,
    /// Its value, if any.
    pub value: Option<String>,
}

/// Events that are opened together: `{a,b}:mods`, or a single event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedGroup {
    /// Its events; the first leads.
    pub events: Vec<ParsedEvent>,
    /// Whether it was written in braces (a single event is its own group).
    pub braced: bool,
    /// The group's modifiers, applied to every member after its own.
    pub modifiers: String,
}

/// Letters perf takes as event modifiers.
pub const MODIFIER_LETTERS: &str = "ukhIGHpPSDWe";

/// Parses one `-e` value. The error says which part is wrong.
pub fn parse(text: &str) -> Result<Vec<ParsedGroup>, String> {
    let mut groups = Vec::new();
    for item in split_top_level(text, ',')? {
        let item = item.trim();
        if item.is_empty() {
            return Err(format!("event syntax error: '{text}' has an empty event"));
        }
        groups.push(parse_item(item)?);
    }
    if groups.is_empty() {
        return Err("event syntax error: no event given".into());
    }
    Ok(groups)
}

fn parse_item(item: &str) -> Result<ParsedGroup, String> {
    let Some(inner) = item.strip_prefix('{') else {
        return Ok(ParsedGroup {
            events: vec![parse_event(item)?],
            braced: false,
            modifiers: String::new(),
        });
    };
    let close = inner
        .rfind('}')
        .ok_or_else(|| format!("event syntax error: '{item}' has no closing '}}'"))?;
    let modifiers = match &inner[close + 1..] {
        "" => String::new(),
        rest => match rest.strip_prefix(':') {
            Some(mods) => checked_modifiers(mods, item)?.to_string(),
            None => return Err(format!("event syntax error: '{rest}' after a group")),
        },
    };
    let events = split_top_level(&inner[..close], ',')?
        .into_iter()
        .map(|e| parse_event(e.trim()))
        .collect::<Result<Vec<_>, _>>()?;
    if events.is_empty() {
        return Err(format!("event syntax error: '{item}' is an empty group"));
    }
    Ok(ParsedGroup {
        events,
        braced: true,
        modifiers,
    })
}

/// Splits at `separator` outside braces and term lists. A `mem:` event's
/// `/LEN` is not a term list, so its slash is not counted.
fn split_top_level(text: &str, separator: char) -> Result<Vec<&str>, String> {
    let mut parts = Vec::new();
    let (mut depth, mut in_terms, mut start) = (0i32, false, 0);
    for (i, c) in text.char_indices() {
        match c {
            '{' if !in_terms => depth += 1,
            '}' if !in_terms => depth -= 1,
            '/' if !text[start..i].trim_start_matches('{').starts_with("mem:") => {
                in_terms = !in_terms
            }
            c if c == separator && depth == 0 && !in_terms => {
                parts.push(&text[start..i]);
                start = i + c.len_utf8();
            }
            _ => {}
        }
        if depth < 0 {
            return Err(format!("event syntax error: unbalanced '}}' in '{text}'"));
        }
    }
    if depth != 0 || in_terms {
        return Err(format!(
            "event syntax error: '{text}' has an unclosed '{}'",
            if in_terms { "/" } else { "{" }
        ));
    }
    parts.push(&text[start..]);
    Ok(parts)
}

/// Parses one event: its name, its term list and its modifiers.
fn parse_event(text: &str) -> Result<ParsedEvent, String> {
    if text.is_empty() {
        return Err("event syntax error: an empty event".into());
    }
    if let Some(rest) = text.strip_prefix("mem:") {
        return parse_breakpoint(text, rest);
    }
    let slashed = text.contains('/');
    let (body, terms, modifiers) = match text.find('/') {
        Some(open) => {
            let close = open + 1 + text[open + 1..].find('/').expect("split checked it");
            let modifiers = text[close + 1..].trim_start_matches(':');
            let terms = parse_terms(&text[open + 1..close], text)?;
            (&text[..open], terms, checked_modifiers(modifiers, text)?)
        }
        None => {
            let (body, modifiers) = split_modifiers(text);
            (body, Vec::new(), checked_modifiers(modifiers, text)?)
        }
    };
    Ok(ParsedEvent {
        text: text.to_string(),
        name: parse_name(body, text)?,
        terms,
        slashed,
        modifiers: modifiers.to_string(),
    })
}

fn parse_name(body: &str, text: &str) -> Result<EventName, String> {
    if body.is_empty() {
        return Err(format!("event syntax error: '{text}' names no event"));
    }
    if let Some((left, right)) = body.split_once(':') {
        if let (Ok(type_), Some(config)) = (left.parse(), parse_number(right)) {
            return Ok(EventName::Numeric(type_, config));
        }
        if left.is_empty() || right.is_empty() || right.contains(':') {
            return Err(format!("event syntax error: '{text}'"));
        }
        return Ok(EventName::Tracepoint(left.to_string(), right.to_string()));
    }
    if let Some(hex) = body.strip_prefix('r') {
        if !hex.is_empty() && hex.chars().all(|c| c.is_ascii_hexdigit()) {
            let config = u64::from_str_radix(hex, 16)
                .map_err(|_| format!("event syntax error: '{body}' is too large"))?;
            return Ok(EventName::Raw(config));
        }
    }
    Ok(EventName::Word(body.to_string()))
}

/// `name:mods` into the name and the letters; a last `:x` is modifiers only
/// when every letter is one (so `sched:sched_switch` keeps its colon).
fn split_modifiers(text: &str) -> (&str, &str) {
    match text.rsplit_once(':') {
        Some((body, mods))
            if !mods.is_empty()
                && mods.chars().all(|c| MODIFIER_LETTERS.contains(c))
                && !body.is_empty() =>
        {
            (body, mods)
        }
        _ => (text, ""),
    }
}

/// perf takes each modifier once, except `p` (up to three times).
fn checked_modifiers<'a>(mods: &'a str, text: &str) -> Result<&'a str, String> {
    if let Some(bad) = mods.chars().find(|c| !MODIFIER_LETTERS.contains(*c)) {
        return Err(format!(
            "event syntax error: '{text}': '{bad}' is not a modifier (they are {MODIFIER_LETTERS})"
        ));
    }
    if let Some(twice) = mods
        .char_indices()
        .find(|&(i, c)| c != 'p' && mods[i + 1..].contains(c))
    {
        return Err(format!(
            "event syntax error: '{text}': modifier '{}' is given twice",
            twice.1
        ));
    }
    if mods.matches('p').count() > 3 {
        return Err(format!(
            "event syntax error: '{text}': at most three 'p' (precise level 3)"
        ));
    }
    Ok(mods)
}

/// `key=value,flag` into terms (a term list, or a PMU alias's contents).
pub fn parse_terms(list: &str, text: &str) -> Result<Vec<Term>, String> {
    list.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|term| match term.split_once('=') {
            Some(("", _)) => Err(format!(
                "event syntax error: '{text}': '{term}' has no name"
            )),
            Some((key, value)) => Ok(Term {
                key: key.to_string(),
                value: Some(value.to_string()),
            }),
            None => Ok(Term {
                key: term.to_string(),
                value: None,
            }),
        })
        .collect()
}

/// `mem:ADDR[/LEN][:ACCESS][:MODS]`.
fn parse_breakpoint(text: &str, rest: &str) -> Result<ParsedEvent, String> {
    let mut parts = rest.split(':');
    let location = parts.next().unwrap_or_default();
    let (addr, len) = match location.split_once('/') {
        Some((addr, len)) => (addr, Some(len)),
        None => (location, None),
    };
    let bad = |what: &str| format!("event syntax error: '{text}': {what}");
    let addr = parse_number(addr).ok_or_else(|| bad("the address is not a number"))?;
    let len = match len {
        Some(len) => Some(parse_number(len).ok_or_else(|| bad("the length is not a number"))?),
        None => None,
    };
    let mut access = None;
    let mut modifiers = "";
    for part in parts {
        if access.is_none() && !part.is_empty() && part.chars().all(|c| "rwx".contains(c)) {
            access = Some(part.to_string());
        } else if modifiers.is_empty() {
            modifiers = checked_modifiers(part, text)?;
        } else {
            return Err(bad("too many ':' parts"));
        }
    }
    Ok(ParsedEvent {
        text: text.to_string(),
        name: EventName::Breakpoint { addr, len, access },
        terms: Vec::new(),
        slashed: false,
        modifiers: modifiers.to_string(),
    })
}

/// A number as perf reads one: decimal, or hex with `0x`.
pub fn parse_number(text: &str) -> Option<u64> {
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(text: &str) -> ParsedEvent {
        let groups = parse(text).unwrap();
        assert_eq!(groups.len(), 1);
        groups[0].events[0].clone()
    }

    #[test]
    fn an_empty_term_list_still_names_a_pmu() {
        let ibs = one("ibs_op//");
        assert_eq!(ibs.name, EventName::Word("ibs_op".into()));
        assert!(ibs.terms.is_empty() && ibs.slashed);
        assert!(!one("cycles:u").slashed);
        assert!(one("msr/tsc/").slashed);
    }

    #[test]
    fn lists_groups_and_term_lists() {
        let groups =
            parse("cpu-clock,{cs:u,cpu/event=0x3c,umask=0/}:S,sched:sched_switch").unwrap();
        assert_eq!(groups.len(), 3);
        assert!(groups[1].braced && groups[1].modifiers == "S");
        assert_eq!(groups[1].events[0].modifiers, "u");
        let pmu = &groups[1].events[1];
        assert_eq!(pmu.name, EventName::Word("cpu".into()));
        assert_eq!(pmu.terms.len(), 2);
        assert_eq!(pmu.terms[1].value.as_deref(), Some("0"));
        assert_eq!(
            groups[2].events[0].name,
            EventName::Tracepoint("sched".into(), "sched_switch".into())
        );
    }

    #[test]
    fn names_raw_numeric_and_breakpoints() {
        assert_eq!(one("r003c:u").name, EventName::Raw(0x3c));
        assert_eq!(one("1:0").name, EventName::Numeric(1, 0));
        assert_eq!(one("msr/tsc/u").modifiers, "u");
        let bp = one("mem:0x1000/8:w:u");
        assert_eq!(
            bp.name,
            EventName::Breakpoint {
                addr: 0x1000,
                len: Some(8),
                access: Some("w".into())
            }
        );
        assert_eq!(bp.modifiers, "u");
        assert_eq!(one("cycles:ppp").modifiers, "ppp");
        assert_eq!(one("cpu-clock/period=10000/").terms[0].key, "period");
    }

    #[test]
    fn syntax_errors_name_the_part() {
        for bad in ["{cs", "cpu/event=1", "cs:uu", "cycles:pppp", ",", "mem:zz"] {
            let error = parse(bad).unwrap_err();
            assert!(error.starts_with("event syntax error"), "{bad}: {error}");
        }
    }
}
