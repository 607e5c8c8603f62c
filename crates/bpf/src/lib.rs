//! shardrec's BPF programs written ahead of time, in C, built by
//! libbpf-cargo (`build.rs`) into skeletons that libbpf loads with CO-RE:
//! each field of a kernel struct is read where the running kernel's BTF
//! says it is, so one build runs on every kernel shardrec supports (6.1
//! and later, with `CONFIG_DEBUG_INFO_BTF`).
//!
//! - [`off_cpu`]: off-CPU time, each wait written to a BPF output event as
//!   it ends;
//! - [`capture`]: every BPF program captured in the kernel as it loads.
//!
//! The sample filters (`shardrec-filter`) are not here: they are compiled
//! at run time from the user's expression, with no compiler at all.
//!
//! ```no_run
//! let mut storage = std::mem::MaybeUninit::uninit();
//! let mut off_cpu = shardrec_bpf::off_cpu::OffCpu::load(
//!     &mut storage,
//!     &shardrec_bpf::off_cpu::Settings { follow_all: true, follow_children: true, follow_threads: false, threshold_ns: 0, user_stack_bytes: 0 },
//! )?;
//! off_cpu.attach()?;
//! # Ok::<(), std::io::Error>(())
//! ```

pub mod capture;
pub mod off_cpu;

/// Where libbpf keeps a loaded program's object (one per program).
pub use libbpf_rs::OpenObject;

/// Keeps libbpf from printing to the recorder's stderr: what it would say
/// of a failure comes back as the error, with what was being done (a
/// kernel that refuses fentry would otherwise print lines at every
/// recording). `SHARDREC_LIBBPF_LOG=1` lets it print (the verifier's
/// log, say).
fn quiet_libbpf() {
    if std::env::var_os("SHARDREC_LIBBPF_LOG").is_none() {
        libbpf_rs::set_print(None);
    }
}

/// libbpf's errors as I/O errors, with what was being done.
fn context(what: &'static str) -> impl FnOnce(libbpf_rs::Error) -> std::io::Error {
    move |error| std::io::Error::other(format!("{what}: {error}"))
}

/// The skeletons libbpf-cargo generates: code of its own, held to its
/// own conventions rather than this workspace's lints.
#[allow(
    missing_docs,
    clippy::all,
    clippy::undocumented_unsafe_blocks,
    unsafe_op_in_unsafe_fn
)]
mod skel {
    pub mod off_cpu {
        include!(concat!(env!("OUT_DIR"), "/off_cpu.skel.rs"));
    }
    pub mod capture {
        include!(concat!(env!("OUT_DIR"), "/capture.skel.rs"));
    }
}
