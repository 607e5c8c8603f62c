//! The programs loaded before recording started, described as the kernel
//! would have: a KSYMBOL per sub-program and a BPF_EVENT PROG_LOAD.

use std::io::{self, Write};

use shardrec_format::records::{bpf_event, ksymbol, BPF_EVENT_PROG_LOAD, KSYMBOL_TYPE_BPF};
use shardrec_format::{SampleId, SampleIdLayout};
use shardrec_sys::bpf::{self, ProgInfo};

use crate::capture::Capturer;

/// Captures every loaded program and returns the records describing them,
/// with the side-band event's trailer (`id`), and how many there were.
pub fn describe<W: Write>(
    capturer: &mut Capturer<W>,
    layout: &SampleIdLayout,
    event_id: u64,
) -> io::Result<(Vec<u8>, u64)> {
    let sample_id = SampleId {
        id: event_id,
        ..SampleId::default()
    };
    let mut records = Vec::new();
    let mut count = 0;
    let mut next = bpf::next_prog_id(0)?;
    while let Some(id) = next {
        if let Some(info) = capturer.capture(id)? {
            append_program(&info, layout, &sample_id, &mut records)?;
            count += 1;
        }
        next = bpf::next_prog_id(id)?;
    }
    Ok((records, count))
}

fn append_program(
    info: &ProgInfo,
    layout: &SampleIdLayout,
    id: &SampleId,
    out: &mut Vec<u8>,
) -> io::Result<()> {
    let names = info.ksym_names()?;
    let subs = info
        .jited_ksyms
        .iter()
        .zip(&info.jited_func_lens)
        .zip(&names);
    for ((&addr, &len), name) in subs {
        if let Some(record) = ksymbol(addr, len, KSYMBOL_TYPE_BPF, 0, name).finish(layout, id) {
            out.extend_from_slice(&record);
        }
    }
    if let Some(record) = bpf_event(BPF_EVENT_PROG_LOAD, 0, info.id, info.tag).finish(layout, id) {
        out.extend_from_slice(&record);
    }
    Ok(())
}
