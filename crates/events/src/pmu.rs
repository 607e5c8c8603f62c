//! PMUs as sysfs describes them (`/sys/bus/event_source/devices/NAME`):
//! the attr type, the `format/` files that say which config bits a term
//! sets, and the `events/` aliases that name term lists.

use std::fs;
use std::path::PathBuf;

use shardrec_sys::abi;

use super::grammar::{self, Term};

/// Where the kernel lists its PMUs.
const DEVICES: &str = "/sys/bus/event_source/devices";

/// One PMU found in sysfs.
pub struct Pmu {
    /// Its name (`msr`, `cpu`, `breakpoint`).
    pub name: String,
    /// The attr type the kernel gave it.
    pub type_: u32,
    dir: PathBuf,
}

/// The config words a PMU's terms fill.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Configs {
    /// `config`
    pub config: u64,
    /// `config1`
    pub config1: u64,
    /// `config2`
    pub config2: u64,
}

impl Pmu {
    /// The PMU called `name`, if this machine has one.
    pub fn find(name: &str) -> Option<Pmu> {
        if name.is_empty() || name.contains(['/', '.']) {
            return None;
        }
        let dir = PathBuf::from(DEVICES).join(name);
        let type_ = fs::read_to_string(dir.join("type"))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        Some(Pmu {
            name: name.to_string(),
            type_,
            dir,
        })
    }

    /// Every PMU, for a bare alias (`-e tsc`) that names one of their events.
    pub fn all() -> Vec<Pmu> {
        let mut names: Vec<String> = fs::read_dir(DEVICES)
            .map(|dir| {
                dir.filter_map(|e| Some(e.ok()?.file_name().to_str()?.to_string()))
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names.iter().filter_map(|n| Pmu::find(n)).collect()
    }

    /// The term list an `events/` alias stands for.
    pub fn alias(&self, name: &str) -> Option<Vec<Term>> {
        if name.contains(['/', '.']) {
            return None;
        }
        let text = fs::read_to_string(self.dir.join("events").join(name)).ok()?;
        grammar::parse_terms(text.trim(), name).ok()
    }

    /// Sets the bits `term` stands for, as its `format/` file lays them out;
    /// a term without value sets 1. Err names what is wrong.
    pub fn set_term(&self, configs: &mut Configs, term: &Term) -> Result<(), String> {
        let path = self.dir.join("format").join(&term.key);
        let format = match term.key.contains(['/', '.']) {
            true => None,
            false => fs::read_to_string(path).ok(),
        };
        let Some(format) = format else {
            return Err(format!(
                "unknown term '{}' for PMU '{}' (its terms are in {DEVICES}/{}/format)",
                term.key, self.name, self.name
            ));
        };
        let value = match term.value.as_deref() {
            None => 1,
            Some(v) => grammar::parse_number(v)
                .ok_or_else(|| format!("{}/{}={v}/: not a number", self.name, term.key))?,
        };
        let (word, bits) = parse_format(format.trim())
            .ok_or_else(|| format!("cannot read the format of '{}'", term.key))?;
        let field = match word {
            "config" => &mut configs.config,
            "config1" => &mut configs.config1,
            "config2" => &mut configs.config2,
            _ => {
                return Err(format!(
                    "'{}' sets {word}, which shardrec does not know",
                    term.key
                ))
            }
        };
        *field = place_bits(*field, &bits, value)
            .ok_or_else(|| format!("value {value:#x} too big for '{}'", term.key))?;
        Ok(())
    }
}

/// Intel's topdown `slots` event (the PMU has perf metrics).
const TOPDOWN_SLOTS: u64 = 0x400;
/// Intel's `mem-loads-aux`, which must go before a load latency event.
const MEM_LOADS_AUX: u64 = 0x8203;

/// Whether perf 6.1's x86 code lets the second event of a `:S` group
/// sample in place of this leader, whose counts are only read: Intel's
/// topdown `slots` on a core PMU with perf metrics
/// (`arch_topdown_sample_read`), and `mem-loads-aux`
/// (`is_mem_loads_aux_event`, which, without a core PMU to ask, goes by
/// the config alone). `core_has` tells the core PMU's (`cpu`, else
/// `cpu_core`) `events/`, None without one.
pub fn lends_sampling(type_: u32, config: u64, core_has: Option<&dyn Fn(&str) -> bool>) -> bool {
    let slots = type_ == abi::PERF_TYPE_RAW
        && config == TOPDOWN_SLOTS
        && core_has.is_some_and(|has| has("slots"));
    let mem_loads_aux = config == MEM_LOADS_AUX && core_has.is_none_or(|has| has("mem-loads-aux"));
    slots || mem_loads_aux
}

/// `config:0-7,32-35` into the word and its bit ranges.
fn parse_format(text: &str) -> Option<(&str, Vec<(u32, u32)>)> {
    let (word, ranges) = text.split_once(':')?;
    let bits = ranges
        .split(',')
        .map(|r| match r.split_once('-') {
            Some((lo, hi)) => Some((lo.parse().ok()?, hi.parse().ok()?)),
            None => r.parse().ok().map(|b| (b, b)),
        })
        .collect::<Option<Vec<(u32, u32)>>>()?;
    bits.iter()
        .all(|&(lo, hi)| lo <= hi && hi < 64)
        .then_some((word, bits))
}

/// Spreads `value`'s low bits over the format's bits, lowest first, as the
/// kernel reads them back; None if `value` has more bits than the format.
fn place_bits(mut word: u64, ranges: &[(u32, u32)], mut value: u64) -> Option<u64> {
    for &(lo, hi) in ranges {
        for bit in lo..=hi {
            word = (word & !(1 << bit)) | ((value & 1) << bit);
            value >>= 1;
        }
    }
    (value == 0).then_some(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaders_that_lend_their_sampling() {
        let icelake = |name: &str| name == "slots";
        let sapphire = |name: &str| ["slots", "mem-loads-aux"].contains(&name);
        let raw = abi::PERF_TYPE_RAW;
        assert!(lends_sampling(raw, TOPDOWN_SLOTS, Some(&icelake)));
        assert!(!lends_sampling(raw, TOPDOWN_SLOTS, None));
        assert!(!lends_sampling(
            abi::PERF_TYPE_HARDWARE,
            TOPDOWN_SLOTS,
            Some(&icelake)
        ));
        assert!(!lends_sampling(raw, MEM_LOADS_AUX, Some(&icelake)));
        assert!(lends_sampling(raw, MEM_LOADS_AUX, Some(&sapphire)));
        assert!(lends_sampling(abi::PERF_TYPE_SOFTWARE, MEM_LOADS_AUX, None));
        assert!(!lends_sampling(raw, 0x3c, Some(&sapphire)));
    }

    #[test]
    fn formats_spread_values_over_their_bits() {
        let (word, bits) = parse_format("config:0-7,21").unwrap();
        assert_eq!(word, "config");
        assert_eq!(place_bits(0, &bits, 0x1ff), Some(0xff | 1 << 21));
        assert_eq!(place_bits(0, &bits, 0x3ff), None);
        let (word, bits) = parse_format("config1:32-63").unwrap();
        assert_eq!(word, "config1");
        assert_eq!(place_bits(0, &bits, 5), Some(5 << 32));
    }
}
