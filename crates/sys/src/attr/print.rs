//! An attr printed as `perf record -vv` prints it: every field that is not
//! zero, one per line, in the struct's order, bit sets by name.

use std::fmt::{self, Write};

use super::{Attr, Flag};
use crate::abi;

/// The sample_type bits as perf 6.1 names and prints them: in its own
/// order (IDENTIFIER before REGS_INTR), TRANSACTION (bit 17) left out.
#[rustfmt::skip]
const SAMPLE_BITS: &[(u32, &str)] = &[
    (0, "IP"), (1, "TID"), (2, "TIME"), (3, "ADDR"), (4, "READ"), (5, "CALLCHAIN"), (6, "ID"),
    (7, "CPU"), (8, "PERIOD"), (9, "STREAM_ID"), (10, "RAW"), (11, "BRANCH_STACK"),
    (12, "REGS_USER"), (13, "STACK_USER"), (16, "IDENTIFIER"), (18, "REGS_INTR"),
    (15, "DATA_SRC"), (14, "WEIGHT"), (19, "PHYS_ADDR"), (20, "AUX"), (21, "CGROUP"),
    (22, "DATA_PAGE_SIZE"), (23, "CODE_PAGE_SIZE"), (24, "WEIGHT_STRUCT"),
];

const READ_BITS: &[&str] = &[
    "TOTAL_TIME_ENABLED",
    "TOTAL_TIME_RUNNING",
    "ID",
    "GROUP",
    "LOST",
];

const BRANCH_BITS: &[&str] = &[
    "USER",
    "KERNEL",
    "HV",
    "ANY",
    "ANY_CALL",
    "ANY_RETURN",
    "IND_CALL",
    "ABORT_TX",
    "IN_TX",
    "NO_TX",
    "COND",
    "CALL_STACK",
    "IND_JUMP",
    "CALL",
    "NO_FLAGS",
    "NO_CYCLES",
    "TYPE_SAVE",
    "HW_INDEX",
];

/// The dashed line perf puts around each attr.
pub const RULE: &str = "------------------------------------------------------------";

/// `value`'s bits as perf names them, `|`-separated, in the table's order.
fn bit_names(value: u64, bits: impl Iterator<Item = (u32, &'static str)>) -> String {
    bits.filter(|&(bit, _)| value & (1 << bit) != 0)
        .map(|(_, name)| name)
        .collect::<Vec<_>>()
        .join("|")
}

/// A table of names in bit order, numbered.
fn in_bit_order(names: &'static [&'static str]) -> impl Iterator<Item = (u32, &'static str)> {
    names
        .iter()
        .enumerate()
        .map(|(bit, name)| (bit as u32, *name))
}

impl fmt::Display for Attr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let raw = &self.raw;
        let mut out = String::new();
        let mut line = |name: &str, value: String| writeln!(out, "  {name:<32} {value}");
        let unsigned = |v: u64| (v != 0).then(|| v.to_string());
        let hex = |v: u64| (v != 0).then(|| format!("{v:#x}"));
        // SAFETY: every member of these unions is a plain integer of the
        // same size, so any bits are a valid value of each.
        let (period, wakeup, bp_addr, bp_len) = unsafe {
            (
                raw.__bindgen_anon_1.sample_period,
                raw.__bindgen_anon_2.wakeup_events,
                raw.__bindgen_anon_3.bp_addr,
                raw.__bindgen_anon_4.bp_len,
            )
        };
        let mut fields: Vec<(&str, Option<String>)> = vec![
            ("type", unsigned(raw.type_ as u64)),
            ("size", unsigned(raw.size as u64)),
            ("config", hex(raw.config)),
            ("{ sample_period, sample_freq }", unsigned(period)),
            (
                "sample_type",
                (raw.sample_type != 0)
                    .then(|| bit_names(raw.sample_type, SAMPLE_BITS.iter().copied())),
            ),
            (
                "read_format",
                (raw.read_format != 0).then(|| bit_names(raw.read_format, in_bit_order(READ_BITS))),
            ),
        ];
        for &flag in Flag::ALL {
            fields.push((flag.name(), self.flag(flag).then(|| "1".to_string())));
            if flag == Flag::Watermark {
                fields.push(("precise_ip", unsigned(raw.precise_ip())));
            }
        }
        let branch = raw.branch_sample_type;
        fields.extend([
            (
                "{ wakeup_events, wakeup_watermark }",
                unsigned(wakeup as u64),
            ),
            ("bp_type", unsigned(raw.bp_type as u64)),
            ("{ bp_addr, config1 }", hex(bp_addr)),
            ("{ bp_len, config2 }", hex(bp_len)),
            (
                "branch_sample_type",
                (branch != 0).then(|| bit_names(branch, in_bit_order(BRANCH_BITS))),
            ),
            ("sample_regs_user", hex(raw.sample_regs_user)),
            ("sample_stack_user", unsigned(raw.sample_stack_user as u64)),
            (
                "clockid",
                (raw.clockid != 0).then(|| raw.clockid.to_string()),
            ),
            ("sample_regs_intr", hex(raw.sample_regs_intr)),
            ("aux_watermark", unsigned(raw.aux_watermark as u64)),
            ("sample_max_stack", unsigned(raw.sample_max_stack as u64)),
            ("aux_sample_size", unsigned(raw.aux_sample_size as u64)),
        ]);
        for (name, value) in fields {
            if let Some(value) = value {
                line(name, value)?;
            }
        }
        write!(f, "{RULE}\nperf_event_attr:\n{out}{RULE}")
    }
}

impl fmt::Debug for Attr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

const _: () = assert!(abi::PERF_SAMPLE_WEIGHT_STRUCT == 1 << 24);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_as_perf_does() {
        let mut attr = Attr::software(abi::PERF_COUNT_SW_TASK_CLOCK as u64);
        attr.set_frequency(4000);
        attr.set_sample_type(
            (abi::PERF_SAMPLE_IP | abi::PERF_SAMPLE_IDENTIFIER | abi::PERF_SAMPLE_REGS_INTR) as u64,
        );
        attr.set_read_format((abi::PERF_FORMAT_ID | abi::PERF_FORMAT_LOST) as u64);
        attr.set_precise_ip(2);
        attr.set_wakeup_watermark(1);
        let text = attr.to_string();
        let expected = [
            RULE,
            "perf_event_attr:",
            "  type                             1",
            "  size                             128",
            "  config                           0x1",
            "  { sample_period, sample_freq }   4000",
            "  sample_type                      IP|IDENTIFIER|REGS_INTR",
            "  read_format                      ID|LOST",
            "  disabled                         1",
            "  freq                             1",
            "  watermark                        1",
            "  precise_ip                       2",
            "  { wakeup_events, wakeup_watermark } 1",
            RULE,
        ];
        assert_eq!(text.lines().collect::<Vec<_>>(), expected);
    }
}
