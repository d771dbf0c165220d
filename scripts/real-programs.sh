#!/usr/bin/env bash
# Real programs on a mounted file system, each step checked against a reference
# made on the host's own file system.
#
#   scripts/real-programs.sh DIR [--ref REFDIR] [--keep] [--steps tar,git,sqlite,fio]
#
# DIR      a directory on the file system under test; the steps work in
#          DIR/real-programs (removed at the end unless --keep).
# --ref    where the reference tree, the decompressed tarball and the git
#          repository are kept between runs (default /var/tmp/tarn-real-programs-ref,
#          which should be on a different, trusted file system; made on first use).
#
# Steps (each prints PASS or FAIL with its time; the exit status is 1 if any failed):
#   tar-unpack    unpack the Linux source (Debian's linux-source tarball in /usr/src,
#                 decompressed once into REFDIR so the time is the file system's,
#                 not xz's) into DIR
#   tar-checksum  sha256 of every file of the sorted file list in DIR against the
#                 same unpack in REFDIR (also types, modes and symlink targets)
#   tar-retar     re-tar DIR's tree (GNU tar, sorted names, every entry but directories,
#                 fixed owner, no atime/ctime) and compare the stream's sha256 with the
#                 same re-tar of REFDIR's tree (so mtimes, modes and links count too)
#   git-clone     `git clone --no-local` of a repository made once in REFDIR from
#                 the Linux tree (four commits: the tree, an edit, a rename, a delete)
#   git-fsck      `git fsck --full` in the clone, and `git status` reports it clean
#   sqlite        python3's sqlite3: 1,500 transactions of inserts, updates and
#                 deletes (synchronous=FULL; rollback journal, then WAL), against a
#                 model of what must be there; reopen; PRAGMA integrity_check = ok
#   fio-verify    fio, 4 jobs of random 4-128 KiB writes with verify=crc32c (verify
#                 inline), then a second job set writes, the page cache is dropped,
#                 and a verify_only pass reads it all back (256 MiB per job)
#
# Needs: linux-source, git, python3, fio, xz-utils (installed with apt if missing),
# ~3 GB free in DIR and ~5 GB in REFDIR. Takes ~3.5 min on ext4 over a loop device
# and ~5 min on zfs-fuse here, plus ~5 min once to make the reference (docs/benchmarks.md).
set -uo pipefail
cd "$(dirname "$0")/.."

DIR="" REF=/var/tmp/tarn-real-programs-ref KEEP=0 STEPS="tar,git,sqlite,fio"
while [ $# -gt 0 ]; do
  case "$1" in
    --ref) REF="$2"; shift ;;
    --keep) KEEP=1 ;;
    --steps) STEPS="$2"; shift ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
    *) DIR="$1" ;;
  esac
  shift
done
[ -n "$DIR" ] && [ -d "$DIR" ] || { echo "usage: scripts/real-programs.sh DIR (DIR must exist)" >&2; exit 2; }
W="$(cd "$DIR" && pwd)/real-programs"

export DEBIAN_FRONTEND=noninteractive LC_ALL=C
need_pkg() { # command package
  command -v "$1" >/dev/null 2>&1 && return 0
  echo "installing $2" >&2
  { apt-get update -qq && apt-get install -y -qq "$2"; } >/dev/null 2>&1
  command -v "$1" >/dev/null 2>&1 || { echo "cannot install $2" >&2; exit 2; }
}
need_pkg git git; need_pkg python3 python3; need_pkg fio fio; need_pkg xz xz-utils
TARBALL=$(ls /usr/src/linux-source-*.tar.xz 2>/dev/null | sort -V | tail -1)
if [ -z "$TARBALL" ]; then
  echo "installing linux-source (~140 MB)" >&2
  { apt-get update -qq && apt-get install -y -qq linux-source; } >/dev/null 2>&1
  TARBALL=$(ls /usr/src/linux-source-*.tar.xz 2>/dev/null | sort -V | tail -1)
  [ -n "$TARBALL" ] || { echo "cannot install linux-source" >&2; exit 2; }
fi
TREE=$(basename "$TARBALL" .tar.xz)   # the tarball's top directory

FAILS=0 PASSES=0
declare -a SUMMARY
step() { # name command...: run, time, print PASS/FAIL
  local name=$1; shift
  local t0 t rc; t0=$(date +%s.%N)
  "$@" > "$W.$name.log" 2>&1; rc=$?
  t=$(python3 -c "print('%.1f' % ($(date +%s.%N) - $t0))")
  if [ "$rc" = 0 ]; then
    PASSES=$((PASSES + 1)); SUMMARY+=("PASS $name ${t}s")
    printf 'PASS  %-13s %7s s\n' "$name" "$t"
  else
    FAILS=$((FAILS + 1)); SUMMARY+=("FAIL $name ${t}s")
    printf 'FAIL  %-13s %7s s  (exit %s)\n' "$name" "$t" "$rc"
    sed 's/^/      | /' "$W.$name.log" | tail -15
  fi
  rm -f "$W.$name.log"
  return "$rc"
}

# --- reference, made once ---
manifest() { # tree -> per-entry lines: type mode [size] path [target]; sha256 of files
  # No size for directories: it is the file system's own business (ext4 and
  # zfs differ), not part of what was unpacked.
  ( cd "$1" && find . \( -type d -printf '%y %m %p\n' \) -o -printf '%y %m %s %p %l\n' | sort &&
    find . -type f -print0 | sort -z | xargs -0 sha256sum )
}
# Directories are left out of the re-tar: the tarball has no entry for some of
# them, so their mtimes are the time of the unpack (tar-checksum checks their modes).
retar() { ( cd "$1" && find "$TREE" ! -type d -print0 | sort -z |
  tar --null --no-recursion -T - --owner=0 --group=0 --numeric-owner --format=posix \
      --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime -cf - ); }
make_ref() {
  mkdir -p "$REF"
  local stamp; stamp="$(basename "$TARBALL") $(stat -c %s.%Y "$TARBALL")"
  if ! [ -f "$REF/stamp" ] || [ "$(cat "$REF/stamp")" != "$stamp" ]; then
    echo "making the reference in $REF (once per tarball)" >&2
    rm -rf "${REF:?}"/*
    xz -dc -T0 "$TARBALL" > "$REF/linux.tar" || return 1
    mkdir -p "$REF/tree" && tar -C "$REF/tree" -xf "$REF/linux.tar" || return 1
    echo "$stamp" > "$REF/stamp"
  fi
  # Each piece is made once, when missing (a new manifest format gets a new name).
  if ! [ -s "$REF/manifest.v2" ]; then
    manifest "$REF/tree" > "$REF/manifest.tmp" && mv "$REF/manifest.tmp" "$REF/manifest.v2" || return 1
  fi
  if ! [ -s "$REF/retar.v2.sha256" ]; then
    retar "$REF/tree" | sha256sum | cut -d' ' -f1 > "$REF/retar.v2.sha256" || return 1
  fi
  [ -f "$REF/repo/.done" ] && return 0
  rm -rf "$REF/repo"
  git init -q -b main "$REF/repo" && cp -a "$REF/tree/$TREE/." "$REF/repo/" || return 1
  (
    cd "$REF/repo" && export GIT_AUTHOR_NAME=bench GIT_AUTHOR_EMAIL=bench@localhost \
      GIT_COMMITTER_NAME=bench GIT_COMMITTER_EMAIL=bench@localhost
    git add -f -A . && git commit -qm "linux tree" &&   # -f: the tree ships a .gitignore of /*
    echo "# real-programs edit" >> Makefile && git commit -qam "edit Makefile" &&
    git mv README README.renamed && git commit -qm "rename README" &&
    git rm -rq Documentation/translations && git commit -qm "delete a directory" &&
    # One pack without delta search: the clone then copies objects as they are,
    # so its time is writing and checking out, not compressing on this machine.
    git config pack.window 0 && git repack -adq && git prune
  ) || return 1
  touch "$REF/repo/.done"
}

# --- steps ---
tar_unpack() { mkdir -p "$W/tree" && tar -C "$W/tree" -xf "$REF/linux.tar"; }
tar_checksum() {
  manifest "$W/tree" > "$W/manifest" || return 1
  if ! cmp -s "$W/manifest" "$REF/manifest.v2"; then
    echo "trees differ (first differences, < reference, > $DIR):"
    diff "$REF/manifest.v2" "$W/manifest" | head -20; return 1
  fi
  echo "$(grep -c '^[0-9a-f]\{64\} ' "$W/manifest") files match"
}
tar_retar() {
  local sum; sum=$(retar "$W/tree" | sha256sum | cut -d' ' -f1)
  [ "$sum" = "$(cat "$REF/retar.v2.sha256")" ] || { echo "re-tar sha256 $sum, reference $(cat "$REF/retar.v2.sha256")"; return 1; }
}
git_clone() { rm -rf "$W/tree"; git clone -q --no-local "$REF/repo" "$W/clone"; }
git_fsck() {
  git -C "$W/clone" fsck --full --strict || return 1
  local dirty; dirty=$(git -C "$W/clone" status --porcelain | head -5)
  [ -z "$dirty" ] || { echo "checkout differs from HEAD: $dirty"; return 1; }
  [ "$(git -C "$W/clone" rev-parse HEAD)" = "$(git -C "$REF/repo" rev-parse HEAD)" ]
}
sqlite_load() {
  rm -rf "$W/clone"
  python3 - "$W/sqlite.db" <<'EOF'
import random, sqlite3, sys
path = sys.argv[1]
rng = random.Random(42)
model = {}  # id -> (k, v) of every committed row
def blob(n): return rng.randbytes(n)
def run(mode, txns):
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=%s" % mode)
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, k INTEGER, v BLOB)")
    db.execute("CREATE INDEX IF NOT EXISTS t_k ON t(k)")
    next_id = max(model, default=0) + 1
    for n in range(txns):
        db.execute("BEGIN")
        change = {}  # id -> (k, v), or None for deleted: applied to the model on commit
        for _ in range(40):
            v = blob(rng.randint(50, 3000)); k = rng.randint(0, 10**6)
            db.execute("INSERT INTO t VALUES (?,?,?)", (next_id, k, v)); change[next_id] = (k, v); next_id += 1
        live = list(model) + [i for i in change if i not in model]
        picked = rng.sample(live, min(25, len(live)))
        for i in picked[:15]:
            v = blob(rng.randint(50, 3000)); k = (change.get(i) or model[i])[0]
            db.execute("UPDATE t SET v=? WHERE id=?", (v, i)); change[i] = (k, v)
        for i in picked[15:]:
            db.execute("DELETE FROM t WHERE id=?", (i,)); change[i] = None
        if n % 50 == 49:  # a rolled-back transaction must leave no trace
            db.execute("ROLLBACK"); continue
        db.execute("COMMIT")
        for i, row in change.items():
            if row is None: model.pop(i, None)
            else: model[i] = row
    db.close()
run("DELETE", 750)
run("WAL", 750)
db = sqlite3.connect(path)
check = db.execute("PRAGMA integrity_check").fetchall()
rows = dict((i, (k, v)) for i, k, v in db.execute("SELECT id, k, v FROM t"))
db.close()
print("integrity_check:", check[0][0] if len(check) == 1 else check[:5], "rows:", len(rows), "model:", len(model))
if check != [("ok",)]: sys.exit("integrity_check is not ok")
if rows != model: sys.exit("table differs from the model: %d rows, %d expected" % (len(rows), len(model)))
EOF
}
fio_verify() (   # a subshell: it changes directory
  rm -f "$W"/sqlite.db*; mkdir -p "$W/fio"
  # Same job name and seed in both passes of "cold", so verify_only knows what was written.
  local common=(--directory="$W/fio" --numjobs=4 --size=256M --rw=randwrite --bsrange=4k-128k
                --ioengine=psync --verify=crc32c --verify_fatal=1 --group_reporting)
  cd "$W/fio" || return 1   # fio drops its verify state files in the working directory
  fio --name=inline "${common[@]}" --do_verify=1 --end_fsync=1 || return 1
  fio --name=cold "${common[@]}" --do_verify=0 --end_fsync=1 || return 1
  sync; echo 3 > /proc/sys/vm/drop_caches   # the verify pass reads from the file system, not memory
  fio --name=cold "${common[@]}" --verify_only || return 1
)

rm -rf "$W"; mkdir -p "$W"
echo "real programs on $DIR (reference $REF, $(basename "$TARBALL"))"
t0=$(date +%s)
make_ref >"$W.reference.log" 2>&1 || { echo "cannot make the reference in $REF:"; tail -15 "$W.reference.log"; exit 2; }
rm -f "$W.reference.log"
echo "reference ready ($(( $(date +%s) - t0 )) s)"
if [[ ",$STEPS," == *,tar,* ]]; then
  step tar-unpack tar_unpack && { step tar-checksum tar_checksum; step tar-retar tar_retar; }
fi
if [[ ",$STEPS," == *,git,* ]]; then
  step git-clone git_clone && step git-fsck git_fsck
fi
[[ ",$STEPS," == *,sqlite,* ]] && step sqlite sqlite_load
[[ ",$STEPS," == *,fio,* ]] && step fio-verify fio_verify
[ "$KEEP" = 1 ] || rm -rf "$W"
echo "real-programs: $PASSES passed, $FAILS failed"
[ "$FAILS" = 0 ]
