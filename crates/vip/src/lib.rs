//! The VIP: the one process that watches the side-band ring and calls
//! `bpf(2)`.
//!
//! Side-band records (KSYMBOL, BPF_EVENT) land only in the ring of the CPU
//! that ran `bpf()`, so the VIP owns a dummy event's ring on every CPU,
//! woken for each record. It appends the raw records to `vip.shard` and,
//! the moment it reads a PROG_LOAD, captures the program's info and BTF
//! into the `bpf` file ([`capture`]) — a program may live only
//! milliseconds. At start it describes the programs already loaded
//! ([`existing`]). With `--off-cpu` it loads and runs the off-CPU program
//! ([`off_cpu`]). [`process`] is the VIP process's body, which the
//! coordinator forks.

pub mod capture;
mod clock;
pub mod existing;
pub mod filters;
pub mod kernel_capture;
pub mod off_cpu;
pub mod process;
mod sideband;

pub use sideband::{SideBand, Vip, BUFFER};
