//! Issue 11, "memory and scale behaving as documented", through the real
//! daemon and FUSE mounts: the daemon's pools share one ARC, so two pools
//! read past `zfs_arc_max` together stay within it (each pool had an ARC
//! of its own, and arcstat summed two maxima and two sizes).
//!
//! Skips with a message when /dev/fuse cannot be opened.

mod common;

use common::Env;

/// arcstat's size, c and cmax, in bytes (arcstat prints three significant
/// digits: 31.9M).
fn arcstat(e: &Env) -> (f64, f64, f64) {
    let out = e.ok(&["arcstat", "--json", "-f", "size,c,cmax"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|err| panic!("arcstat --json: {}: {}", err, out));
    let bytes = |f: &str| {
        let s = match &v[f] {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let (num, unit) = s.split_at(s.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(s.len()));
        let scale = match unit {
            "" => 1.0,
            "K" => 1024.0,
            "M" => 1048576.0,
            "G" => 1073741824.0,
            _ => panic!("arcstat {}: unit of '{}'", f, s),
        };
        num.parse::<f64>().unwrap_or_else(|_| panic!("arcstat {}: '{}'", f, s)) * scale
    };
    (bytes("size"), bytes("c"), bytes("cmax"))
}

/// `len` random (incompressible) bytes.
fn random(len: usize) -> Vec<u8> {
    use std::io::Read;
    let mut v = vec![0u8; len];
    std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut v)).unwrap();
    v
}

#[test]
fn two_pools_stay_within_one_arc_max() {
    let Some(e) = Env::real("arc-two-pools") else { return };
    const MAX: f64 = 32.0 * 1048576.0;
    const FILE: usize = 40 << 20;
    e.ok(&["tunable", "set", "zfs_arc_min=8M"]);
    e.ok(&["tunable", "set", "zfs_arc_max=32M"]);
    let mounts = [e.create("pa"), e.create("pb")];
    let data = [random(FILE), random(FILE)];
    for (m, d) in mounts.iter().zip(&data) {
        std::fs::write(format!("{}/f", m), d).unwrap();
    }
    // A new daemon (the next command starts it): new mounts, so the reads
    // below reach the pools rather than the kernel's page cache.
    e.ok(&["daemon", "stop"]);
    let (_, _, cmax) = arcstat(&e);
    assert_eq!(cmax, MAX, "one zfs_arc_max for the daemon's two pools");
    for round in 0..2 {
        for (i, (m, d)) in mounts.iter().zip(&data).enumerate() {
            let got = std::fs::read(format!("{}/f", m)).unwrap();
            assert!(got == *d, "{}/f read back wrong", m);
            let (size, c, cmax) = arcstat(&e);
            assert_eq!(cmax, MAX);
            assert!(c <= cmax && size <= cmax, "round {}, after pool {}: size {} and c {} within zfs_arc_max {}", round, i, size, c, cmax);
        }
    }
    let (size, _, _) = arcstat(&e);
    assert!(size >= MAX / 2.0, "80 MiB read through the ARC fills it ({} bytes)", size);
}
