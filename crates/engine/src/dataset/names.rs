//! Dataset and snapshot names, checked the way `zfs` checks them:
//! `pool/a/b` for a file system, `pool/a/b@snap` for a snapshot.

use crate::error::{Error, Result};

/// Longest full name, in bytes (ZFS's ZFS_MAX_DATASET_NAME_LEN − 1).
pub const MAX_NAME_BYTES: usize = 255;

/// A checked name: the file system part and, for a snapshot, the snapshot part.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DsName {
    pub fs: String,
    pub snap: Option<String>,
}

impl DsName {
    pub fn full(&self) -> String {
        match &self.snap {
            Some(s) => format!("{}@{}", self.fs, s),
            None => self.fs.clone(),
        }
    }

    /// The parent file system (None for the pool's root dataset).
    pub fn parent(&self) -> Option<&str> {
        self.fs.rfind('/').map(|i| &self.fs[..i])
    }
}

/// What is wrong with one component (`None`: nothing), in zfs's words.
fn component_error(c: &str) -> Option<String> {
    match c {
        "" => Some("empty component or misplaced '@' delimiter in name".to_string()),
        "." => Some("self reference, '.' is found in name".to_string()),
        ".." => Some("parent reference, '..' is found in name".to_string()),
        _ => c.chars().find(|ch| !(ch.is_ascii_alphanumeric() || "_.:-".contains(*ch))).map(|ch| format!("invalid character '{}' in name", ch.escape_default())),
    }
}

/// Checks `name`'s syntax alone, whatever pool it names, and says what is
/// wrong the way `zfs` does: `invalid dataset name '/p1/x': leading slash
/// in name` (the daemon turns it into `cannot create '/p1/x': leading
/// slash in name`).
pub fn check(name: &str) -> Result<DsName> {
    let bad = |why: &str| Err(Error::invalid(format!("invalid dataset name '{}': {}", name, why)));
    if name.len() > MAX_NAME_BYTES {
        return bad(&format!("name is too long (more than {} bytes)", MAX_NAME_BYTES));
    }
    if name.starts_with('/') {
        return bad("leading slash in name");
    }
    let (fs, snap) = match name.split_once('@') {
        Some((f, s)) => (f, Some(s)),
        None => (name, None),
    };
    if fs.ends_with('/') && fs.len() > 1 {
        return bad("trailing slash in name");
    }
    if snap.is_some_and(|s| s.contains('@')) {
        return bad("multiple '@' delimiters in name");
    }
    if let Some(why) = fs.split('/').find_map(component_error) {
        return bad(&why);
    }
    if let Some(why) = snap.and_then(component_error) {
        return bad(&why);
    }
    Ok(DsName { fs: fs.to_string(), snap: snap.map(str::to_string) })
}

/// Parses `name` as a dataset (or snapshot) name of pool `pool`.
pub fn parse(name: &str, pool: &str) -> Result<DsName> {
    let n = check(name)?;
    if n.fs.split('/').next() != Some(pool) {
        return Err(Error::invalid(format!("invalid dataset name '{}': datasets of this pool begin with '{}'", name, pool)));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(parse("p", "p").is_ok());
        assert!(parse("p/a/b-c_d.e:f", "p").is_ok());
        assert_eq!(parse("p/a@s1", "p").unwrap().snap.as_deref(), Some("s1"));
        for bad in ["", "q/a", "p//a", "p/a/", "p/a b", "p/a@", "p/a@b@c", "p/a@b/c", "p/..", "/p"] {
            assert!(parse(bad, "p").is_err(), "{bad} accepted");
        }
        let long = format!("p/{}", "x".repeat(254));
        assert!(parse(&long, "p").is_err());
        // zfs's words, naming the name.
        for (bad, why) in [
            ("/p1/x", "leading slash in name"),
            ("p/a/", "trailing slash in name"),
            ("p//a", "empty component"),
            ("p/a@", "empty component"),
            ("p/a@b@c", "multiple '@' delimiters in name"),
            ("p/a b", "invalid character ' ' in name"),
            ("p/a@b/c", "invalid character '/' in name"),
            ("p/./a", "self reference"),
            ("p/..", "parent reference"),
        ] {
            let e = check(bad).unwrap_err();
            assert!(e.msg.starts_with(&format!("invalid dataset name '{}': ", bad)) && e.msg.contains(why), "{}: {}", bad, e.msg);
        }
        assert_eq!(parse("p/a/b", "p").unwrap().parent(), Some("p/a"));
        assert_eq!(parse("p", "p").unwrap().parent(), None);
    }
}
