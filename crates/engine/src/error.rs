//! Errors of the engine.
//!
//! Inside, each family of operations reports what went wrong in detail; the
//! caller mostly needs to know what to do about it, which is [`ErrorKind`]:
//! fix the input, look elsewhere, free space, repair the pool, retry. Every
//! message names the pool, dataset, object or device it is about.

use std::fmt;

use tarn_ondisk::DecodeError;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The request itself is wrong (bad name, value, argument).
    Invalid,
    NotFound,
    Exists,
    /// The pool is full (ENOSPC).
    NoSpace,
    /// A quota of the dataset or of an ancestor is reached (EDQUOT): the
    /// pool may have room, this dataset may not use it.
    Quota,
    /// Data on disk failed verification (checksum, structure).
    Corrupt,
    /// A device failed an operation.
    Io,
    /// Someone else holds the resource.
    Busy,
    /// The pool stopped accepting writes after an I/O failure on the sync path.
    Suspended,
}

#[derive(Debug)]
pub struct Error {
    pub kind: ErrorKind,
    pub msg: String,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(kind: ErrorKind, msg: impl Into<String>) -> Self {
        Error { kind, msg: msg.into() }
    }
    pub fn invalid(msg: impl Into<String>) -> Self {
        Error::new(ErrorKind::Invalid, msg)
    }
    pub fn not_found(msg: impl Into<String>) -> Self {
        Error::new(ErrorKind::NotFound, msg)
    }
    pub fn corrupt(msg: impl Into<String>) -> Self {
        Error::new(ErrorKind::Corrupt, msg)
    }
    pub fn no_space(msg: impl Into<String>) -> Self {
        Error::new(ErrorKind::NoSpace, msg)
    }
    pub fn quota(msg: impl Into<String>) -> Self {
        Error::new(ErrorKind::Quota, msg)
    }
    pub fn io(context: impl fmt::Display, e: std::io::Error) -> Self {
        Error::new(ErrorKind::Io, format!("{}: {}", context, e))
    }
    /// Adds what the error is about in front of its message.
    pub fn context(self, what: impl fmt::Display) -> Self {
        Error { kind: self.kind, msg: format!("{}: {}", what, self.msg) }
    }
}

/// Longest user-given value an error message shows whole, characters.
const SHOWN_MAX_CHARS: usize = 120;

/// `s` as an error message may show it: control characters escaped (a
/// newline would make the one-line error two lines), and a value longer
/// than `SHOWN_MAX_CHARS` cut, with its length said.
pub fn printable(s: &str) -> String {
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i == SHOWN_MAX_CHARS {
            out.push_str(&format!("…({} bytes)", s.len()));
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.msg)
    }
}

impl std::error::Error for Error {}

impl From<DecodeError> for Error {
    fn from(e: DecodeError) -> Self {
        Error::corrupt(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn printable_values_stay_on_one_line_and_short() {
        assert_eq!(super::printable("/a\nb\tc"), "/a\\nb\\tc");
        assert_eq!(super::printable("/plain path"), "/plain path");
        let long = "x".repeat(5000);
        let p = super::printable(&long);
        assert!(p.starts_with("xxx") && p.ends_with("…(5000 bytes)") && p.len() < 140, "{}", p);
    }
}
