//! The one-bit fields of `perf_event_attr`, named as perf names them, in
//! the order `perf record -vv` prints them.

use crate::abi::perf_event_attr;

macro_rules! flags {
    ($($variant:ident => $name:literal, $get:ident, $set:ident;)*) => {
        /// A one-bit field of `perf_event_attr`.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Flag {
            $(
                #[doc = concat!("`", $name, "`")]
                $variant,
            )*
        }

        impl Flag {
            /// Every flag, in the kernel's (and perf's printing) order.
            pub const ALL: &'static [Flag] = &[$(Flag::$variant),*];

            /// The field's name in `perf_event_attr`.
            pub fn name(self) -> &'static str {
                match self {
                    $(Flag::$variant => $name,)*
                }
            }

            pub(super) fn get(self, raw: &perf_event_attr) -> bool {
                match self {
                    $(Flag::$variant => raw.$get() != 0,)*
                }
            }

            pub(super) fn set(self, raw: &mut perf_event_attr, on: bool) {
                match self {
                    $(Flag::$variant => raw.$set(on.into()),)*
                }
            }
        }
    };
}

flags! {
    Disabled => "disabled", disabled, set_disabled;
    Inherit => "inherit", inherit, set_inherit;
    Pinned => "pinned", pinned, set_pinned;
    Exclusive => "exclusive", exclusive, set_exclusive;
    ExcludeUser => "exclude_user", exclude_user, set_exclude_user;
    ExcludeKernel => "exclude_kernel", exclude_kernel, set_exclude_kernel;
    ExcludeHv => "exclude_hv", exclude_hv, set_exclude_hv;
    ExcludeIdle => "exclude_idle", exclude_idle, set_exclude_idle;
    Mmap => "mmap", mmap, set_mmap;
    Comm => "comm", comm, set_comm;
    Freq => "freq", freq, set_freq;
    InheritStat => "inherit_stat", inherit_stat, set_inherit_stat;
    EnableOnExec => "enable_on_exec", enable_on_exec, set_enable_on_exec;
    Task => "task", task, set_task;
    Watermark => "watermark", watermark, set_watermark;
    MmapData => "mmap_data", mmap_data, set_mmap_data;
    SampleIdAll => "sample_id_all", sample_id_all, set_sample_id_all;
    ExcludeHost => "exclude_host", exclude_host, set_exclude_host;
    ExcludeGuest => "exclude_guest", exclude_guest, set_exclude_guest;
    ExcludeCallchainKernel => "exclude_callchain_kernel", exclude_callchain_kernel, set_exclude_callchain_kernel;
    ExcludeCallchainUser => "exclude_callchain_user", exclude_callchain_user, set_exclude_callchain_user;
    Mmap2 => "mmap2", mmap2, set_mmap2;
    CommExec => "comm_exec", comm_exec, set_comm_exec;
    UseClockid => "use_clockid", use_clockid, set_use_clockid;
    ContextSwitch => "context_switch", context_switch, set_context_switch;
    WriteBackward => "write_backward", write_backward, set_write_backward;
    Namespaces => "namespaces", namespaces, set_namespaces;
    Ksymbol => "ksymbol", ksymbol, set_ksymbol;
    BpfEvent => "bpf_event", bpf_event, set_bpf_event;
    AuxOutput => "aux_output", aux_output, set_aux_output;
    Cgroup => "cgroup", cgroup, set_cgroup;
    TextPoke => "text_poke", text_poke, set_text_poke;
    BuildId => "build_id", build_id, set_build_id;
    InheritThread => "inherit_thread", inherit_thread, set_inherit_thread;
    RemoveOnExec => "remove_on_exec", remove_on_exec, set_remove_on_exec;
    Sigtrap => "sigtrap", sigtrap, set_sigtrap;
}
