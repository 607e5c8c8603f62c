//! Finding a record's fields in a recording of several events: each kernel
//! id has the `sample_id` layout of its event's `sample_type`.

use std::collections::HashMap;

use crate::header::RecordType;
use crate::sample_id::{body_end, identifier, padded_identifier};
use crate::SampleIdLayout;

/// The layout of each kernel id of a recording, and which ids are
/// shardrec's off-CPU output events, whose samples are raw waits that the
/// merge writes as perf's `offcpu-time` samples.
#[derive(Clone, Debug, Default)]
pub struct Layouts {
    by_id: HashMap<u64, SampleIdLayout>,
    /// Off-CPU output events' ids, and whether their samples carry user
    /// registers and stack.
    off_cpu: HashMap<u64, bool>,
}

impl Layouts {
    /// Id `id`'s records are laid out as `layout` says.
    pub fn insert(&mut self, id: u64, layout: SampleIdLayout) {
        self.by_id.insert(id, layout);
    }

    /// Id `id` is an off-CPU output event's, whose `offcpu-time` samples
    /// carry user registers and stack if `user_stack`.
    pub fn mark_off_cpu(&mut self, id: u64, user_stack: bool) {
        self.off_cpu.insert(id, user_stack);
    }

    /// The layout of id `id`'s records.
    pub fn get(&self, id: u64) -> Option<SampleIdLayout> {
        self.by_id.get(&id).copied()
    }

    /// Whether any id's samples are off-CPU waits.
    pub fn has_off_cpu(&self) -> bool {
        !self.off_cpu.is_empty()
    }

    /// Whether id `id`'s samples are off-CPU waits.
    pub fn is_off_cpu(&self, id: u64) -> bool {
        self.off_cpu.contains_key(&id)
    }
}

impl<const N: usize> From<[(u64, SampleIdLayout); N]> for Layouts {
    fn from(layouts: [(u64, SampleIdLayout); N]) -> Layouts {
        Layouts {
            by_id: HashMap::from(layouts),
            off_cpu: HashMap::new(),
        }
    }
}

/// Reads records' `sample_id` fields (time, pid, ...) with the layout of
/// their event, remembering the last id's layout (consecutive records
/// nearly always share it).
pub struct FieldReader<'a> {
    layouts: &'a Layouts,
    last: Option<(u64, SampleIdLayout)>,
    /// The distinct trailer sizes of the recording's attrs.
    trailer_sizes: Vec<usize>,
}

impl<'a> FieldReader<'a> {
    /// A reader over the recording's layouts.
    pub fn new(layouts: &'a Layouts) -> Self {
        let mut trailer_sizes: Vec<usize> =
            layouts.by_id.values().map(|l| l.trailer_size()).collect();
        trailer_sizes.sort_unstable();
        trailer_sizes.dedup();
        FieldReader {
            layouts,
            last: None,
            trailer_sizes,
        }
    }

    /// The record's time, or `None` when its id is not the recording's or
    /// it is too short for its layout.
    pub fn time(&mut self, record: &[u8], type_: RecordType) -> Option<u64> {
        self.layout(record, type_)?.time(record, type_)
    }

    /// The record's event id: for KSYMBOL and BPF_EVENT, whichever of the
    /// recording's trailer sizes, read after the body, gives a known id
    /// (the kernel may have padded them).
    fn identifier(&self, record: &[u8], type_: RecordType) -> Option<u64> {
        if body_end(record, type_).is_none() {
            return identifier(record, type_);
        }
        self.trailer_sizes
            .iter()
            .filter_map(|&size| padded_identifier(record, type_, size))
            .find(|&id| self.layouts.get(id).is_some())
    }

    /// The record's length without kernel padding after its trailer (only
    /// KSYMBOL and BPF_EVENT records can have any: the rest cost nothing).
    pub fn true_len(&mut self, record: &[u8], type_: RecordType) -> usize {
        if type_ != RecordType::KSYMBOL && type_ != RecordType::BPF_EVENT {
            return record.len();
        }
        match self
            .identifier(record, type_)
            .and_then(|id| self.layouts.get(id))
        {
            Some(layout) => layout.true_len(record, type_),
            None => record.len(),
        }
    }

    /// The record's identifying fields.
    pub fn sample_id(&mut self, record: &[u8], type_: RecordType) -> Option<crate::SampleId> {
        self.layout(record, type_)?.parse(record, type_)
    }

    /// The layout of a sample of an off-CPU output event, whose raw data
    /// is a wait ([`crate::records::off_cpu_sample_of_output`]), and
    /// whether its `offcpu-time` samples carry user registers and stack;
    /// `None` for any other sample.
    pub fn off_cpu_layout(&mut self, sample: &[u8]) -> Option<(SampleIdLayout, bool)> {
        // The merge asks of every sample: most recordings have no off-CPU
        // event, and pay no lookup.
        if self.layouts.off_cpu.is_empty() {
            return None;
        }
        let id = identifier(sample, RecordType::SAMPLE)?;
        let user_stack = *self.layouts.off_cpu.get(&id)?;
        Some((self.layout(sample, RecordType::SAMPLE)?, user_stack))
    }

    /// A sample's pid and ip (see [`SampleIdLayout::sample_pid_ip`]).
    pub fn sample_pid_ip(&mut self, sample: &[u8]) -> Option<(u32, u64)> {
        self.layout(sample, RecordType::SAMPLE)?
            .sample_pid_ip(sample)
    }

    /// The layout of the record's event (the last one found is kept: runs
    /// of records of one event are the rule).
    fn layout(&mut self, record: &[u8], type_: RecordType) -> Option<SampleIdLayout> {
        let id = self.identifier(record, type_)?;
        match self.last {
            Some((last, layout)) if last == id => Some(layout),
            _ => {
                let layout = self.layouts.get(id)?;
                self.last = Some((id, layout));
                Some(layout)
            }
        }
    }
}
