//! What a merge that frees the shards as it goes has written so far.
//!
//! The recorder's own merge, whose shards are deleted once it is done,
//! punches each shard's merged bytes out of the file as it goes, so that
//! perf.data is written into the pages they leave instead of new ones (on
//! a host that takes freed memory back, new page-cache pages cost several
//! times a reused one) and the recording never needs twice its size on
//! disk. Before each punch it writes down how far its output
//! (`merged.partial`, in the recording directory) holds the recording, so
//! a merge interrupted after a punch is completed by `shardrec merge`: the
//! output's part as written, the shards' from where the punch stopped.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// How far `merged.partial` holds the recording.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MergedPrefix {
    /// Where its data section starts.
    pub data_offset: u64,
    /// Bytes of its data section that are whole: the start records, the
    /// synthesized state and every shard record earlier than `until`, in
    /// order.
    pub data_len: u64,
    /// The earliest time of the records still to merge.
    pub until: u64,
    /// The latest time the data holds, where it can pass `until`: a live
    /// merge's checkpoint may fall inside a round, after records of one
    /// shard later than others' still to merge. A merge that takes the
    /// output up ends no round before it has written every record
    /// earlier than this, or perf finds them out of order. 0: `until`
    /// bounds it (older merges, and merges in time order).
    #[serde(default)]
    pub latest: u64,
    /// Each shard (by file name) with the offset of its first record still
    /// to merge; the bytes before it may be freed.
    pub shards: Vec<(String, u64)>,
    /// The recording's first sample time (HEADER_SAMPLE_TIME), which the
    /// shards may no longer hold.
    pub first_sample: u64,
    /// Each shard (by file name) with how far the merge had read it: every
    /// record from there on is still to merge, however early (a live
    /// merge writes a record that comes late in the next round). Absent
    /// (older merges): every record earlier than `until` is merged.
    #[serde(default)]
    pub taken: Vec<(String, u64)>,
    /// The output was a stream (`-o -`): what it holds went to its reader
    /// and is nowhere on disk; a merge of the rest starts with the
    /// synthesized state again, so that it reads alone.
    #[serde(default)]
    pub streamed: bool,
}

/// Where a merge resumes one shard: from byte `start` on, leaving out the
/// records before byte `taken` earlier than `until` (in the output
/// already). The default resumes nothing: the whole shard.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Resume {
    /// The first byte to read.
    pub start: usize,
    /// Records from here on are all still to merge.
    pub taken: usize,
    /// Before `taken`, records earlier than this are merged.
    pub until: u64,
}

impl Resume {
    /// Whether the record at `offset` of time `time` is in the output.
    pub fn merged(&self, offset: usize, time: u64) -> bool {
        offset < self.taken && time < self.until
    }
}

impl MergedPrefix {
    /// No round of a merge that takes the output up may end before it
    /// has written a record this late (see [`latest`](Self::latest)).
    pub fn rounds_from(&self) -> u64 {
        self.until.max(self.latest)
    }

    /// Where to resume the shard named `name`.
    pub fn resume(&self, name: &str) -> Resume {
        let find = |list: &[(String, u64)]| {
            list.iter()
                .find(|(shard, _)| shard == name)
                .map(|&(_, offset)| offset as usize)
        };
        Resume {
            start: find(&self.shards).unwrap_or(0),
            taken: find(&self.taken).unwrap_or(usize::MAX),
            until: self.until,
        }
    }
}

/// `merged.prefix` as a live merge keeps it, written after every few
/// rounds: two slots, each a whole [`MergedPrefix`] with its sequence
/// number and a checksum, a write going over the older one in place. A
/// merger killed mid-write leaves the other slot whole, and a reader takes
/// the newest whole one. (A temporary file renamed over the last was
/// most of what a checkpoint cost: ext4's rename, hundreds of times a
/// second in a DWARF storm.)
pub struct PrefixSlots {
    file: File,
    slot_len: u64,
    /// The sequence number of the newest slot written.
    seq: u64,
    /// Made ready but not yet written: the file's temporary name and the
    /// one it takes at the first write.
    unnamed: Option<(PathBuf, PathBuf)>,
}

const MAGIC: &[u8; 8] = b"shrdpfx1";
/// The file's head: the magic and the slots' length.
const HEAD: u64 = 16;
/// A slot's head: sequence number, payload length, checksum.
const SLOT_HEAD: usize = 24;

impl PrefixSlots {
    /// Starts `path` over with `prefix` in it, in slots long enough for
    /// its like (its offsets may grow to any size): written beside it and
    /// renamed over it, so a reader finds a whole one at any moment.
    pub fn create(path: &Path, prefix: &MergedPrefix) -> io::Result<PrefixSlots> {
        let mut slots = PrefixSlots::prepare(path, prefix)?;
        match slots.write(prefix)? {
            true => Ok(slots),
            false => Err(io::Error::other("merged.prefix outgrew its slots")),
        }
    }

    /// Slots for `path`, made ready for prefixes like `prefix` (the same
    /// shards) but not written: `path` appears, whole, at the first
    /// [`write`](Self::write). A live merge makes them before the
    /// recording starts, so its first checkpoint costs one write and a
    /// rename.
    pub fn prepare(path: &Path, prefix: &MergedPrefix) -> io::Result<PrefixSlots> {
        let widest = MergedPrefix {
            data_offset: u64::MAX,
            data_len: u64::MAX,
            until: u64::MAX,
            latest: u64::MAX,
            first_sample: u64::MAX,
            shards: widest(&prefix.shards),
            taken: widest(&prefix.taken),
            ..prefix.clone()
        };
        let slot_len = (encode(&widest)?.len() + SLOT_HEAD).next_multiple_of(512) as u64;
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let _ = std::fs::remove_file(&tmp);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)?;
        let mut head = MAGIC.to_vec();
        head.extend_from_slice(&slot_len.to_le_bytes());
        file.write_all_at(&head, 0)?;
        Ok(PrefixSlots {
            file,
            slot_len,
            seq: 0,
            unnamed: Some((PathBuf::from(tmp), path.to_path_buf())),
        })
    }

    /// Writes `prefix` over the older slot, in one write; false, writing
    /// nothing, if it does not fit the slots (they were made for other
    /// shards).
    pub fn write(&mut self, prefix: &MergedPrefix) -> io::Result<bool> {
        let payload = encode(prefix)?;
        if (payload.len() + SLOT_HEAD) as u64 > self.slot_len {
            return Ok(false);
        }
        let seq = self.seq + 1;
        let mut slot = Vec::with_capacity(SLOT_HEAD + payload.len());
        slot.extend_from_slice(&seq.to_le_bytes());
        slot.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        slot.extend_from_slice(&checksum(&payload).to_le_bytes());
        slot.extend_from_slice(&payload);
        self.file
            .write_all_at(&slot, HEAD + (seq % 2) * self.slot_len)?;
        self.seq = seq;
        if let Some((tmp, path)) = self.unnamed.take() {
            std::fs::rename(tmp, path)?;
        }
        Ok(true)
    }
}

/// The newest whole [`MergedPrefix`] in `bytes`, the contents of
/// `merged.prefix`: in slots ([`PrefixSlots`]), or one whole file, as the
/// merge after the fact writes it.
pub fn decode(bytes: &[u8]) -> Result<MergedPrefix, String> {
    let Some(rest) = bytes.strip_prefix(MAGIC) else {
        return rmp_serde::from_slice(bytes).map_err(|e| e.to_string());
    };
    let word = |b: &[u8], at: usize| -> Option<u64> {
        Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
    };
    let slot_len = word(rest, 0).ok_or("no slot length")? as usize;
    let slot = |i: usize| -> Option<(u64, MergedPrefix)> {
        let start = 8 + i * slot_len;
        let slot = rest.get(start..(start + slot_len).min(rest.len()))?;
        let (seq, len, sum) = (word(slot, 0)?, word(slot, 8)? as usize, word(slot, 16)?);
        let payload = slot.get(SLOT_HEAD..SLOT_HEAD + len)?;
        let whole = seq > 0 && checksum(payload) == sum;
        whole.then(|| Some((seq, rmp_serde::from_slice(payload).ok()?)))?
    };
    [slot(0), slot(1)]
        .into_iter()
        .flatten()
        .max_by_key(|(seq, _)| *seq)
        .map(|(_, prefix)| prefix)
        .ok_or_else(|| "neither slot is whole".to_string())
}

fn encode(prefix: &MergedPrefix) -> io::Result<Vec<u8>> {
    rmp_serde::to_vec_named(prefix).map_err(io::Error::other)
}

/// `shards` with every offset as wide as it can be encoded.
fn widest(shards: &[(String, u64)]) -> Vec<(String, u64)> {
    shards
        .iter()
        .map(|(name, _)| (name.clone(), u64::MAX))
        .collect()
}

/// FNV-1a, 64 bits: enough to tell a slot written whole from one cut.
fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefix(data_len: u64) -> MergedPrefix {
        MergedPrefix {
            data_len,
            shards: vec![("cpu000.shard".into(), data_len / 2)],
            taken: vec![("cpu000.shard".into(), data_len / 2)],
            ..MergedPrefix::default()
        }
    }

    #[test]
    fn the_newest_whole_slot_is_read_and_a_cut_one_is_passed_over() {
        let dir = std::env::temp_dir().join(format!("prefix-slots-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("merged.prefix");
        let mut slots = PrefixSlots::create(&path, &prefix(0)).unwrap();
        assert_eq!(decode(&std::fs::read(&path).unwrap()).unwrap(), prefix(0));
        for len in [100, 200, 300] {
            assert!(slots.write(&prefix(len)).unwrap());
        }
        let read = || decode(&std::fs::read(&path).unwrap());
        assert_eq!(read().unwrap(), prefix(300));
        // The newest slot cut mid-write (its checksum no longer holds):
        // the one before.
        let mut bytes = std::fs::read(&path).unwrap();
        // Four writes: the fourth went into the first slot.
        let newest = HEAD as usize + SLOT_HEAD;
        bytes[newest] ^= 0xff;
        assert_eq!(decode(&bytes).unwrap(), prefix(200));
        // The whole-file form of the merge after the fact.
        let whole = rmp_serde::to_vec_named(&prefix(7)).unwrap();
        assert_eq!(decode(&whole).unwrap(), prefix(7));
        assert!(decode(&bytes[..HEAD as usize]).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn prepared_slots_appear_at_their_first_write() {
        let dir = std::env::temp_dir().join(format!("prefix-prepared-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("merged.prefix");
        let mut slots = PrefixSlots::prepare(&path, &prefix(0)).unwrap();
        assert!(!path.exists(), "no checkpoint yet: no merged.prefix");
        assert!(slots.write(&prefix(100)).unwrap());
        assert_eq!(decode(&std::fs::read(&path).unwrap()).unwrap(), prefix(100));
        assert!(slots.write(&prefix(200)).unwrap());
        assert_eq!(decode(&std::fs::read(&path).unwrap()).unwrap(), prefix(200));
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            1,
            "the temporary name is gone"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
