//! Values of the options that choose what each sample carries: register
//! lists (`--user-regs`, `-I`) and branch filters (`-j`).

use shardrec_sys::abi;

/// x86-64's `PERF_REG_X86_*` names, in bit order (perf's spelling).
const X86_64_REGS: &[&str] = &[
    "AX", "BX", "CX", "DX", "SI", "DI", "BP", "SP", "IP", "FLAGS", "CS", "SS", "DS", "ES", "FS",
    "GS", "R8", "R9", "R10", "R11", "R12", "R13", "R14", "R15",
];

/// A register list's value: `None` (the option without value) is perf's
/// default set; `?` is a request for the list (an Err that is the list).
pub fn parse_registers(option: &str, text: Option<&str>) -> Result<u64, String> {
    let Some(text) = text else {
        return Ok(shardrec_sys::process::user_regs_mask());
    };
    if !cfg!(target_arch = "x86_64") {
        return Err(format!(
            "{option}: register names are known for x86-64 only"
        ));
    }
    if text == "?" {
        return Err(format!("available registers: {}", available().join(" ")));
    }
    let mut mask = 0;
    for name in text.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let bit = register_bit(name).ok_or_else(|| {
            format!(
                "{option}: unknown register '{name}' (available: {})",
                available().join(" ")
            )
        })?;
        mask |= 1 << bit;
    }
    Ok(mask)
}

fn register_bit(name: &str) -> Option<u32> {
    if let Some(i) = X86_64_REGS
        .iter()
        .position(|r| r.eq_ignore_ascii_case(name))
    {
        return Some(i as u32);
    }
    // XMM0..XMM15 take two bits each from bit 32 (perf names the first).
    let number: u32 = name
        .to_ascii_uppercase()
        .strip_prefix("XMM")?
        .parse()
        .ok()?;
    (number < 16).then_some(32 + 2 * number)
}

fn available() -> Vec<String> {
    let user = shardrec_sys::process::user_regs_mask();
    X86_64_REGS
        .iter()
        .enumerate()
        .filter(|(i, _)| user & (1 << i) != 0)
        .map(|(_, r)| r.to_string())
        .collect()
}

/// perf's `-j` words and their `PERF_SAMPLE_BRANCH_*` bits.
const BRANCH_FILTERS: &[(&str, u32)] = &[
    ("u", abi::PERF_SAMPLE_BRANCH_USER),
    ("k", abi::PERF_SAMPLE_BRANCH_KERNEL),
    ("hv", abi::PERF_SAMPLE_BRANCH_HV),
    ("any", abi::PERF_SAMPLE_BRANCH_ANY),
    ("any_call", abi::PERF_SAMPLE_BRANCH_ANY_CALL),
    ("any_ret", abi::PERF_SAMPLE_BRANCH_ANY_RETURN),
    ("ind_call", abi::PERF_SAMPLE_BRANCH_IND_CALL),
    ("abort_tx", abi::PERF_SAMPLE_BRANCH_ABORT_TX),
    ("in_tx", abi::PERF_SAMPLE_BRANCH_IN_TX),
    ("no_tx", abi::PERF_SAMPLE_BRANCH_NO_TX),
    ("cond", abi::PERF_SAMPLE_BRANCH_COND),
    ("ind_jmp", abi::PERF_SAMPLE_BRANCH_IND_JUMP),
    ("call", abi::PERF_SAMPLE_BRANCH_CALL),
    ("save_type", abi::PERF_SAMPLE_BRANCH_TYPE_SAVE),
    ("stack", abi::PERF_SAMPLE_BRANCH_CALL_STACK),
];

/// The privilege-level bits, which alone do not choose branches.
const PRIVILEGES: u64 = (abi::PERF_SAMPLE_BRANCH_USER
    | abi::PERF_SAMPLE_BRANCH_KERNEL
    | abi::PERF_SAMPLE_BRANCH_HV) as u64;

/// `-j any,u`: branch filter words; `-b` is `any`. A filter of privilege
/// levels only records any branch at those levels: perf's documented
/// intent (perf 6.1 itself also drops the privilege bits then, a bug).
pub fn parse_branch_filter(text: &str) -> Result<u64, String> {
    let mut bits = 0;
    for word in text.split(',').map(str::trim) {
        let (_, bit) = BRANCH_FILTERS
            .iter()
            .find(|(name, _)| *name == word)
            .ok_or_else(|| {
                let names: Vec<_> = BRANCH_FILTERS.iter().map(|(n, _)| *n).collect();
                format!(
                    "-j: unknown branch filter '{word}' (known: {})",
                    names.join(", ")
                )
            })?;
        bits |= *bit as u64;
    }
    if bits & !PRIVILEGES == 0 {
        bits |= abi::PERF_SAMPLE_BRANCH_ANY as u64;
    }
    Ok(bits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registers_and_branch_filters() {
        assert_eq!(
            parse_registers("--user-regs", Some("ax,bx,ip")),
            Ok(0b1_0000_0011)
        );
        assert_eq!(parse_registers("-I", Some("xmm1")), Ok(1 << 34));
        assert!(parse_registers("-I", Some("zz"))
            .unwrap_err()
            .contains("unknown register"));
        assert!(parse_registers("-I", Some("?"))
            .unwrap_err()
            .starts_with("available registers: AX BX"));
        let any_user = (abi::PERF_SAMPLE_BRANCH_ANY | abi::PERF_SAMPLE_BRANCH_USER) as u64;
        assert_eq!(parse_branch_filter("any,u"), Ok(any_user));
        assert_eq!(parse_branch_filter("u"), Ok(any_user));
        assert!(parse_branch_filter("sometimes").is_err());
    }
}
