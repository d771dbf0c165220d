//! Dataset properties: which exist, their defaults, how a value is checked,
//! whether children inherit it, and where a value comes from (its SOURCE).
//!
//! Local values live in the dataset record as `prop:<name>`; nothing else is
//! stored. A value is found on the dataset itself (`local`), else on the
//! nearest ancestor that has one (`inherited from <ancestor>`) for the
//! inheritable properties, else it is the `default`. Read-only properties
//! are computed and have source `-`. `mountpoint` is inherited by appending
//! the path below the ancestor, as ZFS does.

use std::fmt;

use crate::error::{printable, Error, Result};
use crate::io::CompressSetting;

/// Where a property value comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    Local,
    Default,
    /// Inherited from the named ancestor.
    Inherited(String),
    /// A read-only (computed) property.
    None,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Local => f.write_str("local"),
            Source::Default => f.write_str("default"),
            Source::Inherited(n) => write!(f, "inherited from {}", n),
            Source::None => f.write_str("-"),
        }
    }
}

/// A property's value and its source (serialized with the source as
/// `zfs get` prints it: "local", "default", "inherited from X", "-").
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PropValue {
    pub value: String,
    #[serde(serialize_with = "source_as_text")]
    pub source: Source,
}

fn source_as_text<S: serde::Serializer>(s: &Source, ser: S) -> std::result::Result<S::Ok, S::Error> {
    ser.collect_str(s)
}

struct Def {
    name: &'static str,
    default: &'static str,
    inherit: bool,
    allowed: &'static str,
    check: fn(&str) -> bool,
}

fn one_of(v: &str, set: &[&str]) -> bool {
    set.contains(&v)
}

fn is_size_or_none(v: &str) -> bool {
    v == "none" || crate::tunables::parse_size(v).is_some()
}

const SETTABLE: &[Def] = &[
    Def { name: "recordsize", default: "128K", inherit: true, allowed: "a power of two from 512 to 16M", check: |v| crate::pool::parse_recordsize(v).is_ok() },
    Def { name: "compression", default: "lz4", inherit: true, allowed: "off, on, lz4, zstd, zstd-1 … zstd-19", check: |v| CompressSetting::parse(v).is_ok() },
    Def { name: "checksum", default: "on", inherit: true, allowed: "on, fletcher4, blake3, off", check: |v| one_of(v, &["on", "fletcher4", "blake3", "off"]) },
    Def { name: "atime", default: "on", inherit: true, allowed: "on, off", check: |v| one_of(v, &["on", "off"]) },
    Def { name: "relatime", default: "on", inherit: true, allowed: "on, off", check: |v| one_of(v, &["on", "off"]) },
    Def { name: "sync", default: "standard", inherit: true, allowed: "standard, always, disabled", check: |v| one_of(v, &["standard", "always", "disabled"]) },
    Def { name: "logbias", default: "latency", inherit: true, allowed: "latency, throughput", check: |v| one_of(v, &["latency", "throughput"]) },
    Def { name: "primarycache", default: "all", inherit: true, allowed: "all, metadata, none", check: |v| one_of(v, &["all", "metadata", "none"]) },
    Def { name: "secondarycache", default: "all", inherit: true, allowed: "all, metadata, none", check: |v| one_of(v, &["all", "metadata", "none"]) },
    Def { name: "quota", default: "none", inherit: false, allowed: "none or a size (e.g. 10G)", check: is_size_or_none },
    Def { name: "reservation", default: "none", inherit: false, allowed: "none or a size (e.g. 10G)", check: is_size_or_none },
    Def { name: "readonly", default: "off", inherit: true, allowed: "on, off", check: |v| one_of(v, &["on", "off"]) },
    Def { name: "mountpoint", default: "", inherit: true, allowed: "an absolute path, none or legacy", check: |v| v == "none" || v == "legacy" || mountpoint_problem(v).is_none() },
    Def { name: "canmount", default: "on", inherit: false, allowed: "on, off, noauto", check: |v| one_of(v, &["on", "off", "noauto"]) },
    Def { name: "overlay", default: "on", inherit: true, allowed: "on, off", check: |v| one_of(v, &["on", "off"]) },
    Def { name: "copies", default: "1", inherit: true, allowed: "1, 2, 3", check: |v| one_of(v, &["1", "2", "3"]) },
    Def { name: "redundant_metadata", default: "all", inherit: true, allowed: "all, most, some, none", check: |v| crate::io::RedundantMetadata::parse(v).is_some() },
    Def { name: "snapdir", default: "hidden", inherit: true, allowed: "hidden, visible", check: |v| one_of(v, &["hidden", "visible"]) },
];

/// Longest mount point path, bytes (Linux's `PATH_MAX` less its NUL).
pub const MOUNTPOINT_MAX_BYTES: usize = 4095;
/// Longest component of a mount point path, bytes (`NAME_MAX`).
pub const MOUNTPOINT_COMPONENT_MAX_BYTES: usize = 255;

/// What is wrong with `path` as a mount point on its face (before the
/// daemon looks at the host): not absolute, a NUL or other control
/// character (a newline would split the mount table's lines and every
/// message naming it), longer than the kernel accepts. `None`: nothing.
pub fn mountpoint_problem(path: &str) -> Option<String> {
    if !path.starts_with('/') {
        return Some("not an absolute path".into());
    }
    if path.contains('\0') {
        return Some("it contains a NUL byte".into());
    }
    if path.chars().any(char::is_control) {
        return Some("it contains a control character (newline, tab, …)".into());
    }
    if path.len() > MOUNTPOINT_MAX_BYTES {
        return Some(format!("it is {} bytes long; the longest path is {} bytes", path.len(), MOUNTPOINT_MAX_BYTES));
    }
    if let Some(c) = path.split('/').find(|c| c.len() > MOUNTPOINT_COMPONENT_MAX_BYTES) {
        return Some(format!("a component is {} bytes long; the longest name is {} bytes", c.len(), MOUNTPOINT_COMPONENT_MAX_BYTES));
    }
    None
}

/// Computed properties (source `-`).
pub const READONLY: &[&str] = &[
    "type", "creation", "used", "available", "referenced", "compressratio", "refcompressratio", "written", "origin", "usedbysnapshots",
    "usedbydataset", "usedbychildren",
];

/// Every property name, settable first, in a stable order.
pub fn all_names() -> Vec<&'static str> {
    SETTABLE.iter().map(|d| d.name).chain(READONLY.iter().copied()).collect()
}

fn def(name: &str) -> Option<&'static Def> {
    SETTABLE.iter().find(|d| d.name == name)
}

/// Checks that `name` is settable and `value` allowed; returns the value to
/// store. A size of 0 for `quota` or `reservation` means none, and is
/// stored (and shown) as `none`, as OpenZFS does.
pub fn validate(name: &str, value: &str) -> Result<String> {
    let Some(d) = def(name) else {
        if READONLY.contains(&name) {
            return Err(Error::invalid(format!("property '{}' is read-only", name)));
        }
        return Err(Error::invalid(format!("unknown property '{}'", name)));
    };
    if !(d.check)(value) {
        let why = if name == "mountpoint" { mountpoint_problem(value).map(|w| format!("{}; ", w)) } else { None };
        return Err(Error::invalid(format!("bad value '{}' for property '{}': {}expected {}", printable(value), name, why.unwrap_or_default(), d.allowed)));
    }
    if SIZE_LIMITS.contains(&name) && size_value(value) == 0 {
        return Ok("none".to_string());
    }
    Ok(value.to_string())
}

/// The size properties for which 0 means none.
const SIZE_LIMITS: &[&str] = &["quota", "reservation"];

/// Checks that `name` can be inherited: settable, and inherited by
/// children. Like `zfs inherit`, the others (`quota`, `reservation`,
/// `canmount`) are refused rather than silently cleared.
pub fn check_inheritable(name: &str) -> Result<()> {
    match def(name) {
        Some(d) if d.inherit => Ok(()),
        Some(_) if SIZE_LIMITS.contains(&name) => {
            Err(Error::invalid(format!("'{}' property cannot be inherited: use 'set {}=none' to clear", name, name)))
        }
        Some(_) => Err(Error::invalid(format!("'{}' property cannot be inherited", name))),
        None if READONLY.contains(&name) => Err(Error::invalid(format!("property '{}' is read-only", name))),
        None => Err(Error::invalid(format!("unknown property '{}'", name))),
    }
}

pub fn is_settable(name: &str) -> bool {
    def(name).is_some()
}

pub fn inherits(name: &str) -> bool {
    def(name).is_some_and(|d| d.inherit)
}

pub fn default_of(name: &str) -> &'static str {
    def(name).map_or("-", |d| d.default)
}

/// A size property (quota, reservation) in bytes; 0 for none.
pub fn size_value(v: &str) -> u64 {
    if v == "none" {
        0
    } else {
        crate::tunables::parse_size(v).unwrap_or(0)
    }
}

/// Properties that change how the object set writes.
pub const WRITE_PROPS: &[&str] = &["recordsize", "compression", "checksum", "copies", "redundant_metadata", "primarycache", "secondarycache"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_names_the_property_and_values() {
        let e = validate("atime", "maybe").unwrap_err();
        assert!(e.msg.contains("atime") && e.msg.contains("on, off"), "{}", e);
        assert!(validate("recordsize", "3000").is_err());
        assert!(validate("recordsize", "1M").is_ok());
        assert!(validate("used", "1").unwrap_err().msg.contains("read-only"));
        assert!(validate("bogus", "1").unwrap_err().msg.contains("unknown"));
        assert!(validate("compression", "zstd-7").is_ok());
        assert!(validate("quota", "10G").is_ok());
        assert!(validate("mountpoint", "rel").unwrap_err().msg.contains("not an absolute path"));
        assert!(validate("mountpoint", "/a b/c").is_ok() && validate("mountpoint", "none").is_ok());
        let e = validate("mountpoint", "/a\nb").unwrap_err();
        assert!(e.msg.contains("control character") && e.msg.contains("'/a\\nb'") && !e.msg.contains('\n'), "{}", e);
        assert!(validate("mountpoint", "/a\0b").unwrap_err().msg.contains("NUL"));
        let long = format!("/{}", "d/".repeat(2100));
        let e = validate("mountpoint", &long).unwrap_err();
        assert!(e.msg.contains("4201 bytes long") && e.msg.len() < 400, "the value is shortened: {}", e);
        assert!(validate("mountpoint", &format!("/{}", "x".repeat(256))).unwrap_err().msg.contains("component is 256 bytes"));
        assert!(validate("overlay", "off").is_ok() && validate("overlay", "maybe").is_err());
        assert!(inherits("overlay") && default_of("overlay") == "on");
        assert!(validate("snapdir", "visible").is_ok() && validate("snapdir", "shown").is_err());
        assert!(inherits("snapdir") && default_of("snapdir") == "hidden");
    }

    /// Pins: `inherit quota` silently cleared the quota, and `quota=0`
    /// was shown as 0 while acting as none.
    #[test]
    fn limits_are_not_inherited_and_zero_is_none() {
        for p in ["quota", "reservation"] {
            let e = check_inheritable(p).unwrap_err();
            assert!(e.msg.contains("cannot be inherited") && e.msg.contains(&format!("set {p}=none")), "{e}");
            assert_eq!(validate(p, "0").unwrap(), "none");
            assert_eq!(validate(p, "0K").unwrap(), "none");
            assert_eq!(validate(p, "1M").unwrap(), "1M");
        }
        assert!(check_inheritable("canmount").unwrap_err().msg.contains("'canmount' property cannot be inherited"));
        assert!(check_inheritable("compression").is_ok() && check_inheritable("mountpoint").is_ok());
        assert!(check_inheritable("refcompressratio").unwrap_err().msg.contains("read-only"));
    }
}
