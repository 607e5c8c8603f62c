//! The one framing of every message between the coordinator and a helper,
//! whichever way it goes: its length (u32, little-endian), then its
//! MessagePack encoding, byte vectors as MessagePack bin. A message goes
//! in one `write`, so one under `PIPE_BUF` reaches the other end whole.

use std::io::{self, Read, Write};

use serde::de::DeserializeOwned;
use serde::Serialize;

/// A message longer than this is not one (the VIP's `Ready` carries the
/// records of every loaded program: kilobytes each).
const MAX_LEN: u32 = 1 << 30;

/// A message that crosses a helper's pipes.
pub trait Framed: Serialize + DeserializeOwned {
    /// Writes the message, framed, in one write.
    fn write_to(&self, out: &mut impl Write) -> io::Result<()> {
        out.write_all(&encode(self)?)
    }

    /// Reads the next message; `None` when the other end closed the pipe
    /// before starting one (it exited).
    fn read_from(input: &mut impl Read) -> io::Result<Option<Self>> {
        let mut len = [0u8; 4];
        match input.read_exact(&mut len) {
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
            other => other?,
        }
        let len = checked_len(len)?;
        let mut body = vec![0; len];
        input.read_exact(&mut body)?;
        decode(&body).map(Some)
    }
}

/// The message framed.
pub fn encode(message: &impl Serialize) -> io::Result<Vec<u8>> {
    let mut framed = vec![0u8; 4];
    let mut serializer = rmp_serde::Serializer::new(&mut framed)
        .with_bytes(rmp_serde::config::BytesMode::ForceIterables);
    message
        .serialize(&mut serializer)
        .map_err(io::Error::other)?;
    let len = u32::try_from(framed.len() - 4).map_err(io::Error::other)?;
    framed[..4].copy_from_slice(&len.to_le_bytes());
    Ok(framed)
}

fn checked_len(len: [u8; 4]) -> io::Result<usize> {
    match u32::from_le_bytes(len) {
        len if len > MAX_LEN => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a message of {len} bytes"),
        )),
        len => Ok(len as usize),
    }
}

fn decode<T: DeserializeOwned>(body: &[u8]) -> io::Result<T> {
    rmp_serde::from_slice(body).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Messages read in pieces, as a pipe read without blocking gives them:
/// the bytes short of a whole message wait for the rest.
#[derive(Debug, Default)]
pub struct Unframed {
    bytes: Vec<u8>,
}

impl Unframed {
    /// Takes what one read of `input` gives; `Ok(0)` at its end.
    pub fn fill_from(&mut self, input: &mut impl Read) -> io::Result<usize> {
        let mut buffer = [0u8; 4096];
        let read = input.read(&mut buffer)?;
        self.bytes.extend_from_slice(&buffer[..read]);
        Ok(read)
    }

    /// Takes everything `input` gives until its end.
    pub fn fill_to_end(&mut self, input: &mut impl Read) -> io::Result<usize> {
        input.read_to_end(&mut self.bytes)
    }

    /// The next whole message, if one is here; a garbled one is an error
    /// (and is passed over).
    pub fn take<T: Framed>(&mut self) -> Option<io::Result<T>> {
        let len = checked_len(self.bytes.get(..4)?.try_into().expect("four bytes"));
        let len = match len {
            Ok(len) => len,
            Err(e) => {
                self.bytes.clear();
                return Some(Err(e));
            }
        };
        let body = self.bytes.get(4..4 + len)?;
        let message = decode(body);
        self.bytes.drain(..4 + len);
        Some(message)
    }
}

/// Paths as their bytes, for the `#[serde(with)]` of a message's path
/// fields: a path need not be UTF-8, as serde's own form of it requires.
pub mod path_bytes {
    use std::ffi::OsString;
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    use std::path::{Path, PathBuf};

    use serde::{Deserializer, Serializer};

    /// Writes the path's bytes.
    pub fn serialize<S: Serializer>(path: &Path, out: S) -> Result<S::Ok, S::Error> {
        out.serialize_bytes(path.as_os_str().as_bytes())
    }

    /// Reads a path from its bytes.
    pub fn deserialize<'de, D: Deserializer<'de>>(input: D) -> Result<PathBuf, D::Error> {
        let bytes = serde_bytes_vec(input)?;
        Ok(PathBuf::from(OsString::from_vec(bytes)))
    }

    fn serde_bytes_vec<'de, D: Deserializer<'de>>(input: D) -> Result<Vec<u8>, D::Error> {
        struct Bytes;
        impl<'de> serde::de::Visitor<'de> for Bytes {
            type Value = Vec<u8>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a path's bytes")
            }
            fn visit_bytes<E: serde::de::Error>(self, bytes: &[u8]) -> Result<Vec<u8>, E> {
                Ok(bytes.to_vec())
            }
            fn visit_byte_buf<E: serde::de::Error>(self, bytes: Vec<u8>) -> Result<Vec<u8>, E> {
                Ok(bytes)
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Vec<u8>, E> {
                Ok(text.as_bytes().to_vec())
            }
        }
        input.deserialize_byte_buf(Bytes)
    }

    /// The same for a list of paths.
    pub mod list {
        use std::path::PathBuf;

        use serde::ser::SerializeSeq;
        use serde::{Deserialize, Deserializer, Serializer};

        /// Writes each path's bytes.
        pub fn serialize<'a, S, I>(paths: I, out: S) -> Result<S::Ok, S::Error>
        where
            S: Serializer,
            I: IntoIterator<Item = &'a PathBuf>,
        {
            let mut seq = out.serialize_seq(None)?;
            for path in paths {
                seq.serialize_element(&Wrapped(path))?;
            }
            seq.end()
        }

        /// Reads paths from their bytes, into any collection of them.
        pub fn deserialize<'de, D, C>(input: D) -> Result<C, D::Error>
        where
            D: Deserializer<'de>,
            C: FromIterator<PathBuf>,
        {
            let paths = Vec::<Unwrapped>::deserialize(input)?;
            Ok(paths.into_iter().map(|p| p.0).collect())
        }

        struct Wrapped<'a>(&'a PathBuf);
        impl serde::Serialize for Wrapped<'_> {
            fn serialize<S: Serializer>(&self, out: S) -> Result<S::Ok, S::Error> {
                super::serialize(self.0, out)
            }
        }

        struct Unwrapped(PathBuf);
        impl<'de> Deserialize<'de> for Unwrapped {
            fn deserialize<D: Deserializer<'de>>(input: D) -> Result<Self, D::Error> {
                super::deserialize(input).map(Unwrapped)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    enum Said {
        Plain,
        Path(#[serde(with = "path_bytes")] PathBuf),
        Many(#[serde(with = "path_bytes::list")] Vec<PathBuf>),
    }
    impl Framed for Said {}

    fn odd_path() -> PathBuf {
        use std::os::unix::ffi::OsStringExt;
        PathBuf::from(std::ffi::OsString::from_vec(b"/tmp/\xff\xfe.data".to_vec()))
    }

    #[test]
    fn a_path_that_is_not_utf8_goes_through() {
        let said = [
            Said::Plain,
            Said::Path(odd_path()),
            Said::Many(vec![odd_path(), "perf.data".into()]),
        ];
        let mut pipe = Vec::new();
        for message in &said {
            message.write_to(&mut pipe).unwrap();
        }
        let mut read = &pipe[..];
        for message in said {
            assert_eq!(Said::read_from(&mut read).unwrap(), Some(message));
        }
        assert_eq!(Said::read_from(&mut read).unwrap(), None);
    }

    #[test]
    fn pieces_wait_for_the_rest() {
        let mut pipe = Vec::new();
        Said::Path(odd_path()).write_to(&mut pipe).unwrap();
        Said::Plain.write_to(&mut pipe).unwrap();
        let mut unframed = Unframed::default();
        let (first, rest) = pipe.split_at(5);
        unframed.fill_from(&mut &first[..]).unwrap();
        assert!(unframed.take::<Said>().is_none());
        unframed.fill_to_end(&mut &rest[..]).unwrap();
        assert_eq!(
            unframed.take::<Said>().unwrap().unwrap(),
            Said::Path(odd_path())
        );
        assert_eq!(unframed.take::<Said>().unwrap().unwrap(), Said::Plain);
        assert!(unframed.take::<Said>().is_none());
    }

    #[test]
    fn a_cut_garbled_or_huge_message_is_an_error() {
        let mut cut = Vec::new();
        Said::Path(odd_path()).write_to(&mut cut).unwrap();
        cut.pop();
        assert!(Said::read_from(&mut &cut[..]).is_err());
        let garbled = [2u8, 0, 0, 0, 0xc1, 0xc1];
        assert!(Said::read_from(&mut &garbled[..]).is_err());
        let huge = u32::MAX.to_le_bytes();
        assert!(Said::read_from(&mut &huge[..]).is_err());
        let mut unframed = Unframed::default();
        unframed.fill_to_end(&mut &huge[..]).unwrap();
        assert!(unframed.take::<Said>().unwrap().is_err());
    }
}
