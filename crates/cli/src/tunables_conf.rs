//! Tunables set live with `tarn tunable set`, kept across daemon restarts:
//! tarn's `/etc/modprobe.d/zfs.conf`.
//!
//! The file lies next to the pool cache file, with the cache file's name
//! and the extension `.tunables` (`/etc/tarn/tarn.tunables` by default;
//! `TARN_CACHE=/x/tank.cache` puts it at `/x/tank.tunables`). It holds one
//! `NAME=VALUE` per line, values as they were typed; blank lines and lines
//! starting with `#` are ignored, so an administrator may edit it by hand.
//! The daemon rewrites it atomically (a temporary file, then a rename) on
//! `tunable set` and `tunable reset`, and reads it when it starts.
//!
//! Precedence, lowest first: the built-in defaults, this file, the
//! daemon's own `--tunable` settings (an explicit start-time setting wins
//! over a remembered one). `tunable reset NAME` returns NAME to what the
//! daemon would have without the file and drops it from the file.
//!
//! A line that no longer applies (an unknown name after an upgrade, a value
//! out of range) is skipped with a warning in the daemon's log: a damaged
//! file never keeps the daemon from starting.

use std::path::PathBuf;

use tarn_engine::{Error, Result, Tunables};

/// The file's path, from the pool cache file's.
pub fn path() -> PathBuf {
    crate::cache::path().with_extension("tunables")
}

/// Most lines read from the file (a bound on a hand-edited file).
const LINES_MAX: usize = 10_000;

/// The persisted settings, in file order (one per name).
pub fn load() -> Result<Vec<(String, String)>> {
    let p = path();
    let text = match std::fs::read_to_string(&p) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(format!("reading the tunables file '{}'", p.display()), e)),
    };
    let mut out: Vec<(String, String)> = Vec::new();
    for line in text.lines().take(LINES_MAX).map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
        // A line without '=' keeps its name with an empty value, which
        // fails to apply and is reported then.
        let (k, v) = line.split_once('=').unwrap_or((line, ""));
        upsert(&mut out, k.trim(), v.trim());
    }
    Ok(out)
}

/// Sets `name` in `entries` (replacing an earlier value in place).
pub fn upsert(entries: &mut Vec<(String, String)>, name: &str, value: &str) {
    match entries.iter_mut().find(|(k, _)| k == name) {
        Some(e) => e.1 = value.to_string(),
        None => entries.push((name.to_string(), value.to_string())),
    }
}

/// Rewrites the file with `entries` (removes it when there are none).
pub fn save(entries: &[(String, String)]) -> Result<()> {
    let p = path();
    if entries.is_empty() {
        return match std::fs::remove_file(&p) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io(format!("removing '{}'", p.display()), e)),
            _ => Ok(()),
        };
    }
    if let Some(dir) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(format!("creating '{}'", dir.display()), e))?;
    }
    let mut text = String::from("# Tunables set with `tarn tunable set`, applied when the tarn daemon starts.\n# One NAME=VALUE per line; `tarn tunable reset NAME` removes one.\n");
    for (k, v) in entries {
        text.push_str(&format!("{}={}\n", k, v));
    }
    // Readable by all, writable by root only: it sets how every pool runs.
    crate::cache::write_atomic(&p, &p.with_extension("tunables.tmp"), text.as_bytes(), 0o644)
}

/// The names `--tunable NAME=VALUE` settings name.
fn names_of(cli_sets: &[String]) -> Vec<&str> {
    cli_sets.iter().filter_map(|s| s.split_once('=')).map(|(k, _)| k.trim()).collect()
}

/// What a daemon started with `cli_sets` runs with: (its base — defaults
/// and `cli_sets`, what `reset` returns to —, the effective tunables, and a
/// warning per persisted setting that could not be applied).
pub fn daemon_tunables(cli_sets: &[String]) -> Result<(Tunables, Tunables, Vec<String>)> {
    let base = crate::tunables(cli_sets)?;
    let overridden = names_of(cli_sets);
    let file = path();
    let mut warnings = Vec::new();
    let persisted = load().unwrap_or_else(|e| {
        warnings.push(format!("{}; starting without the persisted tunables", e));
        Vec::new()
    });
    let wanted: Vec<(&str, &str)> = persisted.iter().filter(|(k, _)| !overridden.contains(&k.as_str())).map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut t = base.clone();
    // Together first (so zfs_arc_min and zfs_arc_max may move as a pair);
    // if that fails, one by one, skipping what does not apply.
    if t.set_many(&wanted).is_err() {
        for (k, v) in &wanted {
            if let Err(e) = t.set(k, v) {
                warnings.push(format!("'{}': {}={} not applied: {}", file.display(), k, v, e.msg));
            }
        }
    }
    Ok((base, t, warnings))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse_and_later_ones_win() {
        let mut v = Vec::new();
        upsert(&mut v, "zfs_arc_max", "1G");
        upsert(&mut v, "zfs_txg_timeout", "3");
        upsert(&mut v, "zfs_arc_max", "2G");
        assert_eq!(v, vec![("zfs_arc_max".to_string(), "2G".to_string()), ("zfs_txg_timeout".to_string(), "3".to_string())]);
        assert_eq!(names_of(&["a=1".to_string(), " b = 2".to_string(), "bad".to_string()]), vec!["a", "b"]);
    }
}
