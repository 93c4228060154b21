/* The fd-based tree walker shared by staging, signatures and capture.
 *
 * No recursion: a heap-allocated stack holds one frame per directory level,
 * each with its checked directory fd and its sorted listing. A name string
 * is built for every entry, but only for display and results; every open is
 * relative to the parent's fd and every entry is checked on its own fd. */
#include "fsx/fsx.h"
#include "fsx/fsx_internal.h"
#include "core/util.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

const char *fsx_reason_text(fsx_reason r)
{
        switch (r) {
        case FSX_SYMLINK:
                return "symlink";
        case FSX_NOT_REGULAR:
        case FSX_MOUNT_POINT:
                return "not a regular file";
        case FSX_TOO_LARGE:
                return "too large";
        case FSX_TOO_MANY:
                return "too many files";
        case FSX_TOO_DEEP:
                return "too deep";
        case FSX_BAD_NAME:
                return "name not UTF-8";
        case FSX_CHANGED:
                return "changed while reading";
        case FSX_UNREADABLE:
                return "unreadable";
        }
        return "refused";
}

static void utf8_field(char *buf, size_t size)
{
        size_t len = strlen(buf);
        if (al_utf8_valid(buf, len))
                return;
        char *clean = al_utf8_sanitize(buf, len);
        if (!clean) {
                /* No memory: keep only the ASCII, never invalid bytes. */
                for (char *p = buf; *p; p++)
                        if ((unsigned char)*p >= 0x80)
                                *p = '?';
                return;
        }
        snprintf(buf, size, "%s", clean);
        free(clean);
        /* Truncation may have cut a multi-byte sequence: drop its head. */
        len = strlen(buf);
        while (len > 0 && !al_utf8_valid(buf, len))
                buf[--len] = '\0';
}

int fsx_error_utf8(airlock_error *err, int code)
{
        if (err && code < 0) {
                utf8_field(err->message, sizeof(err->message));
                utf8_field(err->path, sizeof(err->path));
        }
        return code;
}

typedef struct fsx_dent {
        size_t off; /* of the name in the frame's pool */
        uint32_t len;
        unsigned char type;
        ino_t ino;
} fsx_dent;

typedef struct fsx_frame {
        int fd;
        bool own_fd;
        struct stat st;
        void *data;
        bool entered; /* dir_enter succeeded: dir_leave is owed */
        char *pool;
        fsx_dent *ents;
        size_t n, i;
        size_t path_len; /* display path of this directory */
        uint32_t depth;
} fsx_frame;

typedef struct fsx_walker {
        const fsx_walk_opts *opts;
        const fsx_walk_ops *ops;
        void *ctx;
        airlock_error *err;
        dev_t root_dev;
        bool foreign_devices; /* fsx_item's */
        dynbuf path;
        char *dbuf; /* getdents64 buffer */
        fsx_frame *frames;
        size_t n_frames, cap_frames;
        bool exhausted; /* the listing budget is spent: list nothing more */
} fsx_walker;

#define DENTS_BUF (64 * 1024)

static unsigned char mode_to_dtype(mode_t m)
{
        return S_ISREG(m)    ? DT_REG
               : S_ISDIR(m)  ? DT_DIR
               : S_ISLNK(m)  ? DT_LNK
               : S_ISFIFO(m) ? DT_FIFO
               : S_ISSOCK(m) ? DT_SOCK
               : S_ISCHR(m)  ? DT_CHR
               : S_ISBLK(m)  ? DT_BLK
                             : DT_UNKNOWN;
}

/* Orders entries so that a depth-first walk meets files in the byte order of
 * their full paths: a directory sorts as its name followed by '/'. */
static int dent_cmp(const void *x, const void *y, void *arg)
{
        const fsx_dent *a = x, *b = y;
        const unsigned char *pool = arg;
        const unsigned char *na = pool + a->off, *nb = pool + b->off;
        size_t la = a->len + (a->type == DT_DIR), lb = b->len + (b->type == DT_DIR);
        size_t n = MIN(la, lb);
        for (size_t i = 0; i < n; i++) {
                unsigned ca = i < a->len ? na[i] : '/';
                unsigned cb = i < b->len ? nb[i] : '/';
                if (ca != cb)
                        return ca < cb ? -1 : 1;
        }
        return la < lb ? -1 : la > lb;
}

static void frame_free(fsx_frame *f)
{
        if (f->own_fd && f->fd >= 0)
                close(f->fd);
        f->fd = -1;
        free(f->pool);
        free(f->ents);
        f->pool = NULL;
        f->ents = NULL;
}

static int set_path(fsx_walker *w, size_t base, const char *name, size_t len)
{
        w->path.len = base;
        if (dynbuf_append(&w->path, "/", 1) < 0 || dynbuf_append(&w->path, name, len) < 0)
                return al_error(w->err, -ENOMEM, NULL, "out of memory building a path");
        return 0;
}

static void fill_item(fsx_walker *w, fsx_item *it, const fsx_frame *f, const char *name, size_t len,
                      unsigned char type, ino_t ino)
{
        size_t pre = strlen(w->opts->prefix ? w->opts->prefix : "");
        *it = (fsx_item){
            .parent_fd = f->fd,
            .parent_data = f->data,
            .name = name,
            .name_len = len,
            .path = w->path.data,
            .path_len = w->path.len,
            .rel = w->path.data + pre + 1,
            .rel_len = w->path.len - pre - 1,
            .d_type = type,
            .ino = ino,
            .root_dev = w->root_dev,
            .depth = f->depth,
            .foreign_devices = w->foreign_devices,
        };
}

/* Lists the directory of frame f into its pool, resolving DT_UNKNOWN with
 * fstatat, and sorts it. Stops at the listing budget: then the directory
 * itself is refused as FSX_TOO_MANY and what was listed is still walked. */
static int list_dir(fsx_walker *w, fsx_frame *f, const fsx_item *self)
{
        dynbuf pool;
        dynbuf_init(&pool, SIZE_MAX / 2);
        size_t cap = 0;
        int r = 0;
        /* Every frame's fd is a fresh open file description (the root's
         * too), so getdents64 starts at the beginning without a seek. */
        for (;;) {
                ssize_t n = getdents64(f->fd, w->dbuf, DENTS_BUF);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        r = al_error(w->err, -errno, self->path, "cannot list directory %s: %s",
                                     self->path, strerror(errno));
                        goto fail;
                }
                if (n == 0)
                        break;
                for (ssize_t off = 0; off < n;) {
                        struct dirent64 *d = (struct dirent64 *)(w->dbuf + off);
                        off += d->d_reclen;
                        const char *nm = d->d_name;
                        if (nm[0] == '.' && (nm[1] == '\0' || (nm[1] == '.' && nm[2] == '\0')))
                                continue;
                        if (++*w->opts->listed > w->opts->max_entries) {
                                w->exhausted = true;
                                r = w->ops->refuse(w->ctx, self, FSX_TOO_MANY);
                                if (r < 0)
                                        goto fail;
                                goto done;
                        }
                        unsigned char type = d->d_type;
                        if (type == DT_UNKNOWN) {
                                struct stat st;
                                if (fstatat(f->fd, nm, &st, AT_SYMLINK_NOFOLLOW) < 0) {
                                        if (errno == ENOENT)
                                                continue;
                                        r = al_error(w->err, -errno, self->path,
                                                     "cannot inspect %s/%s: %s", self->path, nm,
                                                     strerror(errno));
                                        goto fail;
                                }
                                type = mode_to_dtype(st.st_mode);
                        }
                        if (f->n == cap) {
                                size_t nc = cap ? cap * 2 : 64;
                                fsx_dent *ne = realloc(f->ents, nc * sizeof(*ne));
                                if (!ne) {
                                        r = al_error(w->err, -ENOMEM, self->path,
                                                     "out of memory listing %s", self->path);
                                        goto fail;
                                }
                                f->ents = ne;
                                cap = nc;
                        }
                        size_t len = strlen(nm);
                        f->ents[f->n] = (fsx_dent){
                            .off = pool.len, .len = (uint32_t)len, .type = type, .ino = d->d_ino};
                        if (dynbuf_append(&pool, nm, len + 1) < 0) {
                                r = al_error(w->err, -ENOMEM, self->path,
                                             "out of memory listing %s", self->path);
                                goto fail;
                        }
                        f->n++;
                }
        }
done:
        f->pool = dynbuf_take(&pool, NULL);
        if (!f->pool)
                return al_error(w->err, -ENOMEM, self->path, "out of memory listing %s",
                                self->path);
        if (f->n > 1)
                qsort_r(f->ents, f->n, sizeof(*f->ents), dent_cmp, f->pool);
        return 0;
fail:
        dynbuf_free(&pool);
        return r;
}

static int push_frame(fsx_walker *w, int fd, bool own, const struct stat *st, void *data,
                      bool entered, uint32_t depth)
{
        if (w->n_frames == w->cap_frames) {
                size_t nc = w->cap_frames ? w->cap_frames * 2 : 16;
                fsx_frame *nf = realloc(w->frames, nc * sizeof(*nf));
                if (!nf) {
                        if (own)
                                close(fd);
                        return al_error(w->err, -ENOMEM, NULL, "out of memory walking a tree");
                }
                w->frames = nf;
                w->cap_frames = nc;
        }
        w->frames[w->n_frames++] = (fsx_frame){
            .fd = fd,
            .own_fd = own,
            .st = *st,
            .data = data,
            .entered = entered,
            .path_len = w->path.len,
            .depth = depth,
        };
        return 0;
}

/* Opens the listed directory entry and checks it on the fd. Returns the fd,
 * -EAGAIN with *reason for a refusal, -ENOENT when it vanished, else -errno. */
static int open_listed_dir(const fsx_item *it, struct stat *st, fsx_reason *reason)
{
        struct stat lst;
        int fd = fsx_open_beneath(it->parent_fd, it->name,
                                  O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, 0);
        if (fd < 0) {
                int r = fd;
                if (r == -ELOOP) {
                        *reason = FSX_SYMLINK;
                        return -EAGAIN;
                }
                if (r == -EXDEV) {
                        /* Moved out of its parent while opened (openat2). */
                        *reason = FSX_CHANGED;
                        return -EAGAIN;
                }
                if (r == -ENOTDIR) {
                        /* Swapped for something else since it was listed. */
                        bool lnk =
                            fstatat(it->parent_fd, it->name, &lst, AT_SYMLINK_NOFOLLOW) == 0 &&
                            S_ISLNK(lst.st_mode);
                        *reason = lnk ? FSX_SYMLINK : FSX_CHANGED;
                        return -EAGAIN;
                }
                return r;
        }
        if (fstat(fd, st) < 0) {
                int r = -errno;
                close(fd);
                return r;
        }
        if (!S_ISDIR(st->st_mode)) {
                close(fd);
                *reason = FSX_CHANGED;
                return -EAGAIN;
        }
        if (st->st_dev != it->root_dev) {
                close(fd);
                *reason = FSX_MOUNT_POINT;
                return -EAGAIN;
        }
        if (st->st_ino != it->ino) {
                /* Some file systems (overlayfs) list inode numbers that differ
                 * from st_ino; accept only when a fresh look at the name
                 * agrees with what was opened. */
                if (fstatat(it->parent_fd, it->name, &lst, AT_SYMLINK_NOFOLLOW) < 0 ||
                    lst.st_ino != st->st_ino || lst.st_dev != st->st_dev) {
                        close(fd);
                        *reason = FSX_CHANGED;
                        return -EAGAIN;
                }
        }
        return fd;
}

bool fsx_force_foreign_devices = false;

int fsx_open_listed(const fsx_item *it, struct stat *ret_st, fsx_reason *ret_reason)
{
        /* The name is one entry of the folder: al_open_regular's lookup is
         * as beneath it as fsx_open_beneath's. Its type checked first only
         * where another machine may have made a device node (two more
         * system calls a file, which double a walk's cost on a local
         * disk, where only this machine's root could). */
        int fd = it->foreign_devices
                     ? al_open_regular(it->parent_fd, it->name, O_RDONLY | O_NONBLOCK)
                     : fsx_open_beneath(it->parent_fd, it->name,
                                        O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, 0);
        if (fd == -EINVAL && it->foreign_devices)
                fd = -ENODEV; /* not a regular file since the listing */
        if (fd < 0) {
                int r = fd;
                if (r == -ELOOP) {
                        *ret_reason = FSX_SYMLINK;
                        return -EAGAIN;
                }
                if (r == -ENXIO || r == -EISDIR || r == -ENODEV || r == -EOPNOTSUPP ||
                    r == -EXDEV) {
                        /* A socket (ENXIO), a directory or a device swapped
                         * in since the listing; or (EXDEV, from openat2's
                         * final RESOLVE_BENEATH check) the entry was moved
                         * out of its directory while it was being opened. */
                        *ret_reason = FSX_CHANGED;
                        return -EAGAIN;
                }
                return r;
        }
        struct stat st;
        if (fstat(fd, &st) < 0) {
                int r = -errno;
                close(fd);
                return r;
        }
        fsx_reason reason = FSX_CHANGED;
        if (!S_ISREG(st.st_mode))
                reason = FSX_CHANGED;
        else if (st.st_dev != it->root_dev)
                reason = FSX_MOUNT_POINT;
        else if (st.st_ino != it->ino) {
                struct stat lst;
                if (fstatat(it->parent_fd, it->name, &lst, AT_SYMLINK_NOFOLLOW) == 0 &&
                    lst.st_ino == st.st_ino && lst.st_dev == st.st_dev) {
                        *ret_st = st;
                        return fd;
                }
                reason = FSX_CHANGED;
        } else {
                *ret_st = st;
                return fd;
        }
        close(fd);
        *ret_reason = reason;
        return -EAGAIN;
}

/* Handles one listed entry of the top frame. May push a frame. */
static int visit(fsx_walker *w, size_t fi, const fsx_dent *d)
{
        fsx_frame *f = &w->frames[fi];
        const char *name = f->pool + d->off;
        int r = set_path(w, f->path_len, name, d->len);
        if (r < 0)
                return r;
        fsx_item it;
        fill_item(w, &it, f, name, d->len, d->type, d->ino);

        if (w->opts->refuse_bad_utf8 && !al_utf8_valid(name, d->len))
                return w->ops->refuse(w->ctx, &it, FSX_BAD_NAME);

        switch (d->type) {
        case DT_REG:
                return w->ops->file(w->ctx, &it);
        case DT_LNK:
                return w->ops->refuse(w->ctx, &it, FSX_SYMLINK);
        case DT_DIR:
                break;
        default:
                return w->ops->refuse(w->ctx, &it, FSX_NOT_REGULAR);
        }
        /* A shallow walk (one directory's own entries, for a signature
         * update) counts subdirectories in the listing and nothing more. */
        if (w->opts->no_descend)
                return 0;

        if (f->depth + 1 > w->opts->max_depth)
                return w->ops->refuse(w->ctx, &it, FSX_TOO_DEEP);
        if (w->exhausted)
                return w->ops->refuse(w->ctx, &it, FSX_TOO_MANY);

        struct stat st;
        fsx_reason reason = FSX_CHANGED;
        int fd = open_listed_dir(&it, &st, &reason);
        if (fd == -EAGAIN)
                return w->ops->refuse(w->ctx, &it, reason);
        if (fd == -ENOENT)
                return 0;
        if (fd == -EACCES || fd == -EPERM)
                return w->ops->refuse(w->ctx, &it, FSX_UNREADABLE);
        if (fd == -EMFILE || fd == -ENFILE)
                return al_error(w->err, fd, it.path,
                                "out of file descriptors at %s (depth %u): lower the depth cap",
                                it.path, (unsigned)(f->depth + 1));
        if (fd < 0)
                return al_error(w->err, fd, it.path, "cannot open directory %s: %s", it.path,
                                strerror(-fd));

        void *data = NULL;
        if (w->ops->dir_enter) {
                r = w->ops->dir_enter(w->ctx, &it, fd, &st, &data);
                if (r < 0) {
                        close(fd);
                        return r;
                }
        }
        uint32_t depth = f->depth + 1;
        r = push_frame(w, fd, true, &st, data, true, depth);
        if (r < 0) {
                if (w->ops->dir_leave)
                        w->ops->dir_leave(w->ctx, data, -1, &st, false);
                return r;
        }
        fsx_frame *nf = &w->frames[w->n_frames - 1];
        /* it still names this directory: its path is the frame's path. */
        it.parent_fd = fd;
        r = list_dir(w, nf, &it);
        return r;
}

/* The walk's root as an item, seen from dir_fd. */
static fsx_item root_item(const fsx_walker *w, int dir_fd)
{
        return (fsx_item){.path = w->path.data,
                          .path_len = w->path.len,
                          .rel = "",
                          .name = "",
                          .parent_fd = dir_fd,
                          .root_dev = w->root_dev};
}

int fsx_walk(int root_fd, const struct stat *root_st, void *root_data, const fsx_walk_opts *opts,
             const fsx_walk_ops *ops, void *ctx, airlock_error *err)
{
        fsx_walker w = {
            .opts = opts,
            .ops = ops,
            .ctx = ctx,
            .err = err,
            .root_dev = root_st->st_dev,
        };
        dynbuf_init(&w.path, SIZE_MAX / 2);
        const char *prefix = opts->prefix ? opts->prefix : "";
        int r = dynbuf_append(&w.path, prefix, strlen(prefix));
        if (r < 0)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        w.dbuf = malloc(DENTS_BUF);
        if (!w.dbuf) {
                dynbuf_free(&w.path);
                return al_error(err, -ENOMEM, NULL, "out of memory");
        }

        /* The root is listed from a private open file description, so that
         * the walk neither moves nor depends on the caller's file offset. */
        int fd = openat(root_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0 && (errno == EACCES || errno == EPERM)) {
                /* A root the host may not list (a guest can chmod 000 its
                 * /output) is a refusal like any unreadable entry. */
                fsx_item self = root_item(&w, root_fd);
                r = ops->refuse(ctx, &self, FSX_UNREADABLE);
                goto out;
        }
        if (fd < 0) {
                r = al_error(err, -errno, prefix, "cannot open directory %s: %s", prefix,
                             strerror(errno));
                goto out;
        }
        w.foreign_devices = fsx_force_foreign_devices || al_foreign_devices(fd);
        r = push_frame(&w, fd, true, root_st, root_data, false, 0);
        if (r < 0)
                goto out;
        {
                fsx_item self = root_item(&w, fd);
                r = list_dir(&w, &w.frames[0], &self);
                if (r < 0)
                        goto out;
        }

        while (w.n_frames > 0) {
                size_t fi = w.n_frames - 1;
                fsx_frame *f = &w.frames[fi];
                if (f->i < f->n) {
                        fsx_dent d = f->ents[f->i++];
                        r = visit(&w, fi, &d);
                        if (r < 0)
                                goto out;
                        continue;
                }
                if (f->entered && ops->dir_leave) {
                        f->entered = false;
                        r = ops->dir_leave(ctx, f->data, f->fd, &f->st, true);
                }
                frame_free(f);
                w.n_frames--;
                if (r < 0)
                        goto out;
        }
        r = 0;
out:
        while (w.n_frames > 0) {
                fsx_frame *f = &w.frames[--w.n_frames];
                if (f->entered && ops->dir_leave)
                        ops->dir_leave(ctx, f->data, f->fd, &f->st, false);
                frame_free(f);
        }
        free(w.frames);
        free(w.dbuf);
        dynbuf_free(&w.path);
        return r;
}
