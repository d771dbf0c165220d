//! The pool cache file: which pools this host has imported and where their
//! devices are (OpenZFS's zpool.cache). `pool create` and `pool import` add a
//! pool, `export` and `destroy` remove it; every other command finds its pool
//! here. The file is rewritten atomically (write to a temporary, rename).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tarn_engine::{Error, Result};

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct CachedPool {
    pub name: String,
    /// A string in the file (`guid_json`); a number from older files reads too.
    #[serde(with = "tarn_engine::guid_json")]
    pub guid: u64,
    pub devices: Vec<String>,
    /// The root dataset's mountpoint: absent = /NAME, "none" = not mounted
    /// (kept here until datasets carry the mountpoint property).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mountpoint: Option<String>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Cache {
    pub pools: Vec<CachedPool>,
}

/// `TARN_CACHE` if set, else /etc/tarn/tarn.cache.
pub fn path() -> PathBuf {
    std::env::var_os("TARN_CACHE").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/etc/tarn/tarn.cache"))
}

impl Cache {
    pub fn load() -> Result<Cache> {
        let p = path();
        match std::fs::read(&p) {
            Ok(b) => serde_json::from_slice(&b)
                .map_err(|e| Error::corrupt(format!("pool cache file '{}' is damaged ({}); remove it and re-import your pools", p.display(), e))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Cache::default()),
            Err(e) => Err(Error::io(format!("reading pool cache file '{}'", p.display()), e)),
        }
    }

    pub fn save(&self) -> Result<()> {
        let p = path();
        if let Some(dir) = p.parent() {
            std::fs::create_dir_all(dir).map_err(|e| Error::io(format!("creating '{}'", dir.display()), e))?;
        }
        let data = serde_json::to_vec_pretty(self).map_err(|e| Error::invalid(e.to_string()))?;
        // Readable by all (it names pools and devices, nothing secret, as
        // zpool.cache), writable by root only whatever the umask: whoever
        // can write it chooses the devices the daemon imports.
        write_atomic(&p, &p.with_extension("tmp"), &data, 0o644)
    }

    pub fn find(&self, name: &str) -> Result<&CachedPool> {
        self.pools
            .iter()
            .find(|p| p.name == name)
            .ok_or_else(|| Error::not_found(format!("no such pool '{}' (imported pools: {})", name, self.names())))
    }

    fn names(&self) -> String {
        if self.pools.is_empty() {
            "none".into()
        } else {
            self.pools.iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(", ")
        }
    }

    pub fn add(&mut self, p: CachedPool) -> Result<()> {
        if let Some(existing) = self.pools.iter().find(|x| x.name == p.name && x.guid != p.guid) {
            return Err(Error::new(
                tarn_engine::ErrorKind::Exists,
                format!("a pool named '{}' (guid {}) is already imported", existing.name, existing.guid),
            ));
        }
        self.pools.retain(|x| x.guid != p.guid);
        self.pools.push(p);
        Ok(())
    }

    pub fn remove(&mut self, name: &str) {
        self.pools.retain(|p| p.name != name);
    }
}

/// Replaces `path` with `data` through `tmp` (written, then renamed over
/// it), so a reader sees the old file or the new one; the new file has
/// exactly `mode`, whatever the umask.
pub fn write_atomic(path: &Path, tmp: &Path, data: &[u8], mode: u32) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let _ = std::fs::remove_file(tmp);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(tmp)
        .and_then(|mut f| {
            // The umask may have taken bits of `mode` away at creation.
            f.set_permissions(std::fs::Permissions::from_mode(mode))?;
            f.write_all(data)
        });
    written.map_err(|e| Error::io(format!("writing '{}'", tmp.display()), e))?;
    std::fs::rename(tmp, path).map_err(|e| Error::io(format!("replacing '{}'", path.display()), e))
}

pub fn abs(p: &Path) -> String {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf()).display().to_string()
}
