//! ELF notes (`Elf_Nhdr` + name + descriptor) and the byte orders they use.

/// The byte order of an ELF image, or the running kernel's for sysfs notes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Endian {
    /// `ELFDATA2LSB`
    Little,
    /// `ELFDATA2MSB`
    Big,
}

impl Endian {
    /// The byte order of this machine (sysfs notes are written in it).
    pub(crate) fn native() -> Self {
        if cfg!(target_endian = "big") {
            Endian::Big
        } else {
            Endian::Little
        }
    }

    /// The u16 at `offset`, or `None` past the end.
    pub(crate) fn u16(self, bytes: &[u8], offset: usize) -> Option<u16> {
        let raw = array(bytes, offset)?;
        Some(match self {
            Endian::Little => u16::from_le_bytes(raw),
            Endian::Big => u16::from_be_bytes(raw),
        })
    }

    /// The u32 at `offset`, or `None` past the end.
    pub(crate) fn u32(self, bytes: &[u8], offset: usize) -> Option<u32> {
        let raw = array(bytes, offset)?;
        Some(match self {
            Endian::Little => u32::from_le_bytes(raw),
            Endian::Big => u32::from_be_bytes(raw),
        })
    }

    /// The u64 at `offset`, or `None` past the end.
    pub(crate) fn u64(self, bytes: &[u8], offset: usize) -> Option<u64> {
        let raw = array(bytes, offset)?;
        Some(match self {
            Endian::Little => u64::from_le_bytes(raw),
            Endian::Big => u64::from_be_bytes(raw),
        })
    }
}

fn array<const N: usize>(bytes: &[u8], offset: usize) -> Option<[u8; N]> {
    bytes.get(offset..offset.checked_add(N)?)?.try_into().ok()
}

/// `NT_GNU_BUILD_ID`
const NT_GNU_BUILD_ID: u32 = 3;

/// The descriptor of the first `NT_GNU_BUILD_ID` note named "GNU" in
/// `notes`, a run of notes as one `PT_NOTE` segment or `SHT_NOTE` section
/// holds them. Name and descriptor are padded to `align`: 8 only when the
/// segment or section says 8 (as `.note.gnu.property` does), else 4, which
/// is what elfutils and binutils do. Malformed notes end the search.
pub(crate) fn gnu_build_id(notes: &[u8], endian: Endian, align: u64) -> Option<Vec<u8>> {
    let align = if align == 8 { 8 } else { 4 };
    let mut pos = 0usize;
    while pos < notes.len() {
        let namesz = usize::try_from(endian.u32(notes, pos)?).ok()?;
        let descsz = usize::try_from(endian.u32(notes, pos.checked_add(4)?)?).ok()?;
        let kind = endian.u32(notes, pos.checked_add(8)?)?;
        let name_start = pos.checked_add(12)?;
        let name_end = name_start.checked_add(namesz)?;
        let desc_start = name_end.checked_next_multiple_of(align)?;
        let desc_end = desc_start.checked_add(descsz)?;
        let name = notes.get(name_start..name_end)?;
        // An empty descriptor names nothing: keep looking, as a linker
        // never writes one.
        if kind == NT_GNU_BUILD_ID && name == b"GNU\0" && descsz > 0 {
            return notes.get(desc_start..desc_end).map(<[u8]>::to_vec);
        }
        pos = desc_end.checked_next_multiple_of(align)?;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(name: &[u8], kind: u32, desc: &[u8], align: usize) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&(name.len() as u32).to_le_bytes());
        out.extend_from_slice(&(desc.len() as u32).to_le_bytes());
        out.extend_from_slice(&kind.to_le_bytes());
        out.extend_from_slice(name);
        out.resize(out.len().next_multiple_of(align), 0);
        out.extend_from_slice(desc);
        out.resize(out.len().next_multiple_of(align), 0);
        out
    }

    #[test]
    fn skips_other_notes_to_the_build_id() {
        let mut notes = note(b"Linux\0", 6, b"\x01\x01\0\0", 4);
        notes.extend(note(b"GNU\0", 1, &[0; 16], 4)); // NT_GNU_ABI_TAG
        notes.extend(note(b"GNU\0", 3, &[0xab, 0xcd, 0xef], 4));
        let id = gnu_build_id(&notes, Endian::Little, 4);
        assert_eq!(id.as_deref(), Some(&[0xab, 0xcd, 0xef][..]));
    }

    #[test]
    fn eight_byte_aligned_notes() {
        let mut notes = note(b"GNU\0", 5, &[1; 12], 8); // .note.gnu.property
        notes.extend(note(b"GNU\0", 3, &[7; 20], 8));
        assert_eq!(gnu_build_id(&notes, Endian::Little, 8), Some(vec![7; 20]));
        // Read with 4-byte padding, the second note is misplaced.
        assert_ne!(gnu_build_id(&notes, Endian::Little, 4), Some(vec![7; 20]));
    }

    #[test]
    fn truncated_and_absent() {
        let notes = note(b"GNU\0", 3, &[9; 20], 4);
        for len in 0..notes.len() {
            assert_eq!(gnu_build_id(&notes[..len], Endian::Little, 4), None);
        }
        assert_eq!(
            gnu_build_id(&note(b"Go\0\0", 4, &[1; 8], 4), Endian::Little, 4),
            None
        );
    }
}
