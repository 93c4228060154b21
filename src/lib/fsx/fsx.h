/* File transfer core: safe opens beneath a directory fd, staging host trees
 * into the sandbox's /input, tree signatures, capture of /output, clearing.
 *
 * Every function here walks untrusted trees through directory fds only: it
 * never builds a path string and resolves it again later, never follows a
 * symlink, and checks the type and identity of what it opened on the open fd.
 */
#ifndef AIRLOCK_FSX_H
#define AIRLOCK_FSX_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "airlock.h"

/* Opens relpath beneath dirfd without following any symlink or magic link in
 * any component and without leaving the tree ("..", absolute paths refused).
 * Uses openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS) and
 * falls back to a component-by-component O_NOFOLLOW walk when the kernel
 * answers ENOSYS (or when fsx_force_fallback is set). O_CLOEXEC is added.
 * Returns the fd or -errno (-ELOOP for a symlink, -EXDEV for an escape). */
int fsx_open_beneath(int dirfd, const char *relpath, int flags, mode_t mode);

/* Test knob: when true, fsx_open_beneath never tries openat2. */
extern bool fsx_force_fallback;

/* Normalises a mount path (--mount HOST:PATH): trim white space, '\' to '/',
 * drop empty and "." parts and one leading "input" part; ".." anywhere is an
 * error, and so is nothing left. On success *ret is a malloc'd relative path
 * like "data/x.csv" (never empty, no leading '/'). */
int fsx_normalize_mount_path(const char *in, char **ret, airlock_error *err);

/* Caps. Zero means zero (nothing allowed), except max_file. Depth counts
 * directories: the root is 0, its subdirectories 1; a directory deeper than
 * max_depth is refused ("too deep"). Walks hold one directory fd per level
 * (staging two), so a depth cap above the fd limit ends in a clean -EMFILE. */
typedef struct fsx_limits {
        uint64_t max_bytes; /* total bytes of regular files (by st_size) */
        uint64_t max_files; /* staging: entries of every kind, all sources together;
                               capture: regular files returned */
        uint32_t max_depth; /* directory depth below the root */
        uint64_t max_file;  /* one file (capture only; 0: no separate cap) */
} fsx_limits;

typedef struct fsx_source {
        const char *host_path; /* the workspace directory, or a mount's file or directory */
        const char *dest;      /* normalised destination; NULL for the workspace */
} fsx_source;

typedef struct fsx_stage_stats {
        uint64_t files, dirs, bytes, skipped;
        uint64_t reused; /* of files: hard links to the previous staged copy (fsx_stage_reuse) */
} fsx_stage_stats;

/* Stages sources into the empty directory dest_dirfd: the workspace's
 * children first (sources with dest NULL, whatever their place in the
 * array), then each mount in order at its dest (normalised again here with
 * fsx_normalize_mount_path, so ".." can never leave dest_dirfd; missing
 * parents are created 0755). Entries are created relative to destination
 * directory fds with O_EXCL|O_NOFOLLOW. Errors: -ELOOP symlink (the message
 * and err->path name it), -EFBIG too large (checked by st_size before any
 * copy), -E2BIG too many files, -ENAMETOOLONG too deep, -EEXIST/-ENOTDIR
 * collisions, -ESTALE an entry changed type or identity while staged. What
 * was copied before an error stays in dest_dirfd for the caller to remove.
 * Any symlink anywhere fails the whole staging with an error naming its path;
 * sockets, FIFOs and devices are skipped; mount points inside a tree are not
 * crossed; collisions between sources are errors. Files are copied from the
 * fd whose type and identity were checked, with mode (plus u+r, and u+rx on
 * directories) and times kept. When owner is not (uid_t)-1 every created
 * entry is chowned to owner:group. Caps in lim are clear errors. */
int fsx_stage(int dest_dirfd, const fsx_source *sources, size_t n_sources, const fsx_limits *lim,
              uid_t owner, gid_t group, fsx_stage_stats *ret_stats, airlock_error *err);

typedef struct fsx_manifest fsx_manifest;

/* The staging area of a sandbox: a private directory (mode 0700, named
 * "airlock-stage-XXXXXX" with random X's) made in a directory the caller
 * chose, whose subdirectory "input" holds the staged tree. */
typedef struct fsx_staging {
        int parent_fd; /* the directory it was made in, or -1 */
        char *name;    /* its name there, for removal */
} fsx_staging;

/* Makes a staging area in the directory parent and stages sources into its
 * "input" (0755, chowned to owner:group unless owner is (uid_t)-1) with
 * fsx_stage_reuse, the same caps and errors: prev_fd (or -1) and prev (or
 * NULL) are the staged tree and the manifest of a previous staging, whose
 * unchanged files are hard links instead of copies; *ret_manifest (when
 * ret_manifest is not NULL; NULL when nothing was staged) receives this
 * staging's manifest, for the next one. On success *ret_staging describes
 * the area, for fsx_staging_remove, and *ret_fd is an O_RDONLY|O_DIRECTORY
 * fd of the staged tree (both -1, and nothing made, when n_sources is 0).
 * On failure whatever was made is removed and both are left untouched. */
int fsx_staging_create(const char *parent, const fsx_source *sources, size_t n_sources,
                       const fsx_limits *lim, uid_t owner, gid_t group, int prev_fd,
                       const fsx_manifest *prev, fsx_staging *ret_staging, int *ret_fd,
                       fsx_manifest **ret_manifest, airlock_error *err);

/* A staging area as fsx_staging_create makes it, with an empty "input"
 * (a layer that fsx_stage_delta fills). */
int fsx_staging_create_empty(const char *parent, uid_t owner, gid_t group, fsx_staging *ret_staging,
                             int *ret_fd, airlock_error *err);

/* Removes the staging area and everything in it, as fsx_remove_at does,
 * even when no fd is left to walk it with (then only while it is still
 * empty), and resets *staging. Nothing to do for one never made. */
void fsx_staging_remove(fsx_staging *staging);

#define FSX_SIGNATURE_HEX 33 /* 128-bit digest as hex, NUL included */

/* Signature of the tree at host_path (file or directory), for cache staleness:
 * the same walk, refusals and caps as fsx_stage (the same errors), over
 * relative path, type and mode, size, mtime in ns and inode of every file and
 * directory staging would copy, and the content hash of every file under
 * content_threshold bytes (so a same-size edit within one mtime tick shows).
 * The hash is fsx's own 128-bit non-cryptographic one, not for security.
 * ret_hex receives 32 hex digits. */
int fsx_tree_signature(const char *host_path, const fsx_limits *lim, uint64_t content_threshold,
                       char ret_hex[FSX_SIGNATURE_HEX], airlock_error *err);

/* ---- hooks for change detection (fsx/fsx_watch.c) ---- */

/* Called by fsx_tree_signature_hooked for the root (is_root, a file or a
 * directory) and for every directory the walk enters, with the checked fd
 * the walk holds (opened beneath its parent with no link followed, on the
 * root's device), before the directory is listed. The fd stays the walk's.
 * Returns the watch descriptor set on it, or -1. */
/* stop (may be NULL): once set, the walk gives up at its next entry with
 * -ECANCELED (a background walk whose owner is closing). */
typedef struct fsx_sig_hook {
        int (*entered)(void *ctx, int fd, const struct stat *st, bool is_root);
        void *ctx;
        const atomic_bool *stop;
} fsx_sig_hook;

/* A tree's signature is a hash over one digest per directory, in the walk's
 * order: the directory's relative path, type, mode, size, mtime and inode,
 * then the name, metadata and (under the threshold) content hash of each of
 * its own regular files. So a directory whose files changed can be signed
 * again alone (fsx_tree_signature_update), and the result is the one a full
 * walk gives. The state of one walk: */
/* A file of a directory, as its signature read it: the identity its
 * checked fd showed and the hash of its content (files under the content
 * threshold only). */
typedef struct fsx_sig_file {
        char *name;
        ino_t ino;
        off_t size;
        struct timespec mtim, ctim;
        char hex[33]; /* "" for a file the signature does not read (hashed false) */
        mode_t mode;
        bool hashed; /* under the content threshold: hex is its content's hash */
} fsx_sig_file;

typedef struct fsx_sig_dir {
        char *rel; /* below the root, "" for the root itself */
        dev_t dev; /* identity of the directory when it was signed */
        ino_t ino;
        int wd;              /* the hook's watch descriptor, or -1 */
        uint64_t bytes;      /* of its own regular files */
        uint64_t listed;     /* its own entries, as the walk's listing counts them */
        char hex[33];        /* its digest */
        fsx_sig_file *files; /* its regular files in the walk's order, in a kept state */
        size_t n_files, cap_files;
        /* Its own metadata as the walk saw it (what its digest starts with,
         * and what the shared walk's metadata digest holds of it). */
        mode_t mode;
        off_t size;
        struct timespec mtim, ctim;
} fsx_sig_dir;

typedef struct fsx_sig_state {
        fsx_sig_dir *dirs; /* the walk's order: the root first, parents before children */
        size_t n, cap;
        uint64_t bytes, listed; /* totals, checked against the caps */
        bool is_dir;            /* the root is a directory (a file has no dirs) */
} fsx_sig_state;

void fsx_sig_state_free(fsx_sig_state *s);

/* fsx_tree_signature, calling hook as it goes (hook may be NULL), and
 * filling *state (may be NULL; freed and reset first) for later updates. */
int fsx_tree_signature_hooked(const char *host_path, const fsx_limits *lim,
                              uint64_t content_threshold, const fsx_sig_hook *hook,
                              fsx_sig_state *state, char ret_hex[FSX_SIGNATURE_HEX],
                              airlock_error *err);

/* Contract: signs again only the directories dirs[idx[0..n-1]] of *state
 * (a directory tree's), reopened beneath root_fd (the tree's root, as the
 * walk opened it) with no link followed, each required to be the directory
 * recorded (dev, ino), listed alone (their subdirectories keep their
 * digests), and puts the tree's signature in ret_hex. Returns 0 when done;
 * 1 when this cannot stand for a full walk (a directory moved, anything
 * refused or over a cap, any error: a full walk then gives the exact
 * error), with *state unchanged. Changes to which subdirectories exist are
 * the caller's to detect (they need a full walk). */
int fsx_tree_signature_update(int root_fd, fsx_sig_state *state, const size_t *idx, size_t n,
                              const fsx_limits *lim, uint64_t content_threshold,
                              char ret_hex[FSX_SIGNATURE_HEX]);

/* A file a writer changed, as the writer tells it (the MCP server's
 * workspace tools, through the tenant's generation record): its path below
 * the root, whether it was removed, and otherwise its size and the hash of
 * its content as the signature takes it (fsx_content_hash; "" over the
 * content threshold). */
typedef struct fsx_file_change {
        const char *rel;
        bool removed;
        uint64_t size;
        char hex[33];
} fsx_file_change;

/* The content hash the tree signature takes of a small file's bytes. */
void fsx_content_hash(const void *data, size_t len, char ret_hex[33]);

/* Contract: brings *state (a directory tree's, with its files kept) to
 * the tree after the changes v[0..n-1], reading only the files named:
 * each parent folder is reopened beneath root_fd with no link followed and
 * must be the one recorded (dev, ino); a removed file must be gone; any
 * other is opened with O_NOFOLLOW, must be a regular file on the root's
 * device with the size told, and, under the content threshold, its bytes
 * must hash to the hex told (else it is not the writer's version: a
 * change behind the writer's back). Each folder's digest is then made
 * again from its kept records and its own metadata, without listing it.
 * Returns 0 with ret_hex the tree's signature; 1 when this cannot stand
 * for a walk (any mismatch, a folder not in the state, a cap passed, an
 * error), with *state unchanged. */
struct fsx_hashes;
/* ret_kept (may be NULL): on success, the bytes read of the written files
 * (those under the content threshold, up to FSX_KEPT_MAX bytes in all), as
 * fsx_hashes' kept files, for staging this very version without reading
 * them again; untouched on failure. */
int fsx_tree_signature_files(int root_fd, fsx_sig_state *state, const fsx_file_change *v, size_t n,
                             const fsx_limits *lim, uint64_t content_threshold,
                             char ret_hex[FSX_SIGNATURE_HEX], struct fsx_hashes *ret_kept);

/* Whether fd is on a network or FUSE file system (NFS, SMB, CephFS, FUSE
 * such as GlusterFS's client, 9p, AFS, GFS2, OCFS2, GPFS, Lustre, ...):
 * one whose times another machine's clock may set, and whose other
 * clients' changes this kernel's inotify never reports. True also when
 * fstatfs fails (no proof). *ret_name (may be NULL): its short name. */
bool fsx_remote_fs(int fd, const char **ret_name);

/* Content hashes a signature walk took (fsx_watch_hashes), by the file's
 * path below the tree's root, sorted by it: what staging compares a copy
 * with instead of reading the source a second time (fsx_stage_delta). */
/* A file a signature read whole (a told file, fsx_tree_signature_files):
 * its record (name: the path below the root) and its bytes as read, which
 * are the version signed. */
typedef struct fsx_kept_file {
        fsx_sig_file rec;
        void *data; /* rec.size bytes */
} fsx_kept_file;

/* Bytes of told files kept for staging, in all. */
#define FSX_KEPT_MAX (1u << 20)

typedef struct fsx_hashes {
        fsx_sig_file *v; /* name: the path below the root */
        size_t n;
        fsx_kept_file *kept; /* some files with their bytes (at most FSX_KEPT_MAX) */
        size_t n_kept;
} fsx_hashes;

void fsx_hashes_free(fsx_hashes *h);
/* The record of path, or NULL. */
const fsx_sig_file *fsx_hashes_find(const fsx_hashes *h, const char *path);
/* The kept file path, or NULL. */
const fsx_kept_file *fsx_hashes_kept(const fsx_hashes *h, const char *path);
/* Adds a copy of k to h's kept files, unless they would pass FSX_KEPT_MAX:
 * 0, or -1 (h unchanged). */
int fsx_hashes_keep(fsx_hashes *h, const fsx_sig_file *rec, const char *path, const void *data);
/* Adds the files of state's directory k (paths made from its rel) to h,
 * unsorted. 0 or -ENOMEM. */
int fsx_hashes_add_dir(fsx_hashes *h, const fsx_sig_state *state, size_t k);
void fsx_hashes_sort(fsx_hashes *h);

/* ---- cheap rebuilds (fsx_stage.c) ---- */

/* What one staging copied: for every regular file staged, its /input path,
 * the identity of its source (dev, ino, size, mtime, ctime, mode) and of the
 * copy (dev, ino), and whether that identity is racy (a ctime within 3 s of
 * the staging's start, or a network or FUSE file system: the bytes must be
 * compared before reuse). Bounded by the staging caps (about 100 bytes a
 * file). */
void fsx_manifest_free(fsx_manifest *m);
size_t fsx_manifest_count(const fsx_manifest *m);

/* fsx_stage, reusing the previous staged copy: a file whose source has the
 * identity recorded in prev (the manifest of the staging into prev_dirfd)
 * and whose previous copy is still the recorded inode, with the same size
 * (and, when the record is racy and the file under 64 KiB, the same bytes as
 * the source), is a hard link to that copy instead of a new copy; an
 * unchanged file with a record that is not racy is linked without being
 * opened (after an lstat of its name). Everything else is staged exactly as
 * fsx_stage does (same walk, same refusals, same errors). prev_dirfd -1 or
 * prev NULL: no reuse. ret_manifest (may be NULL) receives the manifest of
 * this staging, for the next one. Never links into a source tree. See the
 * contract comment above reuse_previous() for why a link is safe. */
int fsx_stage_reuse(int dest_dirfd, const fsx_source *sources, size_t n_sources,
                    const fsx_limits *lim, uid_t owner, gid_t group, int prev_dirfd,
                    const fsx_manifest *prev, fsx_manifest **ret_manifest,
                    fsx_stage_stats *ret_stats, airlock_error *err);

/* Contract: updates dest_dirfd, the staged copy that prev describes (the
 * manifest of the staging that filled it), where it stands, into a staging
 * of the one workspace source (dest NULL; mounts are refused -EINVAL): the
 * same walk, refusals, caps and errors as fsx_stage. An unchanged file (the
 * rules of fsx_stage_reuse, checked on the copy's name instead of a new
 * link) is kept as it is; a changed one is replaced by a new copy; entries
 * of the copy that the source no longer has (or now skips) are removed;
 * directories get their mode and times again. The caller must own the copy
 * exclusively: nothing may read it while it is updated (fsx_staging_take).
 * On error the copy is half updated, and must be removed. */
int fsx_stage_update(int dest_dirfd, const fsx_source *source, const fsx_limits *lim, uid_t owner,
                     gid_t group, const fsx_manifest *prev, fsx_manifest **ret_manifest,
                     fsx_stage_stats *ret_stats, airlock_error *err);

/* Contract: the next version of a staged workspace, made by bringing only
 * the directories dirs (paths below host_path, "" for its root; those whose
 * files changed since prev's staging, as fsx_watch_delta reports them) up
 * to the source, into top_fd: either prev's own tree, updated where it
 * stands (no lower layers; the caller must own it exclusively, as for
 * fsx_stage_update), or the top layer of an overlay over the n_lower trees
 * lower (the nearest first; only read): missing directories are made in it
 * and a removed file is hidden by a whiteout, a 0/0 character device. A
 * file whose source has its recorded identity is left where it is (when
 * the record is racy and the file under 64 KiB, only if its bytes equal
 * those of the recorded copy, found in the layers); any other is copied;
 * a recorded file that is gone is removed. Every path in the source is
 * opened beneath its root with no link followed (fsx_open_beneath), every
 * path in top_fd one component at a time with O_NOFOLLOW. Returns 0 with
 * *ret_manifest the new version's manifest and *ret_stats what was copied;
 * 1 when only a full staging can make this version (a link, a special file,
 * a directory that appeared, a cap passed, anything unexpected: the full
 * staging then gives the exact error), leaving top_fd for the caller to
 * update fully or remove; or -errno with err filled. known (may be NULL):
 * the content hashes the signature of this very version took of files of
 * dirs; a record that must be compared and whose file shows the identity
 * known records is compared with that hash (its copy read and hashed, on
 * this machine's disk) instead of the source's bytes, so that a file the
 * signature read is not read again from a network file system. files
 * (paths below host_path; may be NULL): files that changed alone in their
 * directories (a change told file by file, fsx_watch_delta): each is
 * brought up to its source by itself (copied, or removed and hidden by a
 * whiteout when gone), its directory neither listed nor its other entries
 * looked at; one in a directory of dirs is left to that directory's. */
int fsx_stage_delta(int top_fd, const int *lower, size_t n_lower, const char *host_path,
                    const char *const *dirs, size_t n_dirs, const char *const *files,
                    size_t n_files, const fsx_hashes *known, const fsx_limits *lim, uid_t owner,
                    gid_t group, const fsx_manifest *prev, fsx_manifest **ret_manifest,
                    fsx_stage_stats *ret_stats, airlock_error *err);

/* fsx_staging_create for one workspace source, by taking over the staging
 * area *prev (reset to "none", so that its owner removes nothing) and
 * updating its tree in place with fsx_stage_update against prev_manifest.
 * For a caller that replaces the staging's only user, when no run can read
 * that tree any more (sbx_sandbox_new_from with a yielded prev). On failure
 * the taken area is removed. */
int fsx_staging_take(fsx_staging *prev, const fsx_source *source, const fsx_limits *lim,
                     uid_t owner, gid_t group, const fsx_manifest *prev_manifest,
                     fsx_staging *ret_staging, int *ret_fd, fsx_manifest **ret_manifest,
                     fsx_stage_stats *ret_stats, airlock_error *err);

/* Captures the regular files below out_dirfd (the run's /output, after every
 * guest process has ended). Links and non-regular files are refused and never
 * followed or opened in a way that can block; caps per file, total, count and
 * depth; names that are not UTF-8 refused; a file that changes while read is
 * refused; an entry the host may not open is refused "unreadable" (a guest
 * can chmod 000 its files) rather than failing the capture. Files are sorted by path, paths are
 * "/output/...", media types come from fsx_media_type. The refusal list is capped at 100 entries
 * plus one (path "/output", reason "N more refused (list capped at 100)"). Host memory is bounded
 * by the caps: at most 4 * max_files + 1024 entries are listed, then the directory being listed is
 * refused "too many files" and no further directory is entered. Out-params untouched on failure. */
int fsx_capture(int out_dirfd, const fsx_limits *lim, airlock_file **ret_files, size_t *ret_n_files,
                airlock_refusal **ret_refused, size_t *ret_n_refused, airlock_error *err);

/* Lists what a run changed under a writable /input, from upper_fd (the
 * upper dir of the run's overlay, after every guest process has ended) and
 * lower_fd (the staged tree below it; -1: none). Regular files of the upper
 * dir are created, or modified when they shadow a lower regular file with
 * other bytes (copied up and left as they were: no change); overlay
 * whiteouts (0/0 character devices) and opaque directories are deletions of
 * the lower entry, and so is a link or special file made in its place (which
 * is refused, as every link and special file is). The walk, the caps (deletions count as files),
 * the refusals (links, FIFOs, other special files: never followed or opened in a way that can
 * block) and the reading of each file are fsx_capture's; paths are "/input/...". Out-params
 * untouched on failure. Free the array with fsx_changes_free. */
int fsx_capture_changes(int upper_fd, int lower_fd, const fsx_limits *lim,
                        airlock_input_change **ret, size_t *ret_n, airlock_refusal **ret_refused,
                        size_t *ret_n_refused, airlock_error *err);
void fsx_changes_free(airlock_input_change *changes, size_t n);

/* Media type of a file name from /etc/mime.types (read once, thread-safe),
 * else "application/octet-stream". Never NULL. */
const char *fsx_media_type(const char *name);

/* Empties the directory dirfd: unlinks links without touching their targets,
 * removes FIFOs, sockets and devices without opening them, and directories of
 * any depth without recursion and with at most 65 directory fds open (deeper
 * directories are first moved up into dirfd under ".airlock-clear.N").
 * Never descends into another file system (a mount point fails -EBUSY).
 * Continues past entries it cannot remove and reports the first error at the
 * end. Error messages and paths are valid UTF-8, as for every function here. */
int fsx_clear_dir(int dirfd, airlock_error *err);

/* Removes the entry name (a single component) in parentfd, whatever it is,
 * as fsx_clear_dir does. A missing entry is not an error. */
int fsx_remove_at(int parentfd, const char *name, airlock_error *err);

/* Frees capture results. The paths, media types and data of all captured
 * files share one mapping, recorded past the last element, so free them
 * only with fsx_files_free (never field by field). */
void fsx_files_free(airlock_file *files, size_t n);
void fsx_refused_free(airlock_refusal *refused, size_t n);

#endif
