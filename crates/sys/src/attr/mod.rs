//! `perf_event_attr`, built field by field and written out at a fixed size.

mod flags;
mod print;

pub use flags::Flag;

use crate::abi;

/// The attr size shardrec passes to the kernel and writes to perf.data.
///
/// `PERF_ATTR_SIZE_VER7` (128 bytes) covers every field shardrec sets. The
/// bindings' struct is larger, but perf.data readers reject an attr whose
/// `size` exceeds their own struct (perf 6.1 knows 128 bytes), and kernels
/// accept any size as long as the bytes they do not know are zero.
pub const ATTR_SIZE: usize = abi::PERF_ATTR_SIZE_VER7 as usize;

const _: () = assert!(ATTR_SIZE <= std::mem::size_of::<abi::perf_event_attr>());

/// A `perf_event_attr` under construction.
#[derive(Clone)]
pub struct Attr {
    raw: abi::perf_event_attr,
}

impl Attr {
    /// An attr of `type_`/`config`, disabled, with nothing sampled yet.
    pub fn new(type_: u32, config: u64) -> Attr {
        let mut raw = abi::perf_event_attr {
            type_,
            size: ATTR_SIZE as u32,
            config,
            ..Default::default()
        };
        raw.set_disabled(1);
        Attr { raw }
    }

    /// A `PERF_TYPE_SOFTWARE` event (`PERF_COUNT_SW_*`).
    pub fn software(config: u64) -> Attr {
        Attr::new(abi::PERF_TYPE_SOFTWARE, config)
    }

    /// The event's type (`PERF_TYPE_*`).
    pub fn type_(&self) -> u32 {
        self.raw.type_
    }

    /// The event's config.
    pub fn config(&self) -> u64 {
        self.raw.config
    }

    /// Whether a one-bit field is set.
    pub fn flag(&self, flag: Flag) -> bool {
        flag.get(&self.raw)
    }

    /// Sets or clears a one-bit field.
    pub fn set_flag(&mut self, flag: Flag, on: bool) {
        flag.set(&mut self.raw, on)
    }

    /// The skid constraint, 0 to 3.
    pub fn precise_ip(&self) -> u8 {
        self.raw.precise_ip() as u8
    }

    /// Sets the skid constraint, 0 to 3.
    pub fn set_precise_ip(&mut self, level: u8) {
        self.raw.set_precise_ip(level.min(3).into());
    }

    /// Changes the event counted (a fallback such as cycles to cpu-clock).
    pub fn set_event(&mut self, type_: u32, config: u64) {
        self.raw.type_ = type_;
        self.raw.config = config;
    }

    /// `config1` and `config2` (a breakpoint's `bp_addr` and `bp_len`).
    pub fn set_configs(&mut self, config1: u64, config2: u64) {
        self.raw.__bindgen_anon_3.config1 = config1;
        self.raw.__bindgen_anon_4.config2 = config2;
    }

    /// A breakpoint's `HW_BREAKPOINT_*` access bits.
    pub fn set_bp_type(&mut self, bp_type: u32) {
        self.raw.bp_type = bp_type;
    }

    /// The `PERF_SAMPLE_BRANCH_*` bits of a branch stack sample.
    pub fn set_branch_sample_type(&mut self, bits: u64) {
        self.raw.branch_sample_type = bits;
    }

    /// Registers (a `PERF_REG_*` mask) copied at each interrupt.
    pub fn set_intr_regs(&mut self, regs: u64) {
        self.raw.sample_regs_intr = regs;
    }

    /// Registers (a `PERF_REG_*` mask) of user space copied in each sample.
    pub fn set_user_regs(&mut self, regs: u64) {
        self.raw.sample_regs_user = regs;
    }

    /// The user registers (a `PERF_REG_*` mask) copied in each sample.
    pub fn user_regs(&self) -> u64 {
        self.raw.sample_regs_user
    }

    /// The `PERF_SAMPLE_BRANCH_*` bits of a branch stack sample.
    pub fn branch_sample_type(&self) -> u64 {
        self.raw.branch_sample_type
    }

    /// Timestamps from perf's own clock again.
    pub fn clear_clock(&mut self) {
        self.raw.set_use_clockid(0);
        self.raw.clockid = 0;
    }

    /// The clock timestamps come from, when `use_clockid` is set.
    pub fn clockid(&self) -> i32 {
        self.raw.clockid
    }

    /// Whether the event samples: a period or a frequency other than 0
    /// (perf's test for a sampling event the PMU cannot interrupt on).
    pub fn samples(&self) -> bool {
        // SAFETY: both fields of the union are u64 and every bit pattern
        // is a valid u64.
        unsafe { self.raw.__bindgen_anon_1.sample_period != 0 }
    }

    /// Frames at most in each callchain.
    pub fn set_max_stack(&mut self, frames: u16) {
        self.raw.sample_max_stack = frames;
    }

    /// The `PERF_FORMAT_*` bits of what `read()` returns.
    pub fn read_format(&self) -> u64 {
        self.raw.read_format
    }

    /// Sample every `period` events.
    pub fn set_period(&mut self, period: u64) {
        self.raw.set_freq(0);
        self.raw.__bindgen_anon_1.sample_period = period;
    }

    /// Sample at `hz` samples per second (the kernel adapts the period).
    pub fn set_frequency(&mut self, hz: u64) {
        self.raw.set_freq(1);
        self.raw.__bindgen_anon_1.sample_freq = hz;
    }

    /// The `PERF_SAMPLE_*` bits of each sample.
    pub fn set_sample_type(&mut self, sample_type: u64) {
        self.raw.sample_type = sample_type;
    }

    /// The `PERF_SAMPLE_*` bits of each sample.
    pub fn sample_type(&self) -> u64 {
        self.raw.sample_type
    }

    /// The `PERF_FORMAT_*` bits of what `read()` returns.
    pub fn set_read_format(&mut self, read_format: u64) {
        self.raw.read_format = read_format;
    }

    /// Exclude user-space (`:k`) and/or kernel (`:u`) samples.
    pub fn set_exclude(&mut self, user: bool, kernel: bool) {
        self.raw.set_exclude_user(user.into());
        self.raw.set_exclude_kernel(kernel.into());
    }

    /// Do not count in the hypervisor (perf sets it with `exclude_kernel`
    /// when it falls back to user space).
    pub fn set_exclude_hv(&mut self) {
        self.raw.set_exclude_hv(1);
    }

    /// Do not count while a guest runs on this CPU (perf's default for
    /// every event not given `:G` or `:H`).
    pub fn set_exclude_guest(&mut self) {
        self.raw.set_exclude_guest(1);
    }

    /// Put the `sample_id` trailer on every non-sample record.
    pub fn set_sample_id_all(&mut self) {
        self.raw.set_sample_id_all(1);
    }

    /// Emit the side-band records perf needs to resolve addresses and
    /// threads: MMAP/MMAP2, COMM (with exec), FORK/EXIT.
    pub fn set_tracking(&mut self) {
        self.raw.set_mmap(1);
        self.raw.set_mmap2(1);
        self.raw.set_comm(1);
        self.raw.set_comm_exec(1);
        self.raw.set_task(1);
    }

    /// Also emit MMAP records for non-executable mappings (`mmap_data`).
    pub fn set_mmap_data(&mut self) {
        self.raw.set_mmap_data(1);
    }

    /// Emit KSYMBOL and BPF_EVENT side-band records.
    pub fn set_bpf_tracking(&mut self) {
        self.raw.set_ksymbol(1);
        self.raw.set_bpf_event(1);
    }

    /// Follow children created after the event was opened.
    pub fn set_inherit(&mut self) {
        self.raw.set_inherit(1);
    }

    /// Enable the event when the target task calls exec.
    pub fn set_enable_on_exec(&mut self) {
        self.raw.set_enable_on_exec(1);
    }

    /// Timestamp records with clock `clockid` instead of perf's clock.
    pub fn set_clock(&mut self, clockid: i32) {
        self.raw.set_use_clockid(1);
        self.raw.clockid = clockid;
    }

    /// Leave user callchains to DWARF unwinding of a copied stack.
    pub fn set_exclude_callchain_user(&mut self) {
        self.raw.set_exclude_callchain_user(1);
    }

    /// Wake pollers once `bytes` are waiting in the ring.
    pub fn set_wakeup_watermark(&mut self, bytes: u32) {
        self.raw.set_watermark(1);
        self.raw.__bindgen_anon_2.wakeup_watermark = bytes;
    }

    /// Wake pollers after every `count` samples (not bytes: the
    /// watermark bit is cleared).
    pub fn set_wakeup_events(&mut self, count: u32) {
        self.raw.set_watermark(0);
        self.raw.__bindgen_anon_2.wakeup_events = count;
    }

    /// Copy user registers (`regs` mask) and `stack_bytes` of user stack into
    /// each sample, for DWARF unwinding.
    pub fn set_user_stack(&mut self, regs: u64, stack_bytes: u32) {
        self.raw.sample_regs_user = regs;
        self.raw.sample_stack_user = stack_bytes;
    }

    /// The attr as the kernel and perf.data see it: its first [`ATTR_SIZE`] bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let ptr = (&self.raw as *const abi::perf_event_attr).cast::<u8>();
        // SAFETY: `raw` is a plain-old-data C struct at least ATTR_SIZE bytes
        // long (asserted above), and was zero-initialised by `Default`, so
        // every byte, padding included, is initialised.
        unsafe { std::slice::from_raw_parts(ptr, ATTR_SIZE) }.to_vec()
    }

    pub(crate) fn raw(&self) -> &abi::perf_event_attr {
        &self.raw
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_carry_size_and_fields() {
        let mut attr = Attr::software(abi::PERF_COUNT_SW_CPU_CLOCK as u64);
        attr.set_frequency(4000);
        attr.set_sample_type(abi::PERF_SAMPLE_IP as u64);
        let bytes = attr.to_bytes();
        assert_eq!(bytes.len(), 128);
        assert_eq!(u32::from_ne_bytes(bytes[4..8].try_into().unwrap()), 128);
        assert_eq!(u64::from_ne_bytes(bytes[16..24].try_into().unwrap()), 4000);
        assert_eq!(u64::from_ne_bytes(bytes[24..32].try_into().unwrap()), 1);
        // disabled (bit 0) and freq (bit 10) are set in the flags word.
        let flags = u64::from_ne_bytes(bytes[40..48].try_into().unwrap());
        assert_eq!(flags, 1 | 1 << 10);
    }

    #[test]
    fn sampling_and_clock_read_back() {
        let mut attr = Attr::software(0);
        assert!(!attr.samples());
        attr.set_period(1);
        assert!(attr.samples());
        attr.set_clock(libc::CLOCK_MONOTONIC_RAW);
        assert_eq!(attr.clockid(), libc::CLOCK_MONOTONIC_RAW);
        attr.set_user_regs(0x180);
        assert_eq!(attr.user_regs(), 0x180);
    }
}
