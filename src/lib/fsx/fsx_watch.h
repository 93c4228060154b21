/* Change detection for the trees of a workspace and its mounts: inotify
 * watches kept between calls, so that asking "did anything change?" costs a
 * non-blocking read and one lstat per tree instead of a walk of every file.
 *
 * A full signature walk (fsx_tree_signature) is made when events arrived,
 * when the event queue overflowed, when the watches could not all be set
 * (then at every call, as before this module), and at least once per safety
 * period, for what inotify cannot see. */
#ifndef AIRLOCK_FSX_WATCH_H
#define AIRLOCK_FSX_WATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "airlock.h"
#include "fsx/fsx.h"

/* Watches one tree set may hold (one per directory, one for a file mount).
 * A set of trees with more directories falls back to a walk per call. The
 * kernel keeps about 1 KiB per watch, so this bounds the state at ~8 MiB. */
#define FSX_WATCH_MAX_DEFAULT 8192u
/* The safety net: a full walk at least this often, whatever the events. On
 * shared storage the period is at least ten times the last full walk's
 * duration, so that a large tree's walk, paid for by a call, takes at most
 * a tenth of the time. */
#define FSX_WATCH_PERIOD_NS (10ull * 1000000000ull)
/* Trees on shared storage (a network or FUSE file system, fsx_remote_fs),
 * whose other clients' changes inotify never reports, are walked at every
 * call while they hold at most this many entries (files, folders and the
 * roots, every tree of the set): the shared walk cap. A larger set relies
 * on fsx_watch_invalidate and the safety walk for other machines' changes. */
#define FSX_SHARED_WALK_MAX 1000u

/* The background walk (fsx_watch_background) of a tree set on shared
 * storage within the shared walk cap is due this long after the last one
 * ended, or ten times that walk's duration when longer; above the cap, at
 * the safety period. A call answers from the last walk's state while that
 * walk began at most one period plus two walks and FSX_BG_SLACK_NS ago
 * (or a walk is running); past that the call walks itself. */
#define FSX_BG_PERIOD_NS (1000000000ull)
#define FSX_BG_SLACK_NS  (1000000000ull)

typedef struct fsx_watch fsx_watch;

typedef struct fsx_watch_info {
        bool active;          /* the last walk set every watch: calls check events */
        unsigned watches;     /* watches held now */
        unsigned max_watches; /* the cap */
        uint64_t period_ns;   /* the safety-net period */
        uint64_t walks;       /* full signature walks so far */
        uint64_t checks;      /* calls answered from the events, without a walk */
        uint64_t partial;     /* calls that signed again only the directories whose
                                 files events named (neither a walk nor a check) */
        char reason[512];     /* why watches are not in use (empty when active), or
                                 why another machine's change may be seen late */
        bool shared;          /* a tree is on shared storage (fsx_remote_fs) */
        bool shared_walk;     /* ... and every call walks the trees (within the cap) */
        uint64_t shared_max;  /* the shared walk cap */
        uint64_t entries;     /* entries the last walk listed */
        bool background;      /* a background walker checks the trees for calls */
        uint64_t bg_walks;    /* background walks begun */
} fsx_watch_info;

/* A watcher for the n trees at paths (the workspace first, then the mounts'
 * host paths), signed with lim and content_threshold as fsx_tree_signature
 * does. Nothing is opened before the first fsx_watch_signatures. */
int fsx_watch_new(const char *const *paths, size_t n, const fsx_limits *lim,
                  uint64_t content_threshold, fsx_watch **ret, airlock_error *err);

/* Lowers the cap on watches (0 keeps it) and sets the safety period (0
 * keeps it): for tests, and for callers that want a smaller footprint. */
void fsx_watch_set_knobs(fsx_watch *w, unsigned max_watches, uint64_t period_ns);

/* The signature of every tree, in the order of paths, into ret_hex[0..n-1]:
 * the same values fsx_tree_signature gives for the trees as they are now,
 * either from the last walk (no event since, watches complete, the root
 * paths still name the same inodes, within the period), or from the last
 * walk with only the directories that events named signed again (events
 * that name files and metadata only; a directory created, deleted or moved,
 * a watch lost, an overflow or anything unusual makes a full walk), or from
 * a new walk that also sets the watches again. Errors are those of the
 * walk; after an error the next call walks again. *ret_walked (may be NULL)
 * is false when nothing was read again.
 * Thread-safe: calls on one watcher are serialised. */
int fsx_watch_signatures(fsx_watch *w, char (*ret_hex)[FSX_SIGNATURE_HEX], bool *ret_walked,
                         airlock_error *err);

/* Contract: the directories (paths below the tree's root, "" for the root)
 * whose digests changed between the signatures from and to of a watcher of
 * one tree (a workspace without mounts), when the last changes it saw lead
 * from one to the other (up to 8 consecutive ones) with the same set of
 * directories throughout: 1 with *ret_dirs (malloc'd strings in a malloc'd
 * array) and *ret_n. 0 when it cannot tell (another set of directories, a
 * walk that failed, changes older than that, several trees): the caller
 * then treats everything as changed. The digests are those of the tree
 * signatures, so a directory not named here signs exactly as it did: its
 * own metadata and each of its files' names, identities and (under the
 * content threshold) bytes are unchanged. Thread-safe. */
/* *ret_files: the files (paths below the root) that changed in
 * directories whose other entries did not (a change told file by file,
 * fsx_watch_files_changed); a directory of *ret_dirs was signed again in
 * full, a file of *ret_files alone. Either list may be empty (*ret_dirs is
 * then an empty array, never NULL, when 1 is returned). */
int fsx_watch_delta(fsx_watch *w, const char *from, const char *to, char ***ret_dirs, size_t *ret_n,
                    char ***ret_files, size_t *ret_nf);

/* The content hashes the signature `to` of a watcher of one tree took of
 * the files of the directories dirs (as fsx_watch_delta names them), into
 * *ret, sorted: 0, or -1 (nothing in *ret) when the watcher's last
 * signature is not `to` any more or a directory is not in it. For staging
 * that version (fsx_stage_delta's known). Thread-safe. */
int fsx_watch_hashes(fsx_watch *w, const char *to, const char *const *dirs, size_t n,
                     fsx_hashes *ret);

void fsx_watch_get_info(fsx_watch *w, fsx_watch_info *ret);

/* The next fsx_watch_signatures walks the trees in full, whatever the
 * events say: for a caller that learnt of a change inotify cannot report
 * (another machine's, on shared storage). */
void fsx_watch_invalidate(fsx_watch *w);
/* Contract: the next fsx_watch_signatures signs again the directories
 * dirs[0..n-1] of the first tree (paths below its root, "" for the root)
 * as if events had named their files: a caller that learnt where a change
 * inotify cannot report is (another machine's, whose writer recorded the
 * folders it touched) spares the rest of the tree its walk. Only a watcher
 * whose last walk is complete and still within its safety period does so;
 * a directory its last walk did not find, more than DIRTY_MAX (64) of
 * them, or anything else a partial signing cannot stand for, makes a full
 * walk. What the caller did not name is not read again before the next
 * full walk: the caller must name every directory whose own entries
 * changed, and tell of a directory made or removed with
 * fsx_watch_invalidate. */
void fsx_watch_changed_in(fsx_watch *w, const char *const *dirs, size_t n);
/* Contract: the background walk of a watcher whose trees are on shared
 * storage, for a walker thread of its owner (the cache's), never called
 * by a call. Once fsx_watch_set_background turned it on, a call on such a
 * tree set reads this host's inotify events only, with no lookup on the
 * file system, and answers from the last walk's state, while that state
 * is fresh (see FSX_BG_SLACK_NS); the walker keeps it so. When the walk is
 * due (FSX_BG_PERIOD_NS, or the safety period past the shared walk cap) it
 * takes the metadata digest of the trees (a lookup per entry, no file
 * opened, the roots' identities checked) without the watcher's lock, and
 * when that differs from the one taken before the last full walk, a full
 * walk into a watcher of its own (its own inotify instance), which it
 * takes as the state under the lock unless a call walked in full or was
 * told to meanwhile (then the call's is newer). Directories callers named
 * (fsx_watch_changed_in) while it ran are signed again at the next call. A
 * call never waits for this walk: only for the lock, held to take its
 * result. Returns when the next walk is due (al_now_ns's clock), or
 * UINT64_MAX when the watcher needs none (no background, not shared). */
uint64_t fsx_watch_background(fsx_watch *w);
/* Turns the background walk on (a walker calls fsx_watch_background for
 * this watcher from now on) or off. */
void fsx_watch_set_background(fsx_watch *w, bool on);
/* Makes a background walk running give up at its next entry (its
 * metadata walk and its full walk alike: the full walk's result is then
 * dropped) and none begin: for the owner, which closes the watcher next,
 * and so returns without waiting for the rest of a walk. Lock-free. */
void fsx_watch_stop_background(fsx_watch *w);
/* Whether the last walk found a tree on shared storage. */
bool fsx_watch_shared(fsx_watch *w);
/* The same, file by file: the files v[0..n-1] (their writer's word: its
 * size and content hash, or removed) are the only change in their
 * folders, and no folder was made or removed. The next
 * fsx_watch_signatures reads those files alone (fsx_tree_signature_files);
 * on shared storage it also checks that the tree's metadata is the last
 * walk's but for them and their folders (so that a change behind the
 * writer's back is still seen). Anything that does not match, or more than
 * DIRTY_MAX files, makes a full walk. */
void fsx_watch_files_changed(fsx_watch *w, const fsx_file_change *v, size_t n);
/* Lowers the shared walk cap (FSX_SHARED_WALK_MAX), for tests. */
void fsx_watch_set_shared_max(fsx_watch *w, uint64_t max_entries);

/* Closes the inotify instance (every watch goes with it). NULL is fine. */
void fsx_watch_free(fsx_watch *w);

#endif
