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
//! The daemon's tunables are always what it would compute at a restart:
//! the defaults with every explicit setting named — the daemon's own
//! `--tunable`s, the file's lines, what `tunable set` changed since —
//! through [`Tunables::resolve`], so a tunable nobody set follows an
//! ordered partner that was set (zfs_arc_min follows zfs_arc_max down) and
//! `tunable reset` of either of a pair works in any order.
//!
//! A line that does not apply (an unknown name after an upgrade, a value
//! out of its range such as `zfs_vdev_async_write_max_active=0`, which
//! would hang every write, a pair out of order) is refused: the tunable
//! keeps its default, the daemon's log says so at start and `tunable
//! list` warns of it until it is reset or set anew. A damaged file never
//! keeps the daemon from starting, and never makes it run with a value
//! `tunable set` would refuse. Lines that only apply after another
//! (a pair moved together) are retried until none more applies.

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

/// `NAME=VALUE` items as pairs (names and values trimmed); `what` names
/// the option or command in the error.
pub fn parse_assignments(items: &[String], what: &str) -> Result<Vec<(String, String)>> {
    items
        .iter()
        .map(|s| match s.split_once('=') {
            Some((k, v)) => Ok((k.trim().to_string(), v.trim().to_string())),
            None => Err(Error::invalid(format!("{} takes NAME=VALUE, not '{}'", what, s))),
        })
        .collect()
}

fn as_refs(v: &[(String, String)]) -> Vec<(&str, &str)> {
    v.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

/// A daemon's tunables and where each explicit setting came from.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The host's defaults, sampled once when the daemon started.
    pub defaults: Tunables,
    /// The daemon's own `--tunable` settings.
    pub cli: Vec<(String, String)>,
    /// The file's settings in effect, and those set live since (file order).
    pub kept: Vec<(String, String)>,
    /// The file's lines that could not be applied, each with why.
    pub refused: Vec<(String, String)>,
}

impl Settings {
    /// What a daemon started with `cli_sets` runs with: the settings, the
    /// tunables, and notes (tunables that follow a set partner).
    pub fn load(cli_sets: &[String]) -> Result<(Settings, Tunables, Vec<String>)> {
        let defaults = Tunables::default();
        let cli = parse_assignments(cli_sets, "--tunable")?;
        let mut s = Settings { defaults, cli, kept: Vec::new(), refused: Vec::new() };
        s.tunables_with(&[])?;
        let file = path();
        let persisted = load().unwrap_or_else(|e| {
            s.refused.push((String::new(), format!("{}; starting without the persisted tunables", e)));
            Vec::new()
        });
        let mut pending: Vec<(String, String)> = persisted.into_iter().filter(|(k, _)| !s.cli.iter().any(|(c, _)| c == k)).collect();
        // Passes until none more applies: of a pair moved together, one
        // line applies alone and the other after it (see `tunables!`).
        // Each pass but the last applies a line, so passes ≤ lines + 1.
        loop {
            let before = pending.len();
            let mut rest = Vec::new();
            for e in pending {
                s.kept.push(e);
                if s.tunables_with(&[]).is_err() {
                    rest.push(s.kept.pop().expect("pushed above"));
                }
            }
            pending = rest;
            if pending.is_empty() || pending.len() == before {
                break;
            }
        }
        for (k, v) in pending {
            let mut trial = s.clone();
            trial.kept.push((k.clone(), v.clone()));
            let why = trial.tunables_with(&[]).err().map(|e| e.msg).unwrap_or_default();
            let stays = s.tunables_with(&[]).ok().and_then(|(t, _)| t.get(&k).ok()).map(|v| format!("; {} stays {}", k, v)).unwrap_or_default();
            s.refused.push((k.clone(), format!("'{}': {}={} not applied: {}{}", file.display(), k, v, why, stays)));
        }
        let (t, notes) = s.tunables_with(&[])?;
        Ok((s, t, notes))
    }

    /// The tunables with `extra` set on top of every explicit setting
    /// (what `tunable set` makes live); an error changes nothing.
    pub fn tunables_with(&self, extra: &[(String, String)]) -> Result<(Tunables, Vec<String>)> {
        let mut explicit = self.cli.clone();
        for (k, v) in self.kept.iter().chain(extra) {
            upsert(&mut explicit, k, v);
        }
        self.defaults.resolve(&as_refs(&explicit))
    }

    /// The warnings for the file's refused lines (about `name` only, if given).
    pub fn refused_lines(&self, name: Option<&str>) -> Vec<String> {
        self.refused.iter().filter(|(k, _)| name.is_none_or(|n| n == k)).map(|(_, why)| why.clone()).collect()
    }
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
        let sets = parse_assignments(&["a=1".to_string(), " b = 2".to_string()], "--tunable").unwrap();
        assert_eq!(sets, vec![("a".to_string(), "1".to_string()), ("b".to_string(), "2".to_string())]);
        assert!(parse_assignments(&["bad".to_string()], "--tunable").unwrap_err().msg.contains("'bad'"));
    }
}
