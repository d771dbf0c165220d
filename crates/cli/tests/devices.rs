//! Devices tarn must refuse to write over (issue 11): every command that takes
//! a device answers a bad one with one clear line naming it, exit status 1,
//! and nothing changed — the victim's bytes are compared before and after.
//!
//! Pins, each failing before its fix:
//! - a pool's own device, another live pool's data or cache device, or an
//!   exported pool's device accepted as a cache device (`pool add`), whose
//!   L2ARC header then overwrote label 0 (item 1);
//! - `pool create` on a file system image or a mounted block device without
//!   `-f` (item 2; the mounted case needs root and loop devices);
//! - device images created world-readable (item 7);
//! - `mirror` taken as a file name, building a stripe (item 14);
//! - the same device twice ("cannot take exclusive lock: already open in this
//!   process"), and `pool add` of several devices half-applying.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

mod common;

use common::Env;

/// A private daemon whose commands run in its directory (relative paths).
fn env(name: &str) -> Env {
    let mut e = Env::plain(&format!("devices-{}", name));
    e.cwd = Some(e.dir.clone());
    e
}

/// A 128 MiB pool on `NAME.img`, not mounted.
fn pool(e: &Env, name: &str) -> String {
    let img = e.path(&format!("{}.img", name));
    e.ok(&["pool", "create", "-m", "none", name, &img, "--size", "128M"]);
    img
}

fn cache_file(e: &Env) -> String {
    std::fs::read_to_string(e.dir.join("tarn.cache")).unwrap_or_default()
}

/// FNV-1a of a whole file: "nothing changed" means the same digest.
fn digest(path: &str) -> u64 {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {}", path, e));
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| (h ^ u64::from(x)).wrapping_mul(0x100_0000_01b3))
}

fn have(tool: &str) -> bool {
    Command::new("sh").args(["-c", &format!("command -v {} >/dev/null", tool)]).status().map(|s| s.success()).unwrap_or(false)
}

fn sh(cmd: &str) -> Output {
    Command::new("sh").args(["-c", cmd]).output().expect("sh runs")
}

fn sparse(path: &str, bytes: u64) {
    std::fs::File::create(path).unwrap().set_len(bytes).unwrap();
}

/// Issue 11 item 1: `pool add l2t cache l2t.img` (the pool's own image)
/// succeeded and the L2ARC overwrote its labels; so did an exported pool's
/// image (its label 0 overwritten) and other live pools' devices.
#[test]
fn cache_add_refuses_devices_of_pools() {
    let e = env("cache-pools");
    let own = pool(&e, "l2t");
    let err = e.fails(&["pool", "add", "l2t", "cache", &own]);
    assert!(err.contains(&own) && err.contains("part of active pool 'l2t'"), "{}", err);
    let err = e.fails(&["pool", "add", "-f", "l2t", "cache", &own]);
    assert!(err.contains("part of active pool 'l2t'"), "-f never takes an imported pool's device: {}", err);

    // Another live pool's data and cache devices: never, not even with -f.
    let other = pool(&e, "other");
    let other_cache = e.path("other-cache.img");
    sparse(&other_cache, 32 << 20);
    e.ok(&["pool", "add", "other", "cache", &other_cache]);
    for dev in [&other, &other_cache] {
        for f in [&[][..], &["-f"][..]] {
            let mut args = vec!["pool", "add"];
            args.extend_from_slice(f);
            args.extend_from_slice(&["l2t", "cache", dev]);
            let err = e.fails(&args);
            assert!(err.contains(dev.as_str()) && err.contains("active pool 'other'"), "{}", err);
        }
    }

    // An exported pool's device: refused without -f, its bytes untouched.
    let victim = pool(&e, "victim");
    e.ok(&["pool", "export", "victim"]);
    let before = digest(&victim);
    let err = e.fails(&["pool", "add", "l2t", "cache", &victim]);
    assert!(err.contains(&victim) && err.contains("exported pool 'victim'") && err.contains("-f"), "{}", err);
    assert_eq!(digest(&victim), before, "a refused add changed the victim");
    let found = e.ok(&["pool", "import", "-d", e.dir.to_str().unwrap()]);
    assert!(found.contains("pool: victim"), "the victim still imports: {}", found);
    let status = e.ok(&["pool", "status", "l2t"]);
    assert!(!status.contains("cache:"), "nothing was added: {}", status);
    // With -f it is the operator's choice.
    e.ok(&["pool", "add", "-f", "l2t", "cache", &victim]);
    assert!(e.ok(&["pool", "status", "l2t"]).contains(&victim));
}

/// Issue 11 item 2, on image files: a file holding a file system (or swap, a
/// partition table, another pool's label) is refused without -f, naming it.
#[test]
fn create_refuses_signatures_without_force() {
    let e = env("sigs");
    pool(&e, "tank");
    let mut tried = 0;
    let cases: &[(&str, &str, &str)] = &[
        ("mkfs.ext4", "mkfs.ext4 -q -F {}", "an ext4 file system"),
        ("mkfs.ext2", "mkfs.ext2 -q -F {}", "an ext2 file system"),
        ("mkfs.ext3", "mkfs.ext3 -q -F {}", "an ext3 file system"),
        ("mkswap", "mkswap {} >/dev/null", "swap space"),
        ("mkfs.xfs", "mkfs.xfs -q -f {}", "an xfs file system"),
        ("mkfs.btrfs", "mkfs.btrfs -q -f {}", "a btrfs file system"),
        ("mkfs.vfat", "mkfs.vfat {} >/dev/null", "a vfat file system"),
        ("sfdisk", "printf 'label: gpt\\n' | sfdisk -q {} >/dev/null", "a GPT partition table"),
        ("sfdisk", "printf 'label: dos\\n,10M\\n' | sfdisk -q {} >/dev/null", "an MBR partition table"),
    ];
    for (i, (tool, make, what)) in cases.iter().enumerate() {
        if !have(tool) {
            eprintln!("{}: skipping the {} case: {} is not installed", module_path!(), what, tool);
            continue;
        }
        let img = e.path(&format!("fs{}.img", i));
        sparse(&img, 300 << 20);
        let o = sh(&make.replace("{}", &img));
        assert!(o.status.success(), "{}: {}", make, String::from_utf8_lossy(&o.stderr));
        let before = digest(&img);
        let err = e.fails(&["pool", "create", "-m", "none", "p", &img]);
        assert!(err.contains(&img) && err.contains(&format!("contains {}", what)) && err.contains("-f"), "{}: {}", what, err);
        assert_eq!(digest(&img), before, "a refused create changed the image holding {}", what);
        // And as a cache device of a pool.
        let err = e.fails(&["pool", "add", "tank", "cache", &img]);
        assert!(err.contains(&img) && err.contains(&format!("contains {}", what)) && err.contains("-f"), "add {}: {}", what, err);
        assert_eq!(digest(&img), before, "a refused add changed the image holding {}", what);
        tried += 1;
    }
    assert!(tried > 0, "no mkfs tool at all");
    assert!(!e.ok(&["pool", "status", "tank"]).contains("cache:"), "a refused add added a cache device");
    // -f overrides a signature.
    let img = e.path("fs0.img");
    if Path::new(&img).exists() {
        e.ok(&["pool", "create", "-f", "-m", "none", "p", &img]);
        e.ok(&["pool", "destroy", "p"]);
        // A destroyed pool's device is free again, without -f.
        e.ok(&["pool", "create", "-m", "none", "p", &img]);
    }
}

/// Issue 11 item 2: a tarn pool's exported device is refused by create
/// without -f; a live pool's device is refused even with -f.
#[test]
fn create_refuses_devices_of_pools() {
    let e = env("create-pools");
    let live = pool(&e, "live");
    for f in [&[][..], &["-f"][..]] {
        let mut args = vec!["pool", "create"];
        args.extend_from_slice(f);
        args.extend_from_slice(&["-m", "none", "p", &live]);
        let err = e.fails(&args);
        assert!(err.contains(&live) && err.contains("part of active pool 'live'"), "{}", err);
    }
    let cache = e.path("live-cache.img");
    sparse(&cache, 80 << 20);
    e.ok(&["pool", "add", "live", "cache", &cache]);
    let err = e.fails(&["pool", "create", "-f", "-m", "none", "p", &cache]);
    assert!(err.contains(&cache) && err.contains("cache device of active pool 'live'"), "{}", err);
    let old = pool(&e, "old");
    e.ok(&["pool", "export", "old"]);
    let before = digest(&old);
    let err = e.fails(&["pool", "create", "-m", "none", "p", &old]);
    assert!(err.contains(&old) && err.contains("exported pool 'old'") && err.contains("-f"), "{}", err);
    assert_eq!(digest(&old), before);
    // A pool never exported whose daemon is gone and which nothing here
    // holds (another host's, or a crashed one's): its labels say ACTIVE.
    let crashed = pool(&e, "crashed");
    let pid = e.pid().expect("the daemon's pid");
    // SAFETY: signalling the daemon our own test started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    // SAFETY: signal 0 only asks whether the process exists.
    common::wait_for("the daemon to die", || unsafe { libc::kill(pid, 0) } != 0);
    std::fs::remove_file(e.dir.join("tarn.cache")).unwrap();
    let before = digest(&crashed);
    let err = e.fails(&["pool", "create", "-m", "none", "p", &crashed]);
    assert!(err.contains(&crashed) && err.contains("may be part of active pool 'crashed'") && err.contains("-f"), "{}", err);
    assert_eq!(digest(&crashed), before);
    e.ok(&["pool", "create", "-f", "-m", "none", "p", &crashed]);
}

/// The bad devices every device-taking command must refuse, one clear line
/// each: `/`, a directory, a missing path, a character device, a too-small
/// file, and the same device twice (by path, symlink, relative path, hard
/// link). Issue 11: "the same device twice says cannot take exclusive lock:
/// already open in this process"; `pool add` of a good and a bad device
/// half-applied.
#[test]
fn bad_devices_get_one_clear_error() {
    let e = env("bad");
    pool(&e, "tank");
    let dir = e.path("adir");
    std::fs::create_dir(&dir).unwrap();
    let small = e.path("small.img");
    sparse(&small, 1 << 20);
    let tiny = e.path("tiny.img");
    sparse(&tiny, 4096);
    let missing = e.path("missing.img");
    let bad: &[(&str, &str)] = &[("/", "is a directory"), (&dir, "is a directory"), (&missing, "No such file"), ("/dev/null", "character device")];
    let cache_before = cache_file(&e);
    for (dev, why) in bad {
        let err = e.fails(&["pool", "create", "-m", "none", "p", dev]);
        assert!(err.contains(dev) && err.contains(why), "create {}: {}", dev, err);
        let err = e.fails(&["pool", "create", "-f", "-m", "none", "p", dev]);
        assert!(err.contains(dev) && err.contains(why), "create -f {}: {}", dev, err);
        let err = e.fails(&["pool", "add", "tank", "cache", dev]);
        assert!(err.contains(dev) && err.contains(why), "add {}: {}", dev, err);
        let err = e.fails(&["pool", "remove", "tank", dev]);
        assert!(err.contains(dev) && err.contains("not a cache device of pool 'tank'"), "remove {}: {}", dev, err);
    }
    let err = e.fails(&["pool", "create", "-m", "none", "p", &small]);
    assert!(err.contains(&small) && err.contains("too small"), "{}", err);
    let err = e.fails(&["pool", "add", "tank", "cache", &tiny]);
    assert!(err.contains(&tiny) && err.contains("too small"), "{}", err);
    let err = e.fails(&["pool", "import", "-d", &missing, "tank2"]);
    assert!(err.contains(&missing), "{}", err);
    let err = e.fails(&["pool", "import", "-d", "/dev/null", "tank2"]);
    assert!(err.contains("no pool 'tank2' found in /dev/null"), "{}", err);
    // --size makes new files: an existing one is refused, untouched.
    let before = digest(&small);
    let err = e.fails(&["pool", "create", "-m", "none", "p", &small, "--size", "128M"]);
    assert!(err.contains(&small) && err.contains("already exists"), "{}", err);
    assert_eq!(digest(&small), before);
    assert_eq!(std::fs::metadata(&small).unwrap().len(), 1 << 20);
    assert_eq!(cache_file(&e), cache_before, "a refused command changed the cache file");

    // The same device twice, however it is named.
    let a = e.path("a.img");
    sparse(&a, 80 << 20);
    std::os::unix::fs::symlink(&a, e.path("link.img")).unwrap();
    std::fs::hard_link(&a, e.path("hard.img")).unwrap();
    for twin in [a.as_str(), "a.img", "./a.img", "adir/../a.img", &e.path("link.img"), &e.path("hard.img")] {
        let err = e.fails(&["pool", "create", "-m", "none", "p", &a, twin]);
        assert!(err.contains("twice") && err.contains(&a), "create {} {}: {}", a, twin, err);
        assert!(!err.contains("exclusive lock"), "{}", err);
        let err = e.fails(&["pool", "add", "tank", "cache", &a, twin]);
        assert!(err.contains("twice") && err.contains(&a), "add {} {}: {}", a, twin, err);
    }
    // One good device and one bad: nothing is added.
    let c = e.path("c.img");
    sparse(&c, 80 << 20);
    let before = digest(&c);
    let err = e.fails(&["pool", "add", "tank", "cache", &c, &missing]);
    assert!(err.contains(&missing), "{}", err);
    assert!(!e.ok(&["pool", "status", "tank"]).contains("cache:"), "half-applied add");
    assert_eq!(digest(&c), before, "the good device was written");
    // Removing: each must be a cache device of the pool, each once.
    e.ok(&["pool", "add", "tank", "cache", &c]);
    let err = e.fails(&["pool", "remove", "tank", &c, &c]);
    assert!(err.contains("twice") && err.contains(&c), "{}", err);
    let err = e.fails(&["pool", "remove", "tank", &c, &e.path("tank.img")]);
    assert!(err.contains("tank.img") && err.contains("not a cache device"), "{}", err);
    assert!(e.ok(&["pool", "status", "tank"]).contains(&c), "half-applied remove");
    // Relative paths are the caller's, not the daemon's.
    e.ok(&["pool", "remove", "tank", "c.img"]);
    assert!(!e.ok(&["pool", "status", "tank"]).contains("cache:"));
    // Import finds one device under two names once (it opened both and
    // failed on its own lock).
    e.ok(&["pool", "export", "tank"]);
    std::os::unix::fs::symlink(e.path("tank.img"), e.path("tank-link.img")).unwrap();
    let found = e.ok(&["pool", "import", "-d", e.dir.to_str().unwrap(), "-d", &e.path("tank.img")]);
    assert_eq!(found.matches("tank.img").count() + found.matches("tank-link.img").count(), 1, "{}", found);
    e.ok(&["pool", "import", "-d", e.dir.to_str().unwrap(), "tank"]);
    // bench adds its --cache-device through the same checks.
    e.ok(&["daemon", "stop"]);
    let err = e.fails(&["bench", "tank", "--size", "8M", "--cache-device", &e.path("tank-link.img")]);
    assert!(err.contains("part of active pool 'tank'"), "{}", err);
}

/// A path with a trailing `/` names a directory. Pins: the client made
/// device paths absolute through `Path::components`, which drops the
/// trailing `/`, so `pool create p a.img/` took the file a.img, `--size`
/// created a file `new.img` for `new.img/`, and `pool import -d a.img/`
/// searched a.img — where the kernel, and `bench --cache-device a.img/`
/// in-process, say "Not a directory".
#[test]
fn a_trailing_slash_is_a_directory() {
    let e = env("slash");
    let tank = pool(&e, "tank");
    let a = e.path("a.img");
    sparse(&a, 80 << 20);
    let before = (digest(&a), cache_file(&e));
    for args in [
        vec!["pool", "create", "-m", "none", "p", "a.img/"],
        vec!["pool", "create", "-f", "-m", "none", "p", "a.img/"],
        vec!["pool", "create", "-m", "none", "p", &format!("{}/", a)],
        vec!["pool", "add", "tank", "cache", "a.img/"],
        vec!["pool", "add", "-f", "tank", "cache", &format!("{}/", a)],
    ] {
        let err = e.fails(&args);
        assert!(err.contains(&format!("{}/'", a)) && err.contains("Not a directory"), "{:?}: {}", args, err);
    }
    let err = e.fails(&["pool", "create", "-m", "none", "p", "new.img/", "--size", "128M"]);
    assert!(err.contains(&e.path("new.img/")), "{}", err);
    assert!(!Path::new(&e.path("new.img")).exists(), "a refused create made the file new.img");
    assert_eq!((digest(&a), cache_file(&e)), before, "a refused command changed a.img or the cache file");
    assert!(!e.ok(&["pool", "status", "tank"]).contains("cache:"));
    let err = e.fails(&["pool", "remove", "tank", "a.img/"]);
    assert!(err.contains("a.img/") && err.contains("not a cache device"), "{}", err);
    // Import: a device file given with a trailing `/` is not searched.
    e.ok(&["pool", "export", "tank"]);
    let err = e.fails(&["pool", "import", "-d", "tank.img/", "tank"]);
    assert!(err.contains(&format!("{}/'", tank)) && err.contains("Not a directory"), "{}", err);
    assert!(e.ok(&["pool", "list", "-H"]).trim().is_empty(), "nothing imported");
    // A directory is a directory with or without it.
    let dir = format!("{}/", e.dir.display());
    e.ok(&["pool", "import", "-d", &dir, "tank"]);
    // bench (in this process) answers the same.
    e.ok(&["daemon", "stop"]);
    let err = e.fails(&["bench", "tank", "--size", "8M", "--cache-device", "a.img/"]);
    assert!(err.contains("a.img/") && err.contains("Not a directory"), "{}", err);
    assert_eq!(digest(&a), before.0);
}

/// `bench --cache-device` vets its device as `pool add` does: the bad
/// devices, one clear line each, nothing added or written. Pins: a device
/// holding a file system was refused with "use -f to overwrite it", and
/// bench had no -f (clap: "unexpected argument '-f'"); now `-f` takes it
/// as `pool add -f` does, and never a device it must not take.
#[test]
fn bench_cache_device_is_vetted_like_pool_add() {
    let e = env("bench-cache");
    pool(&e, "tank");
    let old = pool(&e, "old");
    e.ok(&["pool", "export", "old"]);
    let dir = e.path("adir");
    std::fs::create_dir(&dir).unwrap();
    let tiny = e.path("tiny.img");
    sparse(&tiny, 4096);
    let missing = e.path("missing.img");
    e.ok(&["daemon", "stop"]);
    let bench = |extra: &[&str], dev: &str| {
        let mut args = vec!["bench", "tank", "--size", "8M"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--cache-device", dev]);
        args.iter().map(|s| s.to_string()).collect::<Vec<String>>()
    };
    let fails = |args: Vec<String>| e.fails(&args.iter().map(|s| s.as_str()).collect::<Vec<_>>());
    let cases: &[(&str, &str)] = &[
        ("/", "is a directory"),
        (&dir, "is a directory"),
        ("/dev/null", "character device"),
        (&missing, "No such file"),
        (&tiny, "too small"),
        (&e.path("tank.img"), "part of active pool 'tank'"),
    ];
    let before = digest(&tiny);
    for (dev, why) in cases {
        for f in [&[][..], &["-f"][..]] {
            let err = fails(bench(f, dev));
            assert!(err.contains(dev) && err.contains(why), "bench {:?} --cache-device {}: {}", f, dev, err);
        }
    }
    assert_eq!(digest(&tiny), before);
    assert!(!Path::new(&missing).exists());
    // An exported pool's device: refused without -f, untouched; its error's
    // advice is one bench takes.
    let before = digest(&old);
    let err = fails(bench(&[], &old));
    assert!(err.contains(&old) && err.contains("exported pool 'old'") && err.contains("use -f"), "{}", err);
    assert_eq!(digest(&old), before);
    // A file system image: the same.
    if have("mkfs.ext4") {
        let img = e.path("ext4.img");
        sparse(&img, 64 << 20);
        let o = sh(&format!("mkfs.ext4 -q -F {}", img));
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let before = digest(&img);
        let err = fails(bench(&[], &img));
        assert!(err.contains(&img) && err.contains("contains an ext4 file system") && err.contains("use -f"), "{}", err);
        assert_eq!(digest(&img), before);
    } else {
        eprintln!("{}: skipping the ext4 case: mkfs.ext4 is not installed", module_path!());
    }
    assert!(!e.ok(&["pool", "status", "tank"]).contains("cache:"), "a refused bench added a cache device");
    // What the error advises works.
    e.ok(&["daemon", "stop"]);
    let args = bench(&["-f"], &old);
    e.ok(&args.iter().map(|s| s.as_str()).collect::<Vec<_>>());
    assert!(e.ok(&["pool", "status", "tank"]).contains(&old), "bench -f added the exported pool's device");
}

/// Issue 11 item 14: `pool create p mirror a b` took `mirror` as a file
/// name and built a three-device stripe when such a file existed.
#[test]
fn vdev_keywords_are_keywords() {
    let e = env("keywords");
    for f in ["mirror", "a.img", "b.img", "raidz", "spare"] {
        sparse(&e.path(f), 80 << 20);
    }
    let before = digest(&e.path("mirror"));
    let cases: &[(&[&str], &str)] = &[
        (&["draid", "a.img", "b.img"], "draid"),
        (&["draid2:3d:1s", "a.img", "b.img"], "draid"),
        (&["a.img", "special", "b.img"], "special"),
        (&["a.img", "dedup", "b.img"], "dedup"),
    ];
    for (devs, kw) in cases {
        let mut args = vec!["pool", "create", "-m", "none", "p"];
        args.extend_from_slice(devs);
        let err = e.fails(&args);
        assert!(err.contains(&format!("no {} vdevs", kw)) && err.contains("./"), "{:?}: {}", devs, err);
        let mut add = vec!["pool", "add", "p"];
        add.extend_from_slice(devs);
        e.fails(&add);
    }
    assert_eq!(digest(&e.path("mirror")), before);
    assert!(!cache_file(&e).contains("\"p\""), "no pool was made");
    // `cache` and `spare` are keywords that work, at create too.
    e.ok(&["pool", "create", "-m", "none", "p", "a.img", "cache", "b.img"]);
    let status = e.ok(&["pool", "status", "p"]);
    assert!(status.contains("cache:") && status.contains(&e.path("b.img")), "{}", status);
    let err = e.fails(&["pool", "add", "p", "spare", "raidz"]);
    assert!(err.contains("'spare' is given no devices"), "`raidz` after `spare` is a keyword: {}", err);
    e.ok(&["pool", "add", "p", "spare", "./raidz"]);
    let status = e.ok(&["pool", "status", "p"]);
    assert!(status.contains("spares") && status.contains(&e.path("raidz")), "{}", status);
    e.ok(&["pool", "remove", "p", "./raidz"]);
    let err = e.fails(&["pool", "add", "p", "mirror", "raidz"]);
    assert!(err.contains("a mirror needs at least 2 devices, 0 given"), "{}", err);
    let err = e.fails(&["pool", "add", "p", "a.img"]);
    assert!(err.contains("part of active pool 'p'"), "{}", err);
    // A file named like a keyword is reachable as a path.
    e.ok(&["pool", "create", "-m", "none", "q", "./mirror", "./spare"]);
    assert!(e.ok(&["pool", "status", "q"]).contains(&e.path("mirror")));
    e.ok(&["pool", "destroy", "q"]);
    e.ok(&["pool", "destroy", "p"]);
    // `mirror` is the keyword: a mirror of the devices after it, the file
    // named "mirror" untouched.
    let before = digest(&e.path("mirror"));
    e.ok(&["pool", "create", "-f", "-m", "none", "m", "mirror", "a.img", "b.img"]);
    let status = e.ok(&["pool", "status", "m"]);
    assert!(status.contains("mirror-0") && status.contains(&e.path("a.img")) && status.contains(&e.path("b.img")), "{}", status);
    assert_eq!(digest(&e.path("mirror")), before);
}

/// Issue 11 item 7: images were created 0644 (world-readable under the usual
/// umask, 0666 under umask 0): anyone could read every file's bytes. The
/// daemon inherits the starting command's umask, so set a permissive one.
#[test]
fn images_and_state_files_are_private() {
    let e = env("modes");
    let img = e.path("p.img");
    let mut c = e.cmd();
    // SAFETY: umask is async-signal-safe and only changes the child's mask.
    unsafe {
        c.pre_exec(|| {
            libc::umask(0);
            Ok(())
        });
    }
    let o = c.args(["pool", "create", "-m", "none", "p", &img, "--size", "128M"]).stdout(Stdio::null()).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mode = |p: &str| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&img), 0o600, "device image");
    assert_eq!(mode(&e.path("tarn.cache")), 0o644, "cache file: readable, writable by root only");
    assert_eq!(mode(&e.path("tarn.log")), 0o600, "daemon log");
    e.ok(&["tunable", "set", "zfs_txg_timeout=4"]);
    let conf = std::fs::read_dir(&e.dir).unwrap().flatten().map(|d| d.path()).find(|p| p.to_string_lossy().contains("tunables"));
    if let Some(conf) = conf {
        assert_eq!(mode(conf.to_str().unwrap()), 0o644, "{}", conf.display());
    }
}

/// Root, loop devices and the tools the mounted-device test needs.
fn can_use_loop_devices(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipping {}: needs root", test);
        return false;
    }
    for tool in ["losetup", "mkfs.ext4", "e2fsck", "unshare", "nsenter", "mount"] {
        if !have(tool) {
            eprintln!("skipping {}: {} is not installed", test, tool);
            return false;
        }
    }
    if !Path::new("/dev/loop-control").exists() {
        eprintln!("skipping {}: no /dev/loop-control", test);
        return false;
    }
    true
}

/// A loop device over a file, detached (and the file's directory removed)
/// when dropped.
struct Loop(String, PathBuf);

impl Loop {
    fn attach(file: &str, dir: &Path) -> Option<Loop> {
        let o = sh(&format!("losetup -f --show {}", file));
        if !o.status.success() {
            eprintln!("losetup failed: {}", String::from_utf8_lossy(&o.stderr));
            let _ = std::fs::remove_dir_all(dir);
            return None;
        }
        Some(Loop(String::from_utf8_lossy(&o.stdout).trim().to_string(), dir.to_path_buf()))
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = sh(&format!("losetup -d {}", self.0));
        let _ = std::fs::remove_dir_all(&self.1);
    }
}

/// The front and back 512 KiB of a file or device: where tarn writes labels.
fn ends(path: &str) -> Vec<u8> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path).unwrap();
    let len = f.seek(SeekFrom::End(0)).unwrap();
    let mut out = vec![0u8; 1 << 20];
    f.seek(SeekFrom::Start(0)).unwrap();
    f.read_exact(&mut out[..512 << 10]).unwrap();
    f.seek(SeekFrom::Start(len - (512 << 10))).unwrap();
    f.read_exact(&mut out[512 << 10..]).unwrap();
    out
}

/// Issue 11 item 2: `pool create` on a loop device holding a mounted ext4
/// succeeded without -f and destroyed the ext4. A mounted device, and the
/// image file behind it, are refused even with -f; the ext4 is intact.
#[test]
fn mounted_block_device_is_refused() {
    if !can_use_loop_devices("mounted_block_device_is_refused") {
        return;
    }
    let img_dir = std::env::temp_dir().join(format!("tarn-devices-mounted-{}", std::process::id()));
    std::fs::create_dir_all(&img_dir).unwrap();
    let img = img_dir.join("ext4.img").display().to_string();
    sparse(&img, 128 << 20);
    let o = sh(&format!("mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 {}", img));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let Some(lo) = Loop::attach(&img, &img_dir) else {
        eprintln!("skipping mounted_block_device_is_refused: no free loop device");
        return;
    };
    // Declared after the loop device, so dropped before it: the daemon
    // stops, the namespace and the ext4 mounted in it go, then the loop
    // device is detached and the image removed.
    let Some(mut e) = Env::private("devices-mounted", false) else { return };
    e.cwd = Some(e.dir.clone());
    let mnt = e.path("mnt");
    std::fs::create_dir(&mnt).unwrap();
    // Written, then mounted read-only: a read-write ext4 may still write
    // its journal's checkpoint to the device long after `sync` (a failure
    // seen under load), and nothing but tarn may change it from here on.
    e.sh(&format!("mount -o noatime {lo} {mnt} && echo precious > {mnt}/file && umount {mnt} && mount -o ro,noload {lo} {mnt}", lo = lo.0, mnt = mnt));
    let before = ends(&lo.0);
    for args in [
        vec!["pool", "create", "-m", "none", "p", lo.0.as_str()],
        vec!["pool", "create", "-f", "-m", "none", "p", lo.0.as_str()],
    ] {
        let err = e.fails(&args);
        assert!(err.contains(&lo.0) && err.contains(&format!("mounted on {}", mnt)), "{:?}: {}", args, err);
    }
    for args in [vec!["pool", "create", "-m", "none", "p", img.as_str()], vec!["pool", "create", "-f", "-m", "none", "p", img.as_str()]] {
        let err = e.fails(&args);
        assert!(err.contains(&img) && err.contains(&lo.0) && err.contains(&format!("mounted on {}", mnt)), "{:?}: {}", args, err);
    }
    pool(&e, "tank");
    for dev in [lo.0.as_str(), img.as_str()] {
        let err = e.fails(&["pool", "add", "-f", "tank", "cache", dev]);
        assert!(err.contains(dev) && err.contains("mounted on"), "{}", err);
    }
    assert_eq!(ends(&lo.0), before, "the mounted device was written");
    assert_eq!(e.sh(&format!("cat {}/file && umount {}", mnt, mnt)).trim(), "precious");
    let o = sh(&format!("e2fsck -fn {}", lo.0));
    assert!(o.status.success(), "the ext4 is damaged: {}", String::from_utf8_lossy(&o.stdout));
    // Unmounted, it is a signature: -f is the operator's choice.
    let err = e.fails(&["pool", "create", "-m", "none", "p", &lo.0]);
    assert!(err.contains("contains an ext4 file system"), "{}", err);
    // The image behind an attached loop device is still in use.
    let err = e.fails(&["pool", "create", "-f", "-m", "none", "p", &img]);
    assert!(err.contains(&lo.0), "{}", err);
    e.ok(&["pool", "create", "-f", "-m", "none", "p", &lo.0]);
    e.ok(&["pool", "export", "p"]);
    // Importing the pool through its image while the loop device over it
    // exists would let two pools write one disk (two names, two locks).
    let err = e.fails(&["pool", "import", "-d", &img, "p"]);
    assert!(err.contains(&img) && err.contains("backing file of") && err.contains(&lo.0), "{}", err);
    e.ok(&["pool", "import", "-d", &lo.0, "p"]);
    // While imported, the kernel keeps mkfs off the device.
    let o = sh(&format!("mkfs.ext4 -q {}", lo.0));
    assert!(!o.status.success(), "mkfs.ext4 wrote over a pool's device");
    e.ok(&["pool", "destroy", "p"]);
}

/// Issue 12: `pool create` of RAID-Z groups, and its bad input (too few
/// devices for the level, a keyword with no devices, mismatched levels
/// and sizes), each one error line with nothing made and no device
/// written.
#[test]
fn raidz_pools_at_the_cli() {
    let e = env("raidz");
    let names: Vec<String> = (0..12).map(|i| format!("d{}.img", i)).collect();
    for n in &names {
        sparse(&e.path(n), 80 << 20);
    }
    sparse(&e.path("small.img"), 72 << 20);
    let digests = |e: &Env| names.iter().map(|n| digest(&e.path(n))).collect::<Vec<_>>();
    let before = digests(&e);
    let d = |r: std::ops::Range<usize>| names[r].iter().map(|s| s.as_str()).collect::<Vec<_>>();
    let create = |extra: &[&str]| {
        let mut args = vec!["pool", "create", "-m", "none", "tank"];
        args.extend_from_slice(extra);
        args.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };
    let refusals: Vec<(Vec<String>, &str)> = vec![
        (create(&[&["raidz2"][..], &d(0..2)].concat()), "raidz2 needs at least 3 devices, 2 given"),
        (create(&[&["raidz3"][..], &d(0..3)].concat()), "raidz3 needs at least 4 devices, 3 given"),
        (create(&[&["raidz2", "raidz2"][..], &d(0..4)].concat()), "raidz2 needs at least 3 devices, 0 given"),
        (create(&[&["raidz1"][..], &d(0..3), &["raidz2"][..], &d(3..7)].concat()), "mismatched replication level: raidz1 and raidz2"),
        (create(&[&["raidz2"][..], &d(0..4), &["mirror"][..], &d(4..6)].concat()), "mismatched replication level"),
        (create(&[&["small.img", "raidz1"][..], &d(0..3)].concat()), "mismatched replication level: a plain device and raidz1"),
        (create(&[&["raidz1"][..], &d(0..2), &["small.img"][..]].concat()), "mismatched device sizes in raidz1"),
        (create(&[&["raidz4"][..], &d(0..6)].concat()), "raidz4"),
    ];
    for (args, want) in &refusals {
        let args: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
        let err = e.fails(&args);
        assert!(err.contains(want), "{:?}: {}", args, err);
    }
    assert_eq!(digests(&e), before, "a refused create writes nothing");
    assert!(!cache_file(&e).contains("\"tank\""), "no pool was made");
    // The seed's layout, scaled down: two RAID-Z2 groups of six.
    let args = create(&[&["raidz2"][..], &d(0..6), &["raidz2"][..], &d(6..12)].concat());
    e.ok(&args.iter().map(|s| s.as_str()).collect::<Vec<_>>());
    let status = e.ok(&["pool", "status", "tank"]);
    assert!(status.contains("state: ONLINE"), "{}", status);
    let at = |s: &str| status.find(s).unwrap_or_else(|| panic!("status lacks {}: {}", s, status));
    assert!(at("raidz2-0") < at(&e.path("d0.img")) && at(&e.path("d5.img")) < at("raidz2-1") && at("raidz2-1") < at(&e.path("d6.img")), "{}", status);
    let json = e.ok(&["pool", "status", "--json", "tank"]);
    let v: serde_json::Value = serde_json::from_str(&json).expect("status json");
    let tops = v[0]["vdevs"].as_array().expect("vdevs");
    assert_eq!(tops.len(), 2);
    for t in tops {
        assert_eq!(t["kind"], "raidz2");
        assert_eq!(t["children"].as_array().map(|c| c.len()), Some(6));
    }
}
