//! The zfs-style dataset commands end to end, through the daemon: every
//! command's happy path and its errors (one `tarn: cannot …` line, exit 1;
//! usage errors exit 2), property inheritance and the SOURCE column,
//! listing formats, snapshots/clones/rollback/rename/destroy, mounts that
//! follow the datasets, and persistence across a daemon restart.
//!
//! The daemons run with the `TARN_TEST_MEMFS=1` hook (debug builds): the
//! dataset layer is the real one, the files seen through mounts live in a
//! MemFs per dataset (`spliced_mounts.rs` has the same through the POSIX
//! layer). Each test skips with a message if /dev/fuse is unavailable.

mod common;

use std::path::Path;

use common::{is_mounted, Env};

fn lines(s: &str) -> Vec<&str> {
    s.lines().collect()
}

#[test]
fn create_list_and_the_errors_an_administrator_expects() {
    let Some(e) = Env::new("ds-create") else { return };
    let mnt = e.create("tank");
    assert_eq!(e.ok(&["create", "tank/a"]), "");
    assert!(e.fails(&["create", "tank/a"]).contains("cannot create 'tank/a': dataset already exists"));
    assert_eq!(e.fails(&["create", "tank/x/y"]).trim(), "tarn: cannot create 'tank/x/y': parent does not exist");
    e.ok(&["create", "-p", "-o", "compression=zstd", "-o", "atime=off", "tank/x/y"]);
    e.ok(&["create", "tank/b1", "tank/b2"]);
    // Invalid names, properties and values; nonexistent pools.
    assert!(e.fails(&["create", "tank/bad name"]).contains("cannot create 'tank/bad name': invalid character ' ' in name"));
    assert!(e.fails(&["create", "tank//a"]).contains("cannot create 'tank//a': empty component"));
    assert!(e.fails(&["create", "tank/a@s"]).contains("cannot create 'tank/a@s'"));
    assert!(e.fails(&["create", "nopool/a"]).contains("no such pool 'nopool'"));
    assert!(e.fails(&["create", "-o", "bogus=1", "tank/c"]).contains("unknown property 'bogus'"));
    assert!(e.fails(&["create", "-o", "atime=maybe", "tank/c"]).contains("bad value 'maybe' for property 'atime'"));
    assert!(e.fails(&["create", "-o", "used=1", "tank/c"]).contains("read-only"));
    assert!(e.fails(&["create", "-o", "novalue", "tank/c"]).contains("PROP=VALUE"));
    assert_eq!(e.run(&["create"]).status.code(), Some(2), "usage errors are the parser's");
    assert_eq!(e.run(&["list", "-x"]).status.code(), Some(2));

    let out = e.ok(&["list"]);
    assert_eq!(lines(&out)[0].split_whitespace().collect::<Vec<_>>(), ["NAME", "USED", "AVAIL", "REFER", "MOUNTPOINT"]);
    let names: Vec<&str> = lines(&out)[1..].iter().map(|l| l.split_whitespace().next().unwrap()).collect();
    assert_eq!(names, ["tank", "tank/a", "tank/b1", "tank/b2", "tank/x", "tank/x/y"]);
    assert!(out.contains(&format!("{}/x/y", mnt)), "mountpoints inherit below the pool's: {}", out);
    assert_eq!(e.ok(&["list", "-H", "-o", "name", "-d", "1", "tank/x"]), "tank/x\ntank/x/y\n");
    assert_eq!(e.ok(&["list", "-H", "-o", "name", "-d", "0", "tank"]), "tank\n");
    assert_eq!(e.ok(&["list", "-H", "-o", "name,compression", "-r", "tank/x"]), "tank/x\tlz4\ntank/x/y\tzstd\n");
    let p = e.ok(&["list", "-H", "-p", "-o", "name,avail", "tank/a"]);
    let avail: u64 = p.trim().split('\t').nth(1).unwrap().parse().expect("-p prints exact numbers");
    assert!(avail > 100 << 20, "{}", p);
    assert!(e.ok(&["list", "-o", "name,avail", "tank/a"]).contains('M'), "sizes are human-readable without -p");
    let sorted = e.ok(&["list", "-H", "-o", "name", "-s", "name", "-r", "tank/x"]);
    assert_eq!(sorted, "tank/x\ntank/x/y\n");
    let json: serde_json::Value = serde_json::from_str(&e.ok(&["list", "--json", "tank/a"])).unwrap();
    assert_eq!(json[0]["name"], "tank/a");
    assert!(e.fails(&["list", "tank/nosuch"]).contains("cannot open 'tank/nosuch': dataset does not exist"));
    assert!(e.fails(&["list", "-o", "name,bogus", "tank"]).contains("invalid property 'bogus'"));
    assert!(e.fails(&["list", "-t", "volume", "tank"]).contains("invalid type 'volume'"));
}

#[test]
fn properties_inherit_and_get_shows_their_source() {
    let Some(e) = Env::new("ds-props") else { return };
    e.create("tank");
    e.ok(&["create", "-p", "tank/a/b"]);
    e.ok(&["set", "compression=zstd-7", "tank/a"]);
    e.ok(&["set", "quota=1G", "tank/a/b"]);
    let got = e.ok(&["get", "-H", "-o", "name,value,source", "compression", "tank", "tank/a", "tank/a/b"]);
    assert_eq!(got, "tank\tlz4\tdefault\ntank/a\tzstd-7\tlocal\ntank/a/b\tzstd-7\tinherited from tank/a\n");
    let got = e.ok(&["get", "-H", "-o", "property,value,source", "type,quota", "tank/a/b"]);
    assert_eq!(got, "type\tfilesystem\t-\nquota\t1G\tlocal\n");
    assert_eq!(e.ok(&["get", "-H", "-p", "-o", "value", "quota", "tank/a/b"]), "1073741824\n");
    let header = e.ok(&["get", "recordsize", "tank"]);
    assert_eq!(lines(&header)[0].split_whitespace().collect::<Vec<_>>(), ["NAME", "PROPERTY", "VALUE", "SOURCE"]);
    assert!(e.ok(&["get", "all", "tank/a"]).lines().count() > 20);
    let rec = e.ok(&["get", "-r", "-H", "-o", "name", "atime", "tank/a"]);
    assert_eq!(rec, "tank/a\ntank/a/b\n");
    // inherit, and inherit -r
    e.ok(&["set", "atime=off", "tank/a/b"]);
    e.ok(&["inherit", "compression", "tank/a"]);
    assert_eq!(e.ok(&["get", "-H", "-o", "value,source", "compression", "tank/a/b"]), "lz4\tdefault\n");
    e.ok(&["inherit", "-r", "atime", "tank/a"]);
    assert_eq!(e.ok(&["get", "-H", "-o", "source", "atime", "tank/a/b"]), "default\n");
    // errors
    assert!(e.fails(&["set", "atime=maybe", "tank/a"]).contains("cannot set property for 'tank/a': bad value 'maybe'"));
    assert!(e.fails(&["set", "used=1", "tank/a"]).contains("read-only"));
    assert!(e.fails(&["set", "bogus=1", "tank/a"]).contains("unknown property 'bogus'"));
    assert!(e.fails(&["set", "atime", "tank/a"]).contains("PROP=VALUE"));
    assert!(e.fails(&["set", "atime=on", "tank/nosuch"]).contains("dataset does not exist"));
    assert!(e.fails(&["inherit", "used", "tank/a"]).contains("read-only"));
    assert!(e.fails(&["get", "bogus", "tank/a"]).contains("bad property list: invalid property 'bogus'"));
    assert!(e.fails(&["get", "atime", "tank/nosuch"]).contains("cannot open 'tank/nosuch': dataset does not exist"));
    assert!(e.fails(&["get", "-o", "bogus", "atime", "tank"]).contains("invalid column 'bogus'"));
    e.ok(&["snapshot", "tank/a@s"]);
    assert!(e.fails(&["set", "atime=on", "tank/a@s"]).contains("cannot set property for 'tank/a@s'"));
}

/// Pins wrong answers about quotas: `inherit quota` and `inherit -r quota`
/// silently cleared it (zfs: "'quota' property cannot be inherited"),
/// a quota below the used space was accepted, and `quota=0` was shown as
/// 0 while meaning none.
#[test]
fn quotas_refuse_what_zfs_refuses() {
    let Some(e) = Env::new("ds-quota") else { return };
    e.create("tank");
    e.ok(&["create", "-p", "-o", "quota=1G", "tank/a/b"]);
    e.ok(&["set", "reservation=1M", "tank/a/b"]);
    let err = e.fails(&["inherit", "quota", "tank/a/b"]);
    assert!(err.contains("'quota' property cannot be inherited") && err.contains("quota=none"), "{err}");
    assert!(e.fails(&["inherit", "-r", "quota", "tank/a"]).contains("'quota' property cannot be inherited"));
    assert!(e.fails(&["inherit", "reservation", "tank/a/b"]).contains("'reservation' property cannot be inherited"));
    assert!(e.fails(&["inherit", "canmount", "tank/a/b"]).contains("'canmount' property cannot be inherited"));
    assert_eq!(e.ok(&["get", "-H", "-o", "value,source", "quota,reservation", "tank/a/b"]), "1G\tlocal\n1M\tlocal\n");
    let err = e.fails(&["set", "quota=512K", "tank/a/b"]);
    assert!(err.contains("size is less than current used or reserved space"), "{err}");
    assert!(e.fails(&["set", "quota=512K", "tank/a"]).contains("size is less than current used or reserved space"), "the child's reservation is used");
    e.ok(&["set", "quota=0", "tank/a/b"]);
    assert_eq!(e.ok(&["get", "-H", "-o", "value", "quota", "tank/a/b"]), "none\n");
    assert_eq!(e.ok(&["get", "-H", "-p", "-o", "value", "quota", "tank/a/b"]), "0\n");
    e.ok(&["set", "reservation=0", "tank/a/b"]);
    assert_eq!(e.ok(&["get", "-H", "-o", "value", "reservation", "tank/a/b"]), "none\n");
    let ratios = e.ok(&["list", "-H", "-o", "name,ratio,refratio", "tank"]);
    assert!(ratios.starts_with("tank\t") && ratios.trim_end().split('\t').all(|f| f == "tank" || f.ends_with('x')), "{ratios}");
}

/// Issue 11 item 4: `redundant_metadata` is a dataset property with
/// OpenZFS's values and default, inherited, and checked wherever it is set
/// (what it does to the blocks written: crates/engine/tests/ditto.rs).
#[test]
fn redundant_metadata_is_an_inherited_property_with_openzfs_values() {
    let Some(e) = Env::new("ds-redundant") else { return };
    let (mnt, img) = (e.path("tank-mnt"), e.path("tank.img"));
    let err = e.fails(&["pool", "create", "-m", &mnt, "-O", "redundant_metadata=double", "tank", &img, "--size", "128M"]);
    assert!(err.contains("'double'") && err.contains("redundant_metadata") && err.contains("all, most, some, none"), "{}", err);
    assert!(!std::path::Path::new(&img).exists(), "a refused create leaves no image behind");
    e.ok(&["pool", "create", "-m", &mnt, "tank", &img, "--size", "128M"]);
    assert_eq!(e.ok(&["get", "-H", "-o", "value,source", "redundant_metadata", "tank"]), "all\tdefault\n");
    e.ok(&["set", "redundant_metadata=most", "tank"]);
    e.ok(&["create", "tank/a"]);
    let got = e.ok(&["get", "-H", "-o", "name,value,source", "redundant_metadata", "tank", "tank/a"]);
    assert_eq!(got, "tank\tmost\tlocal\ntank/a\tmost\tinherited from tank\n");
    for v in ["all", "some", "none"] {
        e.ok(&["set", &format!("redundant_metadata={v}"), "tank/a"]);
        assert_eq!(e.ok(&["get", "-H", "-o", "value,source", "redundant_metadata", "tank/a"]), format!("{v}\tlocal\n"));
    }
    let err = e.fails(&["set", "redundant_metadata=2", "tank/a"]);
    assert!(err.contains("bad value '2'") && err.contains("all, most, some, none"), "{}", err);
    assert_eq!(e.ok(&["get", "-H", "-o", "value", "redundant_metadata", "tank/a"]), "none\n", "a refused value changes nothing");
    e.ok(&["inherit", "redundant_metadata", "tank/a"]);
    assert_eq!(e.ok(&["get", "-H", "-o", "value,source", "redundant_metadata", "tank/a"]), "most\tinherited from tank\n");
}

#[test]
fn snapshots_clones_rollback_rename_and_destroy() {
    let Some(e) = Env::new("ds-snap") else { return };
    e.create("tank");
    e.ok(&["create", "-p", "tank/a/b"]);
    e.ok(&["snapshot", "-r", "tank/a@s1"]);
    e.ok(&["snapshot", "tank/a@s2", "tank/a/b@s2"]);
    assert_eq!(e.ok(&["list", "-r", "-t", "snapshot", "-o", "name", "-H", "tank"]), "tank/a@s1\ntank/a@s2\ntank/a/b@s1\ntank/a/b@s2\n");
    let used = e.ok(&["list", "-r", "-t", "snapshot", "-o", "name,used", "-H", "-p", "tank/a"]);
    for l in used.lines() {
        let cols: Vec<&str> = l.split('\t').collect();
        assert_eq!(cols.len(), 2, "{}", l);
        cols[1].parse::<u64>().expect("exact bytes");
    }
    assert_eq!(e.ok(&["list", "-H", "-o", "name", "-t", "all", "-r", "tank/a/b"]), "tank/a/b\ntank/a/b@s1\ntank/a/b@s2\n");
    assert!(e.fails(&["snapshot", "tank/a@s1"]).contains("cannot create snapshot 'tank/a@s1': dataset already exists"));
    assert!(e.fails(&["snapshot", "tank/a"]).contains("not a snapshot name"));
    assert!(e.fails(&["snapshot", "tank/nosuch@s"]).contains("cannot create snapshot 'tank/nosuch@s'"));
    // rollback: only to the latest unless -r
    assert!(e.fails(&["rollback", "tank/a@s1"]).contains("more recent snapshots exist"));
    e.ok(&["rollback", "tank/a@s2"]);
    e.ok(&["rollback", "-r", "tank/a@s1"]);
    assert_eq!(e.ok(&["list", "-H", "-o", "name", "-t", "snapshot", "tank/a"]), "tank/a@s1\n");
    assert!(e.fails(&["rollback", "tank/a"]).contains("not a snapshot name"));
    assert!(e.fails(&["rollback", "tank/a@nosuch"]).contains("cannot rollback to 'tank/a@nosuch'"));
    // clone; a snapshot with clones cannot be destroyed
    e.ok(&["clone", "-o", "atime=off", "tank/a@s1", "tank/c"]);
    assert_eq!(e.ok(&["get", "-H", "-o", "value", "origin", "tank/c"]), "tank/a@s1\n");
    assert_eq!(e.ok(&["get", "-H", "-o", "value,source", "atime", "tank/c"]), "off\tlocal\n");
    assert!(e.fails(&["clone", "tank/a", "tank/d"]).contains("cannot create 'tank/d'"));
    assert_eq!(e.fails(&["clone", "tank/a@nosuch", "tank/d"]).trim(), "tarn: cannot open 'tank/a@nosuch': dataset does not exist");
    let err = e.fails(&["destroy", "tank/a@s1"]);
    assert!(err.contains("cannot destroy 'tank/a@s1'") && err.contains("dependent clones") && err.contains("tank/c"), "{}", err);
    // children and snapshots need -r
    let err = e.fails(&["destroy", "tank/a"]);
    assert!(err.contains("cannot destroy 'tank/a': filesystem has children") && err.contains("-r"), "{}", err);
    assert!(e.fails(&["destroy", "tank/nosuch"]).contains("cannot destroy 'tank/nosuch': dataset does not exist"));
    assert!(e.fails(&["destroy", "tank"]).contains("root dataset"));
    // rename
    e.ok(&["rename", "tank/c", "tank/a/c2"]);
    assert!(e.ok(&["list", "-H", "-o", "name", "-r", "tank"]).contains("tank/a/c2\n"));
    e.ok(&["rename", "tank/a@s1", "tank/a@first"]);
    assert!(e.fails(&["rename", "tank/nosuch", "tank/z"]).contains("dataset does not exist"));
    assert!(e.fails(&["rename", "tank/a@first", "tank/b@x"]).contains("cannot rename"));
    e.ok(&["destroy", "tank/a/c2"]);
    e.ok(&["destroy", "-r", "tank/a"]);
    assert_eq!(e.ok(&["list", "-H", "-o", "name", "-t", "all"]), "tank\n");
    assert!(e.ok(&["inspect", "tank", "--verify"]).starts_with("verified txg"));
}

#[test]
fn mounts_follow_the_datasets() {
    let Some(e) = Env::new("ds-mounts") else { return };
    let mnt = e.create("tank");
    let own = e.path("own");
    // A dataset with a mountpoint of its own is mounted when created.
    e.ok(&["create", "-o", &format!("mountpoint={}", own), "tank/own"]);
    assert!(is_mounted(&own));
    // Others are served inside their parent's mount, at their inherited
    // mountpoint, without a mount of their own.
    e.ok(&["create", "tank/lazy"]);
    let lazy = format!("{}/lazy", mnt);
    assert!(!is_mounted(&lazy));
    assert!(Path::new(&lazy).is_dir(), "a created dataset appears in its parent's mount at once");
    std::fs::write(format!("{}/f", lazy), b"lazy data").unwrap();
    assert_eq!(e.ok(&["get", "-H", "-o", "value", "mounted", "tank/lazy"]), "yes\n");
    assert!(e.ok(&["mount"]).contains(&lazy), "open inside its parent's mount: listed");
    assert!(e.fails(&["mount", "tank/lazy"]).contains("filesystem already mounted"));
    // It is its own file system: no hard link or rename out of it; its
    // mountpoint cannot be removed.
    let x = std::fs::rename(format!("{}/f", lazy), format!("{}/f", mnt)).unwrap_err();
    assert_eq!(x.raw_os_error(), Some(libc::EXDEV), "{}", x);
    let x = std::fs::hard_link(format!("{}/f", lazy), format!("{}/g", mnt)).unwrap_err();
    assert_eq!(x.raw_os_error(), Some(libc::EXDEV), "{}", x);
    assert_eq!(std::fs::remove_dir(&lazy).unwrap_err().raw_os_error(), Some(libc::EBUSY));
    // unmount stops serving it until mount.
    e.ok(&["unmount", "tank/lazy"]);
    assert!(!Path::new(&lazy).exists());
    assert_eq!(e.ok(&["get", "-H", "-o", "value", "mounted", "tank/lazy"]), "no\n");
    e.ok(&["mount", "tank/lazy"]);
    assert_eq!(std::fs::read(format!("{}/f", lazy)).unwrap(), b"lazy data");
    e.ok(&["unmount", &lazy]);
    assert!(!Path::new(&lazy).exists(), "unmounted by its directory");
    e.ok(&["mount", "tank/lazy"]);
    assert_eq!(std::fs::read(format!("{}/f", lazy)).unwrap(), b"lazy data");
    // set mountpoint= moves the mount; canmount=off unmounts; none unmounts.
    let moved = e.path("moved");
    e.ok(&["set", &format!("mountpoint={}", moved), "tank/own"]);
    assert!(!is_mounted(&own) && is_mounted(&moved));
    e.ok(&["set", "canmount=off", "tank/own"]);
    assert!(!is_mounted(&moved));
    assert!(e.fails(&["mount", "tank/own"]).contains("'canmount' property is set to 'off'"));
    e.ok(&["set", "canmount=on", "tank/own"]);
    assert!(is_mounted(&moved));
    e.ok(&["set", "mountpoint=none", "tank/own"]);
    assert!(!is_mounted(&moved));
    assert!(e.fails(&["mount", "tank/own"]).contains("mountpoint=none"));
    // ... and inheriting the mountpoint again serves it inside its parent.
    e.ok(&["inherit", "mountpoint", "tank/own"]);
    assert!(Path::new(&format!("{}/own", mnt)).is_dir() && !is_mounted(&format!("{}/own", mnt)));
    // A child served inside moves to a mount of its own with a local mountpoint.
    let away = e.path("away");
    e.ok(&["set", &format!("mountpoint={}", away), "tank/lazy"]);
    assert!(is_mounted(&away) && !Path::new(&lazy).exists());
    assert_eq!(std::fs::read(format!("{}/f", away)).unwrap(), b"lazy data");
    e.ok(&["inherit", "mountpoint", "tank/lazy"]);
    assert!(!is_mounted(&away));
    assert_eq!(std::fs::read(format!("{}/f", lazy)).unwrap(), b"lazy data");
    // rename moves a served dataset to its new place.
    e.ok(&["rename", "tank/lazy", "tank/lazier"]);
    let lazier = format!("{}/lazier", mnt);
    assert!(!Path::new(&lazy).exists());
    assert_eq!(std::fs::read(format!("{}/f", lazier)).unwrap(), b"lazy data");
    // rollback of a mounted dataset keeps it mounted (the kernel's caches are dropped).
    e.ok(&["snapshot", "tank/lazier@s"]);
    e.ok(&["rollback", "tank/lazier@s"]);
    assert!(Path::new(&lazier).is_dir());
    assert!(e.log().contains("rolled back 'tank/lazier'"), "{}", e.log());
    // Snapshots mount read-only.
    let snapdir = e.path("snap");
    e.ok(&["mount", "tank/lazier@s", &snapdir]);
    let w = std::fs::write(format!("{}/new", snapdir), b"x").unwrap_err();
    assert_eq!(w.raw_os_error(), Some(libc::EROFS), "{}", w);
    assert!(e.fails(&["mount", "tank/lazier@s", &e.path("snap2")]).contains("already mounted"));
    assert!(e.fails(&["mount", "tank/lazier@s"]).contains("only on a directory given"));
    e.ok(&["unmount", "tank/lazier@s"]);
    // destroy unmounts first; busy is an error unless -f.
    let f = std::fs::File::open(format!("{}/f", lazier)).unwrap();
    e.ok(&["destroy", "tank/lazier@s"]);
    let err = e.fails(&["destroy", "tank/lazier"]);
    assert!(err.contains("cannot destroy 'tank/lazier': dataset is busy"), "{}", err);
    assert!(e.fails(&["unmount", "tank/lazier"]).contains("busy"));
    assert_eq!(std::fs::read(format!("{}/f", lazier)).unwrap(), b"lazy data", "still served after the refusals");
    e.ok(&["destroy", "-f", "tank/lazier"]);
    let mut buf = [0u8; 4];
    let r = std::os::unix::fs::FileExt::read_at(&f, &mut buf, 0).unwrap_err();
    assert_eq!(r.raw_os_error(), Some(libc::EIO), "an open file of a forcibly destroyed dataset fails: {}", r);
    drop(f);
    assert!(!Path::new(&lazier).exists());
    assert!(e.fails(&["mount", "tank/lazier"]).contains("no such dataset"));
    assert!(e.fails(&["mount", "tank/nosuch"]).contains("no such dataset"));
}

#[test]
fn datasets_properties_and_explicit_mounts_persist_across_restarts() {
    let Some(e) = Env::new("ds-restart") else { return };
    e.create("tank");
    let own = e.path("own");
    e.ok(&["create", "-p", "-o", "recordsize=1M", "tank/a/b"]);
    e.ok(&["create", "-o", &format!("mountpoint={}", own), "tank/own"]);
    e.ok(&["snapshot", "-r", "tank/a@keep"]);
    e.ok(&["clone", "tank/a@keep", "tank/cl"]);
    let before = e.ok(&["list", "-H", "-o", "name,recordsize,origin", "-t", "all"]);
    let props_before = e.ok(&["get", "-H", "all", "tank/a/b"]);
    e.ok(&["daemon", "stop"]);
    assert!(!is_mounted(&own));
    assert_eq!(e.ok(&["list", "-H", "-o", "name,recordsize,origin", "-t", "all"]), before);
    assert!(is_mounted(&own), "the next daemon mounts the explicitly placed dataset again");
    let props_after = e.ok(&["get", "-H", "all", "tank/a/b"]);
    let stable = |s: &str| s.lines().filter(|l| !l.contains("\tavailable\t") && !l.contains("\tused")).map(String::from).collect::<Vec<_>>();
    assert_eq!(stable(&props_after), stable(&props_before));
    assert!(Path::new(&own).exists());
    // Export unmounts every dataset of the pool, snapshots included.
    let snapdir = e.path("snap");
    e.ok(&["mount", "tank/a@keep", &snapdir]);
    e.ok(&["pool", "export", "tank"]);
    assert!(!is_mounted(&snapdir) && !is_mounted(&own));
    assert_eq!(e.ok(&["mount"]).lines().count(), 1, "only the header is left");
}

#[test]
fn a_mount_inside_a_served_dataset_is_left_alone() {
    // Telling the kernel to forget an entry detaches any mount on it: a
    // dataset mounted on a directory inside one served in its parent's
    // mount must survive that one's rollback and refreshes, and make its
    // destroy busy, as a submount makes umount busy.
    let Some(e) = Env::new("ds-submount") else { return };
    let mnt = e.create("tank");
    e.ok(&["create", "tank/a"]);
    let inner = format!("{}/a/inner", mnt);
    e.ok(&["create", "-o", &format!("mountpoint={}", inner), "tank/inner"]);
    assert!(is_mounted(&inner));
    std::fs::write(format!("{}/f", inner), b"inner data").unwrap();
    e.ok(&["snapshot", "tank/a@s"]);
    assert!(is_mounted(&inner), "a snapshot of tank/a left the mount inside it");
    e.ok(&["rollback", "tank/a@s"]);
    assert!(is_mounted(&inner), "the rollback of tank/a left the mount inside it");
    e.ok(&["create", "tank/a2"]);
    e.ok(&["snapshot", "tank/a@t"]);
    assert!(is_mounted(&inner));
    let err = e.fails(&["destroy", "-r", "tank/a"]);
    assert!(err.contains("dataset is busy"), "{}", err);
    assert!(is_mounted(&inner));
    assert_eq!(std::fs::read(format!("{}/f", inner)).unwrap(), b"inner data");
    e.ok(&["unmount", "tank/inner"]);
    e.ok(&["destroy", "-r", "tank/a"]);
    assert!(!Path::new(&format!("{}/a", mnt)).exists());
}

/// Issue 11 item 13: `destroy -r tank/a@x` destroyed only `tank/a@x` and
/// exited 0, leaving the descendants' `@x`; with only descendants having
/// `@x` it said "dataset does not exist". As `zfs destroy -r fs@snap`, it
/// destroys that snapshot in every descendant that has it, fails only if
/// none has it, and — all or none — destroys nothing if one has clones.
/// Its sibling `snapshot -r` is all or none too (one descendant already
/// having the snapshot used to leave the others taken).
#[test]
fn recursive_snapshot_destroy_and_create_cover_every_descendant() {
    let Some(e) = Env::new("ds-rsnap") else { return };
    e.create("tank");
    e.ok(&["create", "-p", "tank/a/b", "tank/a/c"]);
    e.ok(&["snapshot", "-r", "tank/a@x"]);
    e.ok(&["create", "tank/a/d"]);
    let snaps = |e: &Env| e.ok(&["list", "-H", "-o", "name", "-t", "snapshot", "-r", "tank"]);
    assert_eq!(snaps(&e), "tank/a@x\ntank/a/b@x\ntank/a/c@x\n");
    e.ok(&["destroy", "-r", "tank/a@x"]);
    assert_eq!(snaps(&e), "", "every descendant's @x is destroyed");
    // Only descendants have it.
    e.ok(&["snapshot", "tank/a/b@y", "tank/a/c@y"]);
    e.ok(&["destroy", "-r", "tank/a@y"]);
    assert_eq!(snaps(&e), "");
    // None has it.
    let err = e.fails(&["destroy", "-r", "tank/a@z"]);
    assert!(err.contains("cannot destroy 'tank/a@z': could not find any snapshots to destroy"), "{}", err);
    // A descendant's with a clone: nothing is destroyed, and the error names it.
    e.ok(&["snapshot", "-r", "tank/a@w"]);
    e.ok(&["clone", "tank/a/c@w", "tank/cl"]);
    let err = e.fails(&["destroy", "-r", "tank/a@w"]);
    assert!(err.contains("'tank/a/c@w' has dependent clones: 'tank/cl'"), "{}", err);
    assert_eq!(snaps(&e), "tank/a@w\ntank/a/b@w\ntank/a/c@w\ntank/a/d@w\n");
    e.ok(&["destroy", "tank/cl"]);
    e.ok(&["destroy", "-r", "tank/a@w"]);
    // snapshot -r: one descendant already has it, so none is taken.
    e.ok(&["snapshot", "tank/a/d@v"]);
    assert_eq!(e.fails(&["snapshot", "-r", "tank/a@v"]).trim(), "tarn: cannot create snapshot 'tank/a/d@v': dataset already exists");
    assert_eq!(snaps(&e), "tank/a/d@v\n", "all or none");
    assert!(e.fails(&["snapshot", "tank/a@u", "tank/a@u"]).contains("named twice"));
    assert_eq!(snaps(&e), "tank/a/d@v\n");
    assert!(e.ok(&["inspect", "tank", "--verify"]).starts_with("verified txg"));
}

/// Issue 11: errors named the wrong dataset or none — rename into a
/// missing parent, rename onto an existing snapshot, clone into a missing
/// parent or from a missing snapshot all said "dataset does not exist"
/// under the command's first name, and `create /p1/x` said "cannot open
/// ''". Each now names the dataset and the reason, as zfs does.
#[test]
fn errors_name_the_dataset_they_are_about() {
    let Some(e) = Env::new("ds-errnames") else { return };
    e.create("tank");
    e.ok(&["create", "tank/a"]);
    e.ok(&["snapshot", "tank/a@s1", "tank/a@s2"]);
    let line = |args: &[&str]| e.fails(args).trim().to_string();
    assert_eq!(line(&["rename", "tank/a", "tank/nope/a"]), "tarn: cannot rename to 'tank/nope/a': parent does not exist");
    assert_eq!(line(&["rename", "tank/a@s1", "tank/a@s2"]), "tarn: cannot rename to 'tank/a@s2': dataset already exists");
    assert_eq!(line(&["rename", "tank/a", "tank/b c"]), "tarn: cannot rename to 'tank/b c': invalid character ' ' in name");
    assert_eq!(line(&["clone", "tank/a@s1", "tank/nope/c"]), "tarn: cannot create 'tank/nope/c': parent does not exist");
    assert_eq!(line(&["clone", "tank/a@nope", "tank/c"]), "tarn: cannot open 'tank/a@nope': dataset does not exist");
    assert_eq!(line(&["clone", "tank/a@s1", "tank/a"]), "tarn: cannot create 'tank/a': dataset already exists");
    assert_eq!(line(&["create", "/p1/x"]), "tarn: cannot create '/p1/x': leading slash in name");
    assert_eq!(line(&["create", "tank/x/"]), "tarn: cannot create 'tank/x/': trailing slash in name");
    assert_eq!(line(&["destroy", "/tank/a"]), "tarn: cannot destroy '/tank/a': leading slash in name");
    assert_eq!(line(&["snapshot", "tank/a@s@t"]), "tarn: cannot create snapshot 'tank/a@s@t': multiple '@' delimiters in name");
    assert_eq!(line(&["snapshot", "tank/nofs@s"]), "tarn: cannot create snapshot 'tank/nofs@s': dataset does not exist");
    assert_eq!(line(&["rollback", "tank/a@nope"]), "tarn: cannot rollback to 'tank/a@nope': dataset does not exist");
    assert_eq!(line(&["set", "atime=off", "tank/../a"]), "tarn: cannot set property for 'tank/../a': parent reference, '..' is found in name");
    assert_eq!(line(&["list", "/tank"]), "tarn: cannot open '/tank': leading slash in name");
    assert_eq!(e.ok(&["list", "-H", "-o", "name", "-t", "all", "-r", "tank"]), "tank\ntank/a\ntank/a@s1\ntank/a@s2\n", "nothing changed");
}
