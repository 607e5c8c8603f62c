//! The recording's clock, read: perf's timestamps come from the kernel's
//! perf clock (or the `-k` clock), which user space cannot read directly.
//! So the VIP asks the kernel for a record about itself: a dummy event on
//! its own thread reports a COMM record, stamped like every record of the
//! recording, when it renames itself (to the same name).

use std::io;

use shardrec_format::header::RecordType;
use shardrec_format::sample_id::TIME;
use shardrec_format::walk::RecordWalker;
use shardrec_format::SampleIdLayout;
use shardrec_sys::{abi, Attr, PerfEvent, RingBuffer, Target};

/// Now, on the recording's clock (`clockid` with `-k`, else perf's).
pub fn now(clockid: Option<i32>) -> io::Result<u64> {
    let mut attr = Attr::software(abi::PERF_COUNT_SW_DUMMY as u64);
    attr.set_sample_type(TIME);
    attr.set_sample_id_all();
    attr.set_tracking();
    if let Some(clockid) = clockid {
        attr.set_clock(clockid);
    }
    let this_thread = Target { pid: 0, cpu: -1 };
    let event = PerfEvent::open(&attr, this_thread)?;
    let ring = RingBuffer::map(&event, 1)?;
    event.enable()?;
    let name = nix::sys::prctl::get_name()?;
    nix::sys::prctl::set_name(&name)?;
    event.disable()?;
    let layout = SampleIdLayout::new(TIME);
    let time = ring.consume(|[first, second]| {
        let bytes = [first, second].concat();
        RecordWalker::new(&bytes)
            .filter(|r| r.header.type_ == RecordType::COMM)
            .find_map(|r| layout.time(r.bytes, RecordType::COMM))
    });
    time.ok_or_else(|| io::Error::other("no COMM record to read the recording's clock from"))
}
