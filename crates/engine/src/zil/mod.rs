//! The intent log (OpenZFS's ZIL): what makes `fsync` cost one log write
//! and one cache flush instead of a txg sync.
//!
//! ## Purpose
//! A change joins the open txg and reaches the disk when that txg syncs,
//! seconds later. A caller that needs it durable now (`fsync`, `O_SYNC`,
//! `sync=always`) commits the dataset's log: the records of the changes it
//! depends on are written to a chain of log blocks and the devices flushed.
//! After a crash, import claims the chains and the first mount of each
//! dataset replays its records on top of the last synced txg.
//!
//! ## In memory: records (itxs)
//! The POSIX layer logs a record ([`Itx`]) for every change, inside the
//! change's transaction and under the locks that order it, so a record's
//! sequence number is the order changes were made in and its txg the txg
//! that holds the change. Namespace records (create, link, remove, rename)
//! go on one list; the others (write, setattr, fallocate, xattr) on a list
//! per object. A commit for object O takes the namespace list and O's list
//! and nothing of other files' buffered writes (`commit`). Write records
//! carry no data until committed: the data is read then (`LogSource::fill`),
//! as OpenZFS's WR_NEED_COPY, so buffered writes cost no copy. Records are
//! dropped once their txg is on disk (`sync_done`).
//!
//! ## Indirect writes (`logbias`, `indirect.rs`)
//! Copying a large write into the log writes its data twice: into log
//! blocks now, into the file's blocks when its txg syncs. So, as OpenZFS's
//! `zfs_log_write`, a commit logs a write's *whole* blocks by pointer
//! (WR_INDIRECT) when the dataset's `logbias` is `throughput`, or when it
//! is `latency`, the write is at least `zfs_immediate_write_sz` and the
//! pool has no log device taking writes (a fast log device makes copying
//! cheaper than a write to the main pool). The block's dirty buffer is
//! written in place now (`object/prewrite.rs`: a transient allocation of
//! the normal class, compressed and checksummed as its txg would), the
//! record carries its pointer, and the round's flush covers the block's
//! vdev too. The txg's sync then links that block instead of writing it
//! (OpenZFS's `dr_override`) — unless the block changed since, in which
//! case it writes the new buffer and frees the old one. A block the write
//! covers only in part (it starts or ends inside it) is logged the same
//! way when the part is at least `zfs_immediate_write_sz`: the record
//! names the whole block and the part, and replay writes only the part.
//! (A 1 MiB write(2) from a buffer that is not page-aligned spans 257
//! pages and reaches tarn as two requests, the first ending 16 bytes or
//! so short of a block's end: copying that block cost one eighth of the
//! data in log blocks.) Smaller parts, and everything else, are copied,
//! `zil_maxcopied` bytes a record.
//!
//! ```text
//!                  logbias=throughput      logbias=latency
//!  whole block     pointer                 pointer if write ≥ immediate_write_sz
//!                                          and no log device; else copied
//!  partial block   pointer if the part     the same, when the whole block
//!                  ≥ immediate_write_sz    would be a pointer
//! ```
//!
//! After a crash, a pointer names a block no synced txg owns if the block
//! was born after the claim txg: import claims those (with the chain's
//! blocks), replay reads and verifies each before applying its change,
//! and they are freed with the chain. A block that does not verify was
//! torn before its round's flush — never acknowledged — and ends the log.
//!
//! ## Commits: a pipeline of rounds (OpenZFS's lwb pipeline)
//! ```text
//!  fsync A ─┐ takes ns + A's records ─▶ round 7: fill, place, write ─┐ flush 4 ─▶ ack 7
//!  fsync B ─┤ takes B's records     ─▶ round 8: fill, place, write ─┤ (covers 7, 8)
//!  fsync C ─┘ takes C's records     ─▶ round 8 too (joined B's)     │
//!  fsync D ──── takes D's records   ─▶ round 9: write ──────────────┴ flush 5 ─▶ ack 8, 9
//! ```
//! Records taken by a commit join the next round to open. A committer
//! whose records are pending opens that round (leads it) unless one is
//! being opened, and writes it; several rounds are in flight at once, at
//! most `tarn_zil_rounds_in_flight` (16, the bound `ROUNDS_IN_FLIGHT_MAX`;
//! 1 makes the log write one round at a time). A round's life:
//! 1. *open*: while a flush runs (or a round is being written, whose
//!    flush comes next), a round written now could only be made durable
//!    by the flush after that one: it is opened when its write would end
//!    just as that flush can start, predicted from the last round's and
//!    flush's times (`catch_next_flush`), gathering the commits that come
//!    meanwhile for no more latency. Then, when other committers are
//!    logging, it waits `zfs_commit_timeout_pct` % of the last round's
//!    write and flush time for them to join (a lone writer never waits),
//!    and takes the pending records;
//! 2. *fill* (a write's data read) and *place*: its blocks go after the
//!    previous round's on the chain, in round order (each block names the
//!    next place, allocated then);
//! 3. *write*: its blocks are written together;
//! 4. *flush*: a flush of a device covers every block whose write had
//!    completed when it started, so flushes are numbered and one at a
//!    time: a round written while a flush runs waits for the next, which
//!    serves every round written meanwhile (merged flushes);
//! 5. *acknowledge*: after every earlier round (rounds complete in log
//!    order), its blocks join the live list and its waiters wake — every
//!    commit waits for the round holding its records, or with nothing new
//!    for the last round opened, which may hold what it depends on.
//!
//! With N concurrent fsyncers, commits share rounds (those arriving while
//! one is opened) and rounds share flushes (those written while one runs);
//! with one fsyncer a round is one commit, one write, one flush.
//! Measured (docs/benchmarks.md, "The commit pipeline"): with 8 writers on
//! a flush-bound device a flush serves fewer commits than the old one
//! round at a time did (1.7 against 2.1), as rounds are issued sooner.
//!
//! ```text
//!   wait for company (µs)
//!     ▲          commit timeout = pct × last round's write+flush time
//!   50┤                                    ╱  (pct 10: a 0.5 ms round
//!     │                              ╱        lets the next wait 50 µs)
//!     │                        ╱
//!    0┼──────────────────╱──────────────────▶ last round (ms)
//!     0                 0.25               0.5
//!     (0 whenever the committer is alone)
//! ```
//!
//! ## On disk: the chain (format.md §18, `tarn_ondisk::zil`)
//! The dataset record keeps the log header: the chain's guid and the first
//! block that may hold records not yet synced. Each block names the next
//! (allocated before the block is written), and a block's sequence number
//! and chain guid are in its checksummed header, so the chain ends at the
//! first block that does not verify — a block never written, torn, or
//! stale. Log blocks are *transient* allocations (`Allocator::
//! alloc_transient`): never in the space log, free on disk, claimed at
//! import before anything else allocates.
//!
//! A block is freed (deferred two txgs) in the sync of the first txg that
//! holds all its records, and the header written in that txg names the
//! block after it. A new chain (the first commit of a dataset, or after a
//! failed log write) is usable once a txg carrying a header that names it
//! has synced; its first round waits for that sync.
//!
//! ## Claim and replay
//! At import (`claim`), every dataset with a chain has it walked: each
//! block that verifies, and the place after the last, is claimed. A chain
//! holding records gets the pool's imported txg as its claim txg (kept in
//! the header, so a second crash before replay keeps it). The dataset's
//! first read-write mount replays (`posix::replay`): records of txgs after
//! the claim txg, in sequence order, each in its own transaction that also
//! advances the header's replay seq — a crash during replay resumes after
//! the last record replayed. Then the chain is dropped and a new one begun:
//! commits start a new chain at once, but syncs of txgs before the one open
//! when replay ended still write the old chain's header (`Retiring`) — they
//! may hold only part of the replayed changes, and a crash then must find
//! the records again.
//!
//! ## Failure
//! A round that cannot allocate or write its blocks, or flush, falls back
//! to a txg sync (the fsync is still correct, only slower) and retires the
//! chain: rounds placed after start a new one. Every other round of that
//! chain in flight falls back too: the ones after the failed block cannot
//! be found past it (a torn block ends the chain), and the ones before are
//! not acknowledged through a chain being dropped. A suspended pool fails
//! the commit with the pool's error instead of waiting.
//!
//! ## Tunables
//! `zil_replay_disable` (discard logs instead of replaying them),
//! `tarn_zil_commit_max_bytes` (a commit carrying more bytes of records
//! than this syncs the txg instead), `zfs_immediate_write_sz` and
//! `zil_maxcopied` (indirect writes, above), `zfs_commit_timeout_pct` (how
//! long an opening round waits for company, above). Log blocks are 4 KiB
//! to 128 KiB (OpenZFS's `zil_maxblocksize`), sized to what the round
//! carries.
//!
//! ## Invariants
//! 1. Records on the lists are in sequence order, each list on its own
//!    (`check_order`).
//! 2. `blocks` holds the written blocks of the chain in chain order, older
//!    chains' first (`check_blocks`).
//! 3. A round acknowledges only when every earlier round is durable:
//!    rounds are placed on the chain and acknowledged in round order
//!    (`plan_in_order` and `finish_round` wait for the round before, and
//!    assert it), and a round is durable only after a flush that started
//!    after its write completed (`make_durable`). So a block is
//!    acknowledged only when every earlier block of its chain is durable.
//! 4. Rounds in flight are those started and not acknowledged, at most
//!    `ROUNDS_IN_FLIGHT_MAX` (`open_round` asserts it); `flights` holds
//!    the placed ones in round order.
//! 5. A block an indirect record names is owned by exactly one of: the
//!    dirty record of its txg (until that txg's sync adopts or frees it),
//!    or, after a crash, the chain that claimed it (`object/prewrite.rs`,
//!    `indirect.rs`); the pool checker finds no leak once they are gone.

mod chain;
mod commit;
mod indirect;
mod log;

pub use indirect::WritePolicy;
pub use log::{Itx, LogSource, Zil, ZilStats};
