/* Capture of the run's /output: every regular file, read through a checked
 * fd, and every other entry listed as refused with its reason. The same
 * capture, walking the upper dir of a writable /input's overlay, lists what
 * a run created, modified and deleted there (fsx_capture_changes). */
#include "fsx/fsx.h"
#include "fsx/fsx_internal.h"
#include "core/util.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/* Files larger than this are checked for changes on the fd after reading. */
#define CAPTURE_RECHECK_MIN (64u * 1024)

void (*fsx_capture_read_hook)(int fd, const char *path) = NULL;

/* Captured bytes live in one anonymous mapping, grown with mremap and
 * populated a megabyte at a time (with transparent huge pages where the
 * kernel offers them). Taking page faults one 4 KiB page at a time was the
 * largest single cost of capturing many small files (on a virtual machine
 * more than the system calls); a mapping also gives the memory back whole.
 * Entries hold offsets while the mapping may still move. */
#define ARENA_MIN      (2u << 20)
#define ARENA_POPULATE (1u << 20)

typedef struct arena {
        char *base;
        size_t len, used, populated;
} arena;

typedef struct cap_entry {
        size_t off; /* path, NUL, media type, NUL, padding, data */
        size_t path_len, data_off;
        uint64_t size;
        airlock_change change; /* fsx_capture_changes only */
} cap_entry;

typedef struct capture_ctx {
        const fsx_limits *lim;
        airlock_error *err;
        arena a;
        cap_entry *ents;
        size_t n_files, cap_files;
        uint64_t total;
        airlock_refusal *refused;
        size_t n_refused;
        uint64_t more_refused; /* refusals past FSX_REFUSED_MAX */
        airlock_change change; /* what the file being captured is (changes only) */
} capture_ctx;

static int add_refusal(capture_ctx *c, const char *path, size_t len, const char *reason)
{
        if (c->n_refused >= FSX_REFUSED_MAX) {
                c->more_refused++;
                return 0;
        }
        if (!c->refused) {
                c->refused = calloc(FSX_REFUSED_MAX + 1, sizeof(*c->refused));
                if (!c->refused)
                        return al_error(c->err, -ENOMEM, NULL, "out of memory");
        }
        char *p = al_utf8_sanitize(path, len);
        char *r = strdup(reason);
        if (!p || !r) {
                free(p);
                free(r);
                return al_error(c->err, -ENOMEM, NULL, "out of memory");
        }
        c->refused[c->n_refused++] = (airlock_refusal){.path = p, .reason = r};
        return 0;
}

/* The listing budget bounds host memory whatever the guest left: a few
 * times the file cap, so that refusals past the cap are still reported by
 * name for a while, then one "too many files" refusal for the directory
 * where listing stopped. */
static uint64_t listing_budget(const fsx_limits *lim)
{
        return lim->max_files > (UINT64_MAX - 1024) / 4 ? UINT64_MAX : lim->max_files * 4 + 1024;
}

/* When refusals went past the list's cap, one last entry at root says how
 * many more there were (the list has room for it). */
static int close_refusals(capture_ctx *c, const char *root, airlock_error *err)
{
        if (c->more_refused == 0)
                return 0;
        char msg[96];
        snprintf(msg, sizeof(msg), "%llu more refused (list capped at %d)",
                 (unsigned long long)c->more_refused, FSX_REFUSED_MAX);
        c->refused[c->n_refused].path = strdup(root);
        c->refused[c->n_refused].reason = strdup(msg);
        c->n_refused++;
        if (!c->refused[c->n_refused - 1].path || !c->refused[c->n_refused - 1].reason)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        return 0;
}

static int capture_refuse(void *ctx, const fsx_item *it, fsx_reason r)
{
        return add_refusal(ctx, it->path, it->path_len, fsx_reason_text(r));
}

/* Makes room for need more bytes at a.used. */
static int arena_reserve(arena *a, size_t need)
{
        if (need > SIZE_MAX / 4 - a->used)
                return -ENOMEM;
        size_t want = a->used + need;
        if (want > a->len) {
                size_t len = a->len ? a->len : ARENA_MIN;
                while (len < want)
                        len *= 2;
                void *p = a->base ? mremap(a->base, a->len, len, MREMAP_MAYMOVE)
                                  : mmap(NULL, len, PROT_READ | PROT_WRITE,
                                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                if (p == MAP_FAILED)
                        return -ENOMEM;
                a->base = p;
                a->len = len;
                /* Advice only: without huge pages or MADV_POPULATE_WRITE
                 * (Linux 5.14) the pages simply fault in one by one. */
                (void)madvise(a->base, a->len, MADV_HUGEPAGE);
        }
        if (want > a->populated) {
                size_t end =
                    MIN(a->len, (want + ARENA_POPULATE - 1) / ARENA_POPULATE * ARENA_POPULATE);
                (void)madvise(a->base + a->populated, end - a->populated, MADV_POPULATE_WRITE);
                a->populated = end;
        }
        return 0;
}

static bool same_file_state(const struct stat *a, const struct stat *b)
{
        return a->st_size == b->st_size && a->st_mtim.tv_sec == b->st_mtim.tv_sec &&
               a->st_mtim.tv_nsec == b->st_mtim.tv_nsec && a->st_ctim.tv_sec == b->st_ctim.tv_sec &&
               a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

/* Reads one listed file through the fd whose type, inode and device were
 * checked (fsx_open_listed: O_NOFOLLOW|O_NONBLOCK, so a link is never
 * followed and a FIFO never blocks). Memory use is bounded by the caps: the
 * size is checked against them before any byte is read, and at most
 * st_size + 1 bytes are read; more or fewer than st_size (or, for a large
 * file, a different size or time on the fd afterwards) means the file
 * changed, and it is refused. */
static int capture_file(void *ctx, const fsx_item *it)
{
        capture_ctx *c = ctx;
        if (c->n_files >= c->lim->max_files)
                return capture_refuse(c, it, FSX_TOO_MANY);

        struct stat st;
        fsx_reason reason = FSX_CHANGED;
        _cleanup_close_ int fd = fsx_open_listed(it, &st, &reason);
        if (fd == -EAGAIN)
                return capture_refuse(c, it, reason);
        if (fd == -ENOENT)
                return 0;
        if (fd == -EACCES || fd == -EPERM)
                return capture_refuse(c, it, FSX_UNREADABLE);
        if (fd < 0)
                return al_error(c->err, fd, it->path, "cannot open %s: %s", it->path,
                                strerror(-fd));

        uint64_t size = (uint64_t)st.st_size;
        if ((c->lim->max_file && size > c->lim->max_file) || size > c->lim->max_bytes ||
            size > c->lim->max_bytes - c->total)
                return capture_refuse(c, it, FSX_TOO_LARGE);

        /* One block per file in the arena: the path, the media type, then
         * the data (one byte more is read, to see growth). */
        const char *type = fsx_media_type(it->name);
        size_t type_len = strlen(type);
        size_t head = it->path_len + 1 + type_len + 1;
        size_t pad = (16 - head % 16) % 16;
        if (size > SIZE_MAX / 4)
                return capture_refuse(c, it, FSX_TOO_LARGE);
        if (arena_reserve(&c->a, head + pad + size + 1) < 0)
                return al_error(c->err, -ENOMEM, it->path, "out of memory reading %s", it->path);
        char *block = c->a.base + c->a.used;
        unsigned char *data = (unsigned char *)block + head + pad;

        /* Ask for one byte more than the size: a regular file that returns
         * exactly st_size bytes in one read is at its end, so a small file
         * takes one read. More bytes than st_size or fewer mean it changed
         * since it was checked. A file big enough for its read to take a
         * while is also checked on the fd afterwards (size, mtime, ctime);
         * for a small one that would add a system call per file to catch
         * only a same-size rewrite inside one read, within one clock tick,
         * after every guest process has ended. */
        if (fsx_capture_read_hook)
                fsx_capture_read_hook(fd, it->path);
        uint64_t got = 0;
        while (got <= size) {
                ssize_t n = read(fd, data + got, (size_t)MIN(size + 1 - got, 1u << 30));
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return al_error(c->err, -errno, it->path, "cannot read %s: %s", it->path,
                                        strerror(errno));
                }
                if (n == 0)
                        break;
                got += (uint64_t)n;
                if (got == size)
                        break;
        }
        if (got != size)
                return capture_refuse(c, it, FSX_CHANGED);
        struct stat after;
        if (size > CAPTURE_RECHECK_MIN && (fstat(fd, &after) < 0 || !same_file_state(&st, &after)))
                return capture_refuse(c, it, FSX_CHANGED);

        if (c->n_files == c->cap_files) {
                size_t nc = c->cap_files ? c->cap_files * 2 : 64;
                cap_entry *ne = realloc(c->ents, nc * sizeof(*ne));
                if (!ne)
                        return al_error(c->err, -ENOMEM, NULL, "out of memory");
                c->ents = ne;
                c->cap_files = nc;
        }
        memcpy(block, it->path, it->path_len);
        block[it->path_len] = '\0';
        memcpy(block + it->path_len + 1, type, type_len + 1);
        c->ents[c->n_files++] = (cap_entry){.off = c->a.used,
                                            .path_len = it->path_len,
                                            .data_off = head + pad,
                                            .size = size,
                                            .change = c->change};
        c->a.used += head + pad + size;
        c->total += size;
        return 0;
}

/* ---- changes under a writable /input ---------------------------------- */

/* The lower directory (the staged copy, as the overlay saw it) matching the
 * upper directory being walked; NULL as parent_data where there is none (a
 * directory the run created, or an opaque one). */
typedef struct lower_dir {
        int fd;
} lower_dir;

static int grow_entries(capture_ctx *c)
{
        if (c->n_files < c->cap_files)
                return 0;
        size_t nc = c->cap_files ? c->cap_files * 2 : 64;
        cap_entry *ne = realloc(c->ents, nc * sizeof(*ne));
        if (!ne)
                return al_error(c->err, -ENOMEM, NULL, "out of memory");
        c->ents = ne;
        c->cap_files = nc;
        return 0;
}

/* Records a deletion of path (no data): counted against the file cap, like
 * a captured file, so that a run cannot grow the list without bound. */
static int add_deleted(capture_ctx *c, const fsx_item *it)
{
        if (c->n_files >= c->lim->max_files)
                return capture_refuse(c, it, FSX_TOO_MANY);
        size_t head = it->path_len + 2;
        if (arena_reserve(&c->a, head) < 0 || grow_entries(c) < 0)
                return al_error(c->err, -ENOMEM, it->path, "out of memory");
        char *block = c->a.base + c->a.used;
        memcpy(block, it->path, it->path_len);
        block[it->path_len] = '\0';
        block[it->path_len + 1] = '\0';
        c->ents[c->n_files++] = (cap_entry){.off = c->a.used,
                                            .path_len = it->path_len,
                                            .data_off = head,
                                            .size = 0,
                                            .change = AIRLOCK_CHANGE_DELETED};
        c->a.used += head;
        return 0;
}

/* What the lower layer holds at the item's name: 0 with *st filled, -ENOENT
 * when nothing (or no lower directory), another -errno on error. Never
 * follows a link. */
static int lower_stat(const fsx_item *it, struct stat *st)
{
        const lower_dir *ld = it->parent_data;
        if (!ld)
                return -ENOENT;
        return fstatat(ld->fd, it->name, st, AT_SYMLINK_NOFOLLOW) < 0 ? -errno : 0;
}

/* Whether the lower regular file at the item's name holds exactly the
 * size bytes at data: a file the run opened for writing (which copies it
 * up) and left as it was is no change. */
static bool same_as_lower(const fsx_item *it, const unsigned char *data, uint64_t size)
{
        const lower_dir *ld = it->parent_data;
        _cleanup_close_ int fd =
            openat(ld->fd, it->name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != size)
                return false;
        unsigned char buf[65536];
        uint64_t off = 0;
        while (off < size) {
                ssize_t n = read(fd, buf, (size_t)MIN(sizeof(buf), size - off));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0 || memcmp(buf, data + off, (size_t)n) != 0)
                        return false;
                off += (uint64_t)n;
        }
        return true;
}

/* A regular file of the upper dir: modified when it shadows a lower regular
 * file (and its bytes differ), created otherwise; one that replaces a lower
 * entry of another kind is that entry's deletion, then a creation. */
static int changes_file(void *ctx, const fsx_item *it)
{
        capture_ctx *c = ctx;
        struct stat lst;
        int r = lower_stat(it, &lst);
        if (r < 0 && r != -ENOENT)
                return al_error(c->err, r, it->path, "cannot inspect the staged %s: %s", it->path,
                                strerror(-r));
        bool modified = r == 0 && S_ISREG(lst.st_mode);
        if (r == 0 && !modified) {
                r = add_deleted(c, it);
                if (r < 0)
                        return r;
        }
        c->change = modified ? AIRLOCK_CHANGE_MODIFIED : AIRLOCK_CHANGE_CREATED;
        size_t before = c->n_files;
        r = capture_file(c, it);
        if (r < 0 || !modified || c->n_files == before)
                return r;
        cap_entry *e = &c->ents[c->n_files - 1];
        if (same_as_lower(it, (unsigned char *)c->a.base + e->off + e->data_off, e->size)) {
                c->a.used = e->off;
                c->total -= e->size;
                c->n_files--;
        }
        return 0;
}

/* An overlay whiteout (a 0/0 character device) is a deletion of the lower
 * entry of that name; any other refused entry (a link, a FIFO, a socket) is
 * refused as in /output, and never followed or opened. */
static int changes_refuse(void *ctx, const fsx_item *it, fsx_reason r)
{
        capture_ctx *c = ctx;
        struct stat st;
        if (r == FSX_NOT_REGULAR && it->d_type == DT_CHR &&
            fstatat(it->parent_fd, it->name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
            S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0)) {
                struct stat lst;
                return lower_stat(it, &lst) == 0 ? add_deleted(c, it) : 0;
        }
        /* A link or special file made in place of a staged entry: that
         * entry is gone (deleted), and what replaced it is refused. */
        struct stat lst;
        if ((r == FSX_SYMLINK || r == FSX_NOT_REGULAR) && lower_stat(it, &lst) == 0) {
                int k = add_deleted(c, it);
                if (k < 0)
                        return k;
        }
        return capture_refuse(c, it, r);
}

/* Whether the upper directory fd is opaque: the lower directory of its name
 * was deleted and this one made in its place (the overlay's xattr, in the
 * user.* namespace for an overlay mounted with userxattr). */
static bool is_opaque(int fd)
{
        char v[2];
        ssize_t n = fgetxattr(fd, "user.overlay.opaque", v, sizeof(v));
        if (n < 0)
                n = fgetxattr(fd, "trusted.overlay.opaque", v, sizeof(v));
        return n == 1 && v[0] == 'y';
}

static int changes_dir_enter(void *ctx, const fsx_item *it, int fd, const struct stat *st,
                             void **ret_data)
{
        (void)st;
        capture_ctx *c = ctx;
        *ret_data = NULL;
        struct stat lst;
        int r = lower_stat(it, &lst);
        if (r == -ENOENT)
                return 0;
        if (r < 0)
                return al_error(c->err, r, it->path, "cannot inspect the staged %s: %s", it->path,
                                strerror(-r));
        if (!S_ISDIR(lst.st_mode) || is_opaque(fd))
                return add_deleted(c, it);
        const lower_dir *parent = it->parent_data;
        lower_dir *ld = malloc(sizeof(*ld));
        if (!ld)
                return al_error(c->err, -ENOMEM, NULL, "out of memory");
        ld->fd = openat(parent->fd, it->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (ld->fd < 0) {
                r = -errno;
                free(ld);
                return al_error(c->err, r, it->path, "cannot open the staged %s: %s", it->path,
                                strerror(-r));
        }
        *ret_data = ld;
        return 0;
}

static int changes_dir_leave(void *ctx, void *data, int fd, const struct stat *st, bool ok)
{
        (void)ctx, (void)fd, (void)st, (void)ok;
        lower_dir *ld = data;
        if (ld) {
                close(ld->fd);
                free(ld);
        }
        return 0;
}

static int change_rank(airlock_change k)
{
        /* A deletion comes before a creation at the same path: applied in
         * order, the list replaces the entry. */
        return k == AIRLOCK_CHANGE_DELETED ? 0 : 1;
}

static int change_cmp(const void *x, const void *y)
{
        const airlock_input_change *a = x, *b = y;
        int r = strcmp(a->path, b->path);
        return r ? r : change_rank(a->change) - change_rank(b->change);
}

void fsx_changes_free(airlock_input_change *changes, size_t n)
{
        if (!changes)
                return;
        if (!changes[n].path && changes[n].data)
                munmap(changes[n].data, (size_t)changes[n].size);
        free(changes);
}

static int changes_run(int upper_fd, int lower_fd, const fsx_limits *lim,
                       airlock_input_change **ret, size_t *ret_n, airlock_refusal **ret_refused,
                       size_t *ret_n_refused, airlock_error *err)
{
        if (!lim || !ret || !ret_n || !ret_refused || !ret_n_refused)
                return al_error(err, -EINVAL, NULL, "capture: missing argument");
        struct stat st;
        if (fstat(upper_fd, &st) < 0)
                return al_error(err, -errno, "/input", "cannot inspect the changes of /input: %s",
                                strerror(errno));
        if (!S_ISDIR(st.st_mode))
                return al_error(err, -ENOTDIR, "/input",
                                "the changes of /input are not a directory");

        capture_ctx c = {.lim = lim, .err = err};
        uint64_t listed = 0;
        fsx_walk_opts opts = {
            .prefix = "/input",
            .max_depth = lim->max_depth,
            .max_entries = listing_budget(lim),
            .listed = &listed,
            .refuse_bad_utf8 = true,
        };
        fsx_walk_ops ops = {.file = changes_file,
                            .dir_enter = changes_dir_enter,
                            .dir_leave = changes_dir_leave,
                            .refuse = changes_refuse};
        lower_dir root = {.fd = lower_fd};
        int r = fsx_walk(upper_fd, &st, lower_fd >= 0 ? &root : NULL, &opts, &ops, &c, err);
        if (r >= 0)
                r = close_refusals(&c, "/input", err);
        airlock_input_change *out = NULL;
        if (r >= 0 && c.n_files > 0) {
                out = calloc(c.n_files + 1, sizeof(*out));
                if (!out)
                        r = al_error(err, -ENOMEM, NULL, "out of memory");
        }
        if (r < 0) {
                free(c.ents);
                if (c.a.base)
                        munmap(c.a.base, c.a.len);
                fsx_refused_free(c.refused, c.n_refused);
                return r;
        }
        for (size_t i = 0; i < c.n_files; i++) {
                char *b = c.a.base + c.ents[i].off;
                bool deleted = c.ents[i].change == AIRLOCK_CHANGE_DELETED;
                out[i] = (airlock_input_change){
                    .path = b,
                    .change = c.ents[i].change,
                    .media_type = deleted ? NULL : b + c.ents[i].path_len + 1,
                    .size = c.ents[i].size,
                    .data = deleted ? NULL : (unsigned char *)b + c.ents[i].data_off,
                };
        }
        if (out)
                out[c.n_files] =
                    (airlock_input_change){.data = (unsigned char *)c.a.base, .size = c.a.len};
        else if (c.a.base)
                munmap(c.a.base, c.a.len);
        free(c.ents);
        if (c.n_files > 1)
                qsort(out, c.n_files, sizeof(*out), change_cmp);
        *ret = out;
        *ret_n = c.n_files;
        *ret_refused = c.refused;
        *ret_n_refused = c.n_refused;
        return 0;
}

int fsx_capture_changes(int upper_fd, int lower_fd, const fsx_limits *lim,
                        airlock_input_change **ret, size_t *ret_n, airlock_refusal **ret_refused,
                        size_t *ret_n_refused, airlock_error *err)
{
        return fsx_error_utf8(
            err, changes_run(upper_fd, lower_fd, lim, ret, ret_n, ret_refused, ret_n_refused, err));
}

static int file_cmp(const void *x, const void *y)
{
        const airlock_file *a = x, *b = y;
        return strcmp(a->path, b->path);
}

/* fsx_capture's array has one hidden element past the last file that holds
 * the arena (data: its base, size: its length). */
void fsx_files_free(airlock_file *files, size_t n)
{
        if (!files)
                return;
        if (!files[n].path && files[n].data)
                munmap(files[n].data, (size_t)files[n].size);
        free(files);
}

/* Turns the entries into the result array, with the hidden arena element. */
static int build_files(capture_ctx *c, airlock_file **ret)
{
        if (c->n_files == 0) {
                if (c->a.base)
                        munmap(c->a.base, c->a.len);
                c->a = (arena){0};
                *ret = NULL;
                return 0;
        }
        airlock_file *files = calloc(c->n_files + 1, sizeof(*files));
        if (!files)
                return -ENOMEM;
        for (size_t i = 0; i < c->n_files; i++) {
                char *b = c->a.base + c->ents[i].off;
                files[i] = (airlock_file){
                    .path = b,
                    .media_type = b + c->ents[i].path_len + 1,
                    .size = c->ents[i].size,
                    .data = (unsigned char *)b + c->ents[i].data_off,
                };
        }
        files[c->n_files] = (airlock_file){.data = (unsigned char *)c->a.base, .size = c->a.len};
        c->a = (arena){0};
        *ret = files;
        return 0;
}

void fsx_refused_free(airlock_refusal *refused, size_t n)
{
        if (!refused)
                return;
        for (size_t i = 0; i < n; i++) {
                free(refused[i].path);
                free(refused[i].reason);
        }
        free(refused);
}

/* Whether the /output at out_dirfd (st: its status) is empty, proven with
 * one fstatfs: on a tmpfs with an inode cap, as every copy's /output is,
 * whose only inode in use is its root, the root has no entry of any kind
 * (a file, a folder, a link, a device or a mount point each needs an inode
 * of their own). Most runs leave /output empty, and the walk that shows it
 * took six system calls on every call's path. A root that some may not
 * list (a guest's chmod) is walked, so that the walk reports its refusal;
 * no proof (another file system, no cap, xattrs, which tmpfs charges to
 * its inodes) walks as well. */
static bool output_is_empty(int out_dirfd, const struct stat *st)
{
        struct statfs sf;
        return (st->st_mode & 0555) == 0555 && fstatfs(out_dirfd, &sf) == 0 &&
               sf.f_type == 0x01021994 /* TMPFS_MAGIC */ && sf.f_files > 0 &&
               sf.f_files - sf.f_ffree == 1;
}

static int capture_run(int out_dirfd, const fsx_limits *lim, airlock_file **ret_files,
                       size_t *ret_n_files, airlock_refusal **ret_refused, size_t *ret_n_refused,
                       airlock_error *err)
{
        if (!lim || !ret_files || !ret_n_files || !ret_refused || !ret_n_refused)
                return al_error(err, -EINVAL, NULL, "capture: missing argument");

        struct stat st;
        if (fstat(out_dirfd, &st) < 0)
                return al_error(err, -errno, "/output", "cannot inspect /output: %s",
                                strerror(errno));
        if (!S_ISDIR(st.st_mode))
                return al_error(err, -ENOTDIR, "/output", "/output is not a directory");
        if (output_is_empty(out_dirfd, &st)) {
                *ret_files = NULL;
                *ret_n_files = 0;
                *ret_refused = NULL;
                *ret_n_refused = 0;
                return 0;
        }

        capture_ctx c = {.lim = lim, .err = err};
        uint64_t listed = 0;
        fsx_walk_opts opts = {
            .prefix = "/output",
            .max_depth = lim->max_depth,
            .max_entries = listing_budget(lim),
            .listed = &listed,
            .refuse_bad_utf8 = true,
        };
        fsx_walk_ops ops = {.file = capture_file, .refuse = capture_refuse};
        int r = fsx_walk(out_dirfd, &st, NULL, &opts, &ops, &c, err);
        if (r >= 0)
                r = close_refusals(&c, "/output", err);
        airlock_file *files = NULL;
        if (r >= 0 && build_files(&c, &files) < 0)
                r = al_error(err, -ENOMEM, NULL, "out of memory");
        free(c.ents);
        if (r < 0) {
                if (c.a.base)
                        munmap(c.a.base, c.a.len);
                fsx_refused_free(c.refused, c.n_refused);
                return r;
        }
        /* The walk already meets files in path order; the sort makes the
         * contract hold even if an entry changed type between listing and
         * opening. */
        if (c.n_files > 1)
                qsort(files, c.n_files, sizeof(*files), file_cmp);
        *ret_files = files;
        *ret_n_files = c.n_files;
        *ret_refused = c.refused;
        *ret_n_refused = c.n_refused;
        return 0;
}

int fsx_capture(int out_dirfd, const fsx_limits *lim, airlock_file **ret_files, size_t *ret_n_files,
                airlock_refusal **ret_refused, size_t *ret_n_refused, airlock_error *err)
{
        return fsx_error_utf8(err, capture_run(out_dirfd, lim, ret_files, ret_n_files, ret_refused,
                                               ret_n_refused, err));
}
