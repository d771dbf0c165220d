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

fn valid_component(c: &str) -> bool {
    !c.is_empty() && c != "." && c != ".." && c.chars().all(|ch| ch.is_ascii_alphanumeric() || "_.:-".contains(ch))
}

/// Parses `name` as a dataset (or snapshot) name of pool `pool`.
pub fn parse(name: &str, pool: &str) -> Result<DsName> {
    let bad = |why: &str| Err(Error::invalid(format!("invalid dataset name '{}': {}", name, why)));
    if name.len() > MAX_NAME_BYTES {
        return bad(&format!("longer than {} bytes", MAX_NAME_BYTES));
    }
    let (fs, snap) = match name.split_once('@') {
        Some((f, s)) => (f, Some(s)),
        None => (name, None),
    };
    for comp in fs.split('/') {
        if comp.is_empty() {
            return bad("empty component");
        }
        if !valid_component(comp) {
            return bad(&format!("component '{}' may only hold letters, digits and _ . : - (and is not . or ..)", comp));
        }
    }
    if fs.split('/').next() != Some(pool) {
        return bad(&format!("datasets of this pool begin with '{}'", pool));
    }
    if let Some(s) = snap {
        if s.contains('@') {
            return bad("more than one '@'");
        }
        if !valid_component(s) {
            return bad(&format!("snapshot name '{}' may only hold letters, digits and _ . : -", s));
        }
    }
    Ok(DsName { fs: fs.to_string(), snap: snap.map(str::to_string) })
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
        assert_eq!(parse("p/a/b", "p").unwrap().parent(), Some("p/a"));
        assert_eq!(parse("p", "p").unwrap().parent(), None);
    }
}
