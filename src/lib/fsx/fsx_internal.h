/* Internals shared by the fsx_*.c files: the fd-based tree walker, the
 * refusal reasons, the checked open of a listed file, and the tree hash.
 * Nothing here is part of the public API; unit tests may use it. */
#ifndef AIRLOCK_FSX_INTERNAL_H
#define AIRLOCK_FSX_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "airlock.h"

/* Why an entry was not taken. The text of each is part of the result JSON
 * contract (docs/design.md, "Result JSON"), except FSX_MOUNT_POINT, which only
 * staging sees (it skips mount points) and capture reports as not regular,
 * and FSX_UNREADABLE ("unreadable"): an entry the host may not open (the
 * guest can chmod 000 its own files), refused rather than failing the whole
 * capture. */
typedef enum fsx_reason {
        FSX_SYMLINK,
        FSX_NOT_REGULAR,
        FSX_TOO_LARGE,
        FSX_TOO_MANY,
        FSX_TOO_DEEP,
        FSX_BAD_NAME,
        FSX_CHANGED,
        FSX_MOUNT_POINT,
        FSX_UNREADABLE,
} fsx_reason;

const char *fsx_reason_text(fsx_reason r);

/* One listed entry, as handed to the walk callbacks. */
typedef struct fsx_item {
        int parent_fd;     /* checked directory fd holding the entry */
        void *parent_data; /* what dir_enter returned for the parent (root: root_data) */
        const char *name;  /* entry name, NUL-terminated, raw bytes */
        size_t name_len;
        const char *path; /* display path: prefix + "/" + relative path, raw bytes */
        size_t path_len;
        const char *rel; /* the relative part of path ("a/b/name") */
        size_t rel_len;
        unsigned char d_type; /* DT_* from the listing (DT_UNKNOWN resolved) */
        ino_t ino;            /* inode number from the listing */
        dev_t root_dev;       /* st_dev of the walk's root */
        uint32_t depth;       /* depth of the parent directory; the root is 0 */
        /* The root's file system may hold device nodes another machine
         * made (al_foreign_devices): fsx_open_listed checks a file's type
         * before it opens it, since a device node put in its place between
         * the listing and the open would open this machine's device. */
        bool foreign_devices;
} fsx_item;

typedef struct fsx_walk_ops {
        /* A regular file (as listed). The callback opens it with
         * fsx_open_listed(), which checks type and identity on the fd. */
        int (*file)(void *ctx, const fsx_item *it);
        /* A directory was opened and checked (fd is owned by the walker); the
         * walker enters it next. *ret_data becomes the children's parent_data. */
        int (*dir_enter)(void *ctx, const fsx_item *it, int fd, const struct stat *st,
                         void **ret_data);
        /* Called once for every successful dir_enter, after its children (ok
         * true) or while unwinding after an error (ok false). */
        int (*dir_leave)(void *ctx, void *data, int fd, const struct stat *st, bool ok);
        /* An entry is refused. Return 0 to go on, or a negative errno (with
         * the error filled) to stop the walk. */
        int (*refuse)(void *ctx, const fsx_item *it, fsx_reason r);
} fsx_walk_ops;

typedef struct fsx_walk_opts {
        const char *prefix;   /* display prefix of paths, e.g. "/output" */
        uint32_t max_depth;   /* deepest directory entered; the root is 0 */
        uint64_t max_entries; /* listing budget over *listed: bounds memory */
        uint64_t *listed;     /* running count of listed entries (shared by walks) */
        bool refuse_bad_utf8; /* refuse names that are not UTF-8 (capture) */
        bool no_descend;      /* list the root only: subdirectories are passed over */
} fsx_walk_opts;

/* Walks the directory root_fd (already opened and checked by the caller; not
 * closed) without recursion: an explicit heap stack holds one directory fd
 * per level, so depth is bounded by max_depth (then FSX_TOO_DEEP), never by
 * the C stack. Every directory is listed with getdents64 on its fd, sorted
 * so that files come in byte order of their full paths, and entered only
 * after opening it O_NOFOLLOW|O_DIRECTORY and checking on the fd that it is
 * a directory, the listed inode and on the root's device. Links, special
 * files, mount points, entries past the caps and (optionally) non-UTF-8
 * names go to ops->refuse; nothing is ever followed. */
int fsx_walk(int root_fd, const struct stat *root_st, void *root_data, const fsx_walk_opts *opts,
             const fsx_walk_ops *ops, void *ctx, airlock_error *err);

/* Opens the listed regular file it (read-only, O_NOFOLLOW|O_NONBLOCK|
 * O_NOCTTY, so nothing is followed and nothing blocks) and checks on the
 * open fd that it is a regular file, is the inode that was listed and lies on
 * the root's device. Returns the fd with *ret_st filled; or -EAGAIN with
 * *ret_reason set when the entry must be refused; -ENOENT when it vanished;
 * another -errno on error. */
int fsx_open_listed(const fsx_item *it, struct stat *ret_st, fsx_reason *ret_reason);

/* The error that staging and tree signatures give for an entry the walk
 * refused with r (other than the skipped kinds): the same walk must fail
 * the same way in both. */
int fsx_stage_refusal(const fsx_item *it, fsx_reason r, const fsx_limits *lim, airlock_error *err);

/* Makes err's message and path valid UTF-8 (bad bytes become U+FFFD, a
 * sequence cut by the buffer's end is dropped): errors name paths from
 * untrusted trees, and they end up in JSON. Returns code, for tail calls. */
int fsx_error_utf8(airlock_error *err, int code);

/* 128-bit non-cryptographic hash: two independent 64-bit lanes, for cache
 * staleness only (never for security decisions). */
typedef struct fsx_hash {
        uint64_t a, b, len;
} fsx_hash;

/* Whether the size bytes of fd hash (as the tree signature hashes a small
 * file's content) to hex. */
bool fsx_content_hash_is(int fd, uint64_t size, const char hex[33]);
/* Test hook: every walk takes its root's file system as one that may hold
 * device nodes another machine made (fsx_item.foreign_devices). */
extern bool fsx_force_foreign_devices;
void fsx_hash_init(fsx_hash *h);
void fsx_hash_update(fsx_hash *h, const void *data, size_t len);
void fsx_hash_u64(fsx_hash *h, uint64_t v);
void fsx_hash_final(const fsx_hash *h, char ret_hex[33]);

/* Test hook: called by capture after a file was opened and checked and
 * before its bytes are read; lets tests grow a file "while" it is read. */
extern void (*fsx_capture_read_hook)(int fd, const char *path);

/* Test hook: called by staging for each listed file before it is looked at
 * (parent_fd is the source directory); lets tests replace a file between
 * its listing and its open. */
extern void (*fsx_stage_file_hook)(int parent_fd, const char *name);

/* The refusal list is capped at this many entries, then one more entry says
 * how many others were refused. */
#define FSX_REFUSED_MAX 100

#endif
