//! Finding line ends eight bytes at a time: most of what the walk reads from
//! `/proc` is skipped over looking for the next newline, which a byte-wise
//! loop does at one byte per cycle.

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// Where the first `byte` in `hay` is.
pub(crate) fn find(hay: &[u8], byte: u8) -> Option<usize> {
    let pattern = ONES * u64::from(byte);
    let mut chunks = hay.chunks_exact(8);
    let mut offset = 0;
    for chunk in &mut chunks {
        let word = u64::from_le_bytes(chunk.try_into().unwrap()) ^ pattern;
        // The lowest high bit set marks the first zero byte (borrows only
        // cause false marks above a real one).
        let zeros = word.wrapping_sub(ONES) & !word & HIGHS;
        if zeros != 0 {
            return Some(offset + zeros.trailing_zeros() as usize / 8);
        }
        offset += 8;
    }
    let rest = chunks.remainder().iter().position(|&b| b == byte)?;
    Some(offset + rest)
}

/// The lines of `text`, without their newlines (and no empty last line).
pub(crate) fn lines(text: &[u8]) -> Lines<'_> {
    Lines { rest: text }
}

/// Iterator returned by [`lines`].
pub(crate) struct Lines<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Lines<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.rest.is_empty() {
            return None;
        }
        let (line, rest) = match find(self.rest, b'\n') {
            Some(at) => (&self.rest[..at], &self.rest[at + 1..]),
            None => (self.rest, &[][..]),
        };
        self.rest = rest;
        Some(line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_like_position() {
        let text: Vec<u8> = (0..200u32).map(|i| (i * 7 % 251) as u8).collect();
        for byte in 0..=255u8 {
            for start in 0..20 {
                let hay = &text[start..];
                assert_eq!(find(hay, byte), hay.iter().position(|&b| b == byte));
            }
        }
    }

    #[test]
    fn splits_lines() {
        let all: Vec<&[u8]> = lines(b"a\n\nbcdefghijk\nl").collect();
        assert_eq!(all, [&b"a"[..], b"", b"bcdefghijk", b"l"]);
        assert_eq!(lines(b"x\n").count(), 1);
        assert_eq!(lines(b"").count(), 0);
    }
}
