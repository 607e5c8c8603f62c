//! Following a shard while its writer appends to it: whole records read
//! in place (the shard mapped as it grows) from where the last read
//! stopped, up to what is known written, each walked once into the
//! shard's summary (the same walk a merge after the fact makes,
//! [`ShardSummary::walk`]) and found again by its offset when written out.

use std::fs::File;
use std::io;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use shardrec_format::header::{RecordHeader, RecordType};
use shardrec_format::layouts::FieldReader;
use shardrec_format::walk::{self, NoRecord};
use shardrec_shard::merged_prefix::Resume;
use shardrec_shard::scan::{Damage, GrowingBytes, ShardSummary};

/// One shard being followed.
pub struct Follower {
    /// Where it is.
    pub path: PathBuf,
    bytes: Option<Source>,
    /// Offset of the first byte not yet taken (a record's start).
    pos: u64,
    /// What the records taken hold.
    pub summary: ShardSummary,
    /// A read told its writer is done found nothing more.
    exhausted: bool,
    /// The last read stopped short of what was written (at its `most`).
    more: bool,
    /// Where an earlier merger of this output left the shard: the
    /// records it wrote are passed over.
    resume: Resume,
    /// Where the round's copies hold this shard's ring's bytes its writer
    /// has not written ([`Follower::take_copy`]), from this shard offset,
    /// until the round that took them has written them out.
    copy: (u64, Range<usize>),
    /// Whether runs of samples are hopped over by their headers
    /// ([`hopping`](Self::hopping)).
    hop: bool,
}

impl Follower {
    /// Follows the CPU shard at `path`, mapped as it grows; one that
    /// cannot be opened is damaged from its first byte (a missing one is
    /// empty: its writer never made it).
    pub fn open(path: &Path) -> Follower {
        Follower::opened(path, |file| Source::Mapped(GrowingBytes::new(file)))
    }

    /// Follows the VIP's shard at `path`, read into memory: it is small,
    /// and a restarted VIP cuts it back to its last whole record, where a
    /// mapping could be read past the file's new end.
    pub fn open_copied(path: &Path) -> Follower {
        Follower::opened(path, |file| Source::Copied {
            file,
            bytes: Vec::new(),
        })
    }

    fn opened(path: &Path, source: impl FnOnce(File) -> Source) -> Follower {
        let (file, summary) = match File::open(path) {
            Ok(file) => (Some(source(file)), ShardSummary::default()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => (None, ShardSummary::default()),
            Err(e) => (
                None,
                ShardSummary::unreadable(0, format!("cannot be read: {e}")),
            ),
        };
        Follower {
            path: path.to_path_buf(),
            bytes: file,
            pos: 0,
            summary,
            exhausted: false,
            more: false,
            resume: Resume::default(),
            copy: (0, 0..0),
            hop: false,
        }
    }

    /// Keeps no time index of the shard ([`ShardSummary::unindexed`]):
    /// nothing reads it once the shard is freed.
    pub fn unindexed(mut self) -> Follower {
        self.summary.unindexed = true;
        self
    }

    /// Passes over runs of samples by their headers alone, as perf record
    /// passes over everything it copies: counted, the first and last
    /// timed, each run handed on whole ([`Take::samples`]). The records
    /// that describe state, and losses, are still walked one by one. Only
    /// for an unindexed shard, whose records need no time each, and a
    /// merge that watches the binaries samples hit after the fact, from
    /// its output.
    pub fn hopping(mut self) -> Follower {
        self.hop = self.summary.unindexed;
        self
    }

    /// Goes on from where an earlier merger of the same output left the
    /// shard: from `resume.start`, passing over the records it wrote.
    pub fn resumed(mut self, resume: Resume) -> Follower {
        self.pos = resume.start as u64;
        self.resume = resume;
        self
    }

    /// The bytes before `offset` (the first record not yet written out)
    /// are done with: their pages leave the merger's mapping.
    pub fn release_before(&self, offset: u64) {
        if let Some(bytes) = &self.bytes {
            bytes.release_before(offset);
        }
    }

    /// The record of `len` bytes taken at `offset`, from the shard or
    /// from the round's `copies`.
    pub fn record<'a>(&'a self, offset: u64, len: usize, copies: &'a [u8]) -> &'a [u8] {
        let (start, copy) = &self.copy;
        if (*start..start + copy.len() as u64).contains(&offset) {
            let at = copy.start + (offset - start) as usize;
            return &copies[at..at + len];
        }
        self.bytes.as_ref().map_or(&[], |b| b.get(offset, len))
    }

    /// The time no record still to come from this shard can precede, its
    /// records coming in time order but for their lateness (0 while none
    /// was read).
    pub fn time_bound(&self) -> u64 {
        self.summary.last_time.saturating_sub(self.summary.lateness)
    }

    /// Bytes taken so far: whole records from the shard's start.
    pub fn taken(&self) -> u64 {
        self.pos
    }

    /// Whether a read told its writer is done found nothing more.
    pub fn exhausted(&self) -> bool {
        self.exhausted
    }

    /// Whether the last read left records written after what it took,
    /// for want of room.
    pub fn more_written(&self) -> bool {
        self.more
    }

    /// Takes the whole records from where the last read stopped up to
    /// `limit` (the file's end if `None`), at most `most` bytes of them,
    /// handing each to `take` with its offset and time. A record cut at the end of
    /// what is written waits for the next read, unless `last` (the writer
    /// is done): then, as any record that is not one, it is damage, and
    /// nothing after it is taken. Returns the bytes taken.
    pub fn read(
        &mut self,
        limit: Option<u64>,
        most: usize,
        last: bool,
        fields: &mut FieldReader,
        take: &mut impl Take,
    ) -> io::Result<u64> {
        self.more = false;
        // Nothing written past what was taken (a quiet CPU's shard): no
        // look at the file.
        if limit.is_some_and(|limit| limit <= self.pos) {
            self.exhausted = last;
            return Ok(0);
        }
        let Some(bytes) = self
            .bytes
            .as_mut()
            .filter(|_| self.summary.damage.is_none())
        else {
            self.exhausted = last;
            return Ok(0);
        };
        let end = bytes.file_len()?;
        let end = limit.map_or(end, |limit| limit.min(end));
        let want = end.saturating_sub(self.pos).min(most as u64) as usize;
        if want == 0 {
            self.exhausted = last;
            return Ok(0);
        }
        let start = self.pos as usize;
        let window = bytes.up_to(self.pos, self.pos + want as u64)?;
        let want = window.len();
        let shard = (&mut self.summary, &self.resume);
        let (at, damage) = walk_records(shard, (window, start), fields, (take, self.hop));
        match damage {
            Some(Walked::NotAHeader) => self.damage(at, end, "not a record header"),
            Some(Walked::Damage(found)) => {
                self.summary.damage = Some(Damage {
                    dropped: (end as usize) - (start + at),
                    ..found
                })
            }
            None => {}
        }
        let cut = at < want && self.summary.damage.is_none();
        // Reading stopped inside the last bytes written: when the writer
        // is done, they are a record cut short.
        if cut && last && self.pos + want as u64 == end {
            self.damage(at, end, "record cut short");
        }
        self.pos += at as u64;
        self.more = self.summary.damage.is_none() && self.pos < end;
        if let Some(bytes) = self.bytes.as_mut() {
            bytes.taken(self.pos);
        }
        Ok(at as u64)
    }

    /// Takes the whole records of `copies[copy]`, a copy of the shard's
    /// ring from where this follower has read the shard to
    /// ([`taken`](Self::taken)): the bytes its writer has not written
    /// yet. So a
    /// quiet ring's few records need not wait for its writer, nor wake it:
    /// they are written out from the copy, and passed over when the writer
    /// writes them into the shard (or never written there, where the
    /// merger reads the rings first). A record in it that is not one is
    /// left for the read of the shard to find. Returns the bytes taken.
    pub fn take_copy(
        &mut self,
        (copies, copy): (&[u8], Range<usize>),
        fields: &mut FieldReader,
        take: &mut impl Take,
    ) -> u64 {
        if self.bytes.is_none() || self.summary.damage.is_some() {
            self.copy = (self.pos, 0..0);
            return 0;
        }
        let start = self.pos;
        let shard = (&mut self.summary, &self.resume);
        let window = (&copies[copy.clone()], start as usize);
        let (at, _) = walk_records(shard, window, fields, (take, self.hop));
        self.copy = (start, copy.start..copy.start + at);
        self.pos += at as u64;
        at as u64
    }

    /// The round that took the copy has written it out: no record is read
    /// from it again.
    pub fn forget_copy(&mut self) {
        self.copy.1 = 0..0;
    }

    fn damage(&mut self, at: usize, end: u64, reason: &str) {
        let offset = self.pos as usize + at;
        self.summary.damage = Some(Damage {
            offset,
            dropped: end as usize - offset,
            reason: reason.into(),
        });
    }
}

/// Where a follower reads its shard.
enum Source {
    /// Mapped as it grows.
    Mapped(GrowingBytes),
    /// Read into memory as it grows: `bytes` holds the whole records taken
    /// so far, from the shard's first byte (what follows them is read
    /// again each time, as it may be cut back and written anew).
    Copied { file: File, bytes: Vec<u8> },
}

impl Source {
    fn file_len(&self) -> io::Result<u64> {
        match self {
            Source::Mapped(bytes) => bytes.file_len(),
            Source::Copied { file, .. } => Ok(file.metadata()?.len()),
        }
    }

    /// The bytes from `start` (what was taken) up to `end`, or as many as
    /// the file holds of them.
    fn up_to(&mut self, start: u64, end: u64) -> io::Result<&[u8]> {
        match self {
            Source::Mapped(bytes) => Ok(&bytes.up_to(end)?[start as usize..]),
            Source::Copied { file, bytes } => {
                let mut got = start as usize;
                bytes.resize(end as usize, 0);
                while got < bytes.len() {
                    match file.read_at(&mut bytes[got..], got as u64)? {
                        0 => break,
                        n => got += n,
                    }
                }
                bytes.truncate(got);
                Ok(&bytes[start as usize..])
            }
        }
    }

    /// Whole records up to `pos` are taken: what a copy holds past them
    /// is read again next time.
    fn taken(&mut self, pos: u64) {
        if let Source::Copied { bytes, .. } = self {
            bytes.truncate(pos as usize);
        }
    }

    fn get(&self, offset: u64, len: usize) -> &[u8] {
        match self {
            Source::Mapped(bytes) => bytes.get(offset, len),
            Source::Copied { bytes, .. } => &bytes[offset as usize..offset as usize + len],
        }
    }

    fn release_before(&self, end: u64) {
        if let Source::Mapped(bytes) = self {
            bytes.release_before(end);
        }
    }
}

/// Why a walk of a shard's bytes stopped before their end.
enum Walked {
    /// A header no record has.
    NotAHeader,
    /// A record of no event of the recording.
    Damage(Damage),
}

/// What a follower hands the records it takes to.
pub trait Take {
    /// A record walked: its shard offset, its time (0: none) and bytes.
    fn record(&mut self, offset: u64, time: u64, bytes: &[u8]);
    /// Samples hopped over by their headers ([`Follower::hopping`]): their
    /// bytes, one after the other from shard offset `offset`.
    fn samples(&mut self, offset: u64, hopped: Hopped, bytes: &[u8]);
}

/// A run of samples hopped over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hopped {
    /// How many.
    pub samples: u64,
    /// The last one's time.
    pub last: u64,
}

/// The run of samples a walk is hopping over: where in its window it
/// starts, its last sample, its end.
struct Hop {
    from: usize,
    last: usize,
    end: usize,
    samples: u64,
}

/// Walks the whole records of `window` (the shard's bytes from offset
/// `start`) into `summary`, handing `take` each one `resume` does not say
/// is merged, or, `hop`ping, each run of samples past what `resume`
/// passes over ([`Follower::hopping`]): the bytes walked, and why the
/// walk stopped short of a cut record, if it did.
fn walk_records(
    (summary, resume): (&mut ShardSummary, &Resume),
    (window, start): (&[u8], usize),
    fields: &mut FieldReader,
    (take, hop): (&mut impl Take, bool),
) -> (usize, Option<Walked>) {
    let mut at = 0;
    let mut run: Option<Hop> = None;
    loop {
        let next = whole_record(&window[at..]);
        let offset = start + at;
        if let Ok(Some((header, record))) = next {
            if hop && header.type_ == RecordType::SAMPLE && offset >= resume.taken {
                let hop = run.get_or_insert(Hop {
                    from: at,
                    last: at,
                    end: at,
                    samples: 0,
                });
                (hop.last, hop.samples) = (at, hop.samples + 1);
                at += record.len();
                hop.end = at;
                continue;
            }
        }
        if let Some(hop) = run.take() {
            let shard = (&mut *summary, resume);
            if let Some(damage) = hand_hopped(shard, (window, start), &hop, fields, take) {
                return damage;
            }
        }
        let (header, record) = match next {
            Ok(Some(next)) => next,
            Ok(None) => return (at, None),
            Err(stopped) => return (at, Some(stopped)),
        };
        match summary.walk(fields, offset, (header.type_, record), resume) {
            Ok(time) if resume.merged(offset, time) => {}
            Ok(time) => take.record(offset as u64, time, record),
            Err(found) => return (at, Some(Walked::Damage(found))),
        }
        at += record.len();
    }
}

/// The whole record `bytes` start with, and its header: `None` if it is
/// cut short (or there is none), an error if its header is no record's.
fn whole_record(bytes: &[u8]) -> Result<Option<(RecordHeader, &[u8])>, Walked> {
    match walk::leading_record(bytes) {
        Ok(record) => Ok(Some(record)),
        Err(NoRecord::NotAHeader(_)) => Err(Walked::NotAHeader),
        Err(NoRecord::HeaderCut | NoRecord::RecordCut) => Ok(None),
    }
}

/// Hands `take` the samples `hop` passed over in `window`, timed by its
/// first and last, into `summary`. If either is of no event of the
/// recording, the run is walked record by record instead, to find the
/// damage: then the bytes walked up to it and the damage.
fn hand_hopped(
    (summary, resume): (&mut ShardSummary, &Resume),
    (window, start): (&[u8], usize),
    hop: &Hop,
    fields: &mut FieldReader,
    take: &mut impl Take,
) -> Option<(usize, Option<Walked>)> {
    let time = |fields: &mut FieldReader, at: usize| {
        let (_, sample) = whole_record(&window[at..]).ok().flatten()?;
        fields.time(sample, RecordType::SAMPLE)
    };
    let first = time(fields, hop.from);
    let last = time(fields, hop.last);
    let Some(times) = first.zip(last) else {
        let run = (&window[hop.from..hop.end], start + hop.from);
        let (walked, damage) = walk_records((summary, resume), run, fields, (take, false));
        return damage.map(|damage| (hop.from + walked, Some(damage)));
    };
    summary.add_hopped(hop.samples, times, start + hop.end);
    let hopped = Hopped {
        samples: hop.samples,
        last: times.1,
    };
    take.samples(
        (start + hop.from) as u64,
        hopped,
        &window[hop.from..hop.end],
    );
    None
}
