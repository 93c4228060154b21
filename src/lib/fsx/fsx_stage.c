/* Staging: copies the workspace and the mounts into the sandbox's /input
 * tree, failing closed on any link and never reading through a path. */
#include "fsx/fsx.h"
#include "fsx/fsx_internal.h"
#include "core/util.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/vfs.h>
#include <time.h>

/* Files at least this big are copied segment by segment with SEEK_DATA and
 * SEEK_HOLE, so holes stay holes; smaller ones are copied in one go. */
#define SPARSE_MIN (1u << 20)
#define COPY_BUF   (256u * 1024)

typedef struct stage_ctx {
        const fsx_limits *lim;
        airlock_error *err;
        uid_t owner;
        gid_t group;
        fsx_stage_stats stats;
        uint64_t listed;
        bool no_clone; /* FICLONE failed once: the file systems cannot share extents */
        bool no_cfr;   /* copy_file_range is unusable here: read and write */
        char *buf;     /* COPY_BUF for the read/write fallback */
        mode_t umask;  /* the process's, or 0777 when unknown */
        /* Where the source being staged lands, relative to /input: "" for
         * the workspace, the normalised destination for a mount. Collision
         * messages name the /input path, which is what the user sees as
         * shared, not only the host path. */
        const char *dest_base;
        /* Reuse of the previous staged copy (fsx_stage_reuse): its root,
         * its manifest, the last parent directory opened in it (files come
         * grouped by directory), and the manifest being made. */
        int prev_dirfd;
        const fsx_manifest *prev;
        char *pp_rel;
        int pp_fd;
        fsx_manifest *out;
        char *cmp; /* 2 * REUSE_COMPARE bytes */
        /* The realtime clock when this staging began, before any file was
         * read, and whether the source being staged is on a file system
         * whose times do not come from this kernel's clock (network, FUSE):
         * see racy(). */
        struct timespec t0;
        bool remote;
        /* Updating the previous staged copy where it stands (fsx_stage_update)
         * instead of filling an empty destination: entries already there are
         * kept when unchanged, replaced when not, removed when the source no
         * longer has them. */
        bool inplace;
} stage_ctx;

/* The error for an entry that is already staged at the /input path where
 * host_path should go: rel is the path below the current source's
 * destination ("" for the destination itself). */
static int collision_error(stage_ctx *c, const char *host_path, const char *rel)
{
        const char *base = c->dest_base ? c->dest_base : "";
        return al_error(c->err, -EEXIST, host_path,
                        "collision: %s would overwrite /input/%s%s%s, already staged from the "
                        "workspace or another mount",
                        host_path, base, *base && *rel ? "/" : "", rel);
}

/* The process umask, read without changing it (umask(2) would change it
 * for every thread for a moment); 0777 when it cannot be read, which makes
 * every file get an explicit fchmod. */
static mode_t read_umask(void)
{
        _cleanup_close_ int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return 0777;
        char buf[4096];
        ssize_t n = al_read_full(fd, buf, sizeof(buf) - 1);
        if (n <= 0)
                return 0777;
        buf[n] = '\0';
        const char *p = strstr(buf, "\nUmask:");
        if (!p)
                return 0777;
        char *end = NULL;
        unsigned long m = strtoul(p + 8, &end, 8);
        return end == p + 8 || m > 0777 ? 0777 : (mode_t)m;
}

/* A destination directory being filled: its fd, and the source's metadata
 * to apply once its children are in. */
typedef struct stage_dir {
        int fd;
        /* In place (fsx_stage_update), for a directory that was already in
         * the copy: the names this staging put or kept in it, so that what
         * is left over from the previous version can be removed once its
         * children are done. Bounded by the listing budget of the walk. */
        bool existed;
        char **names;
        size_t n_names, cap_names;
} stage_dir;

static void stage_dir_names_free(stage_dir *d)
{
        for (size_t i = 0; i < d->n_names; i++)
                free(d->names[i]);
        free(d->names);
        d->names = NULL;
        d->n_names = d->cap_names = 0;
}

/* Records that name now holds this staging's version in d (in place only). */
static int placed(const stage_ctx *c, stage_dir *d, const char *name)
{
        if (!c->inplace || !d->existed)
                return 0;
        if (d->n_names == d->cap_names) {
                size_t nc = d->cap_names ? d->cap_names * 2 : 64;
                char **nv = realloc(d->names, nc * sizeof(*nv));
                if (!nv)
                        return al_error(c->err, -ENOMEM, NULL, "out of memory");
                d->names = nv;
                d->cap_names = nc;
        }
        if (!(d->names[d->n_names] = strdup(name)))
                return al_error(c->err, -ENOMEM, NULL, "out of memory");
        d->n_names++;
        return 0;
}

static int name_cmp(const void *a, const void *b)
{
        return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Contract: removes from the staged directory d (in place, a directory of
 * airlock's own copy, reached by fd) every entry that this staging did not
 * put or keep there: what the source no longer has, and what it now skips
 * (a file that became a FIFO). Entries are removed with fsx_remove_at,
 * which never follows a link; the copy holds none anyway. */
static int prune_dir(stage_ctx *c, stage_dir *d, const char *path)
{
        if (!c->inplace || !d->existed)
                return 0;
        if (d->n_names > 1)
                qsort(d->names, d->n_names, sizeof(*d->names), name_cmp);
        int lfd = openat(d->fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        DIR *dir = lfd >= 0 ? fdopendir(lfd) : NULL;
        if (!dir) {
                int r = -errno;
                if (lfd >= 0)
                        close(lfd);
                return al_error(c->err, r, path, "cannot list a staged directory: %s",
                                strerror(-r));
        }
        /* Names are gathered first: removing while reading a directory
         * stream may skip or repeat entries. */
        char **gone = NULL;
        size_t n_gone = 0, cap_gone = 0;
        int r = 0;
        struct dirent *de;
        while (r >= 0 && (errno = 0, de = readdir(dir))) {
                const char *n = de->d_name;
                if (n[0] == '.' && (!n[1] || (n[1] == '.' && !n[2])))
                        continue;
                if (d->n_names && bsearch(&n, d->names, d->n_names, sizeof(*d->names), name_cmp))
                        continue;
                if (n_gone == cap_gone) {
                        size_t nc = cap_gone ? cap_gone * 2 : 16;
                        char **nv = realloc(gone, nc * sizeof(*nv));
                        if (!nv) {
                                r = -ENOMEM;
                                break;
                        }
                        gone = nv;
                        cap_gone = nc;
                }
                if (!(gone[n_gone] = strdup(n)))
                        r = -ENOMEM;
                else
                        n_gone++;
        }
        closedir(dir);
        for (size_t i = 0; i < n_gone; i++) {
                if (r >= 0)
                        r = fsx_remove_at(d->fd, gone[i], c->err);
                free(gone[i]);
        }
        free(gone);
        if (r == -ENOMEM)
                return al_error(c->err, r, NULL, "out of memory");
        return r;
}

/* ---- the manifest, and reuse of the previous staged copy ---------------- */

/* Files under this size are compared byte for byte with their previous copy
 * before it is reused: the same threshold as the content part of the cache's
 * tree signatures, so reuse is never looser than staleness. */
#define REUSE_COMPARE (64u << 10)

typedef struct fsx_mrec {
        char *path; /* below /input */
        dev_t sdev;
        ino_t sino;
        off_t size;
        struct timespec mtim, ctim;
        mode_t mode;
        dev_t cdev; /* the copy */
        ino_t cino;
        bool compare; /* the identity alone cannot vouch for the copy: racy() */
} fsx_mrec;

struct fsx_manifest {
        fsx_mrec *v;
        size_t n, cap;
        bool sorted;
        /* The staging's totals, as its caps counted them: what a delta
         * (fsx_stage_delta) starts from. */
        uint64_t bytes, listed, skipped;
};

void fsx_manifest_free(fsx_manifest *m)
{
        if (!m)
                return;
        for (size_t i = 0; i < m->n; i++)
                free(m->v[i].path);
        free(m->v);
        free(m);
}

size_t fsx_manifest_count(const fsx_manifest *m)
{
        return m ? m->n : 0;
}

static int mrec_cmp(const void *a, const void *b)
{
        return strcmp(((const fsx_mrec *)a)->path, ((const fsx_mrec *)b)->path);
}

static const fsx_mrec *manifest_find(const fsx_manifest *m, const char *path)
{
        if (!m || !m->n)
                return NULL;
        fsx_mrec key = {.path = (char *)path};
        return bsearch(&key, m->v, m->n, sizeof(*m->v), mrec_cmp);
}

/* Files whose ctime is this close to the start of their staging, or
 * later, are "racy": compared byte for byte before reuse. More than the
 * coarsest timestamps of a local file system (2 s on FAT, 1 s on ext4 with
 * small inodes) plus the kernel clock's tick. */
#define RACY_NS (3ull * 1000000000ull)

/* Contract: true when the identity recorded for a source (st, read by a
 * staging that began at c->t0) does not prove that its bytes are the ones
 * copied. On a local file system the kernel sets ctime from its own clock
 * at every change of a file, and nobody can set it otherwise; a change
 * after the copy was read (at t0 or later) therefore gets a ctime of at
 * least t0 less the timestamp granularity. A recorded ctime older than
 * t0 - RACY_NS can thus not be the ctime of any later version: equal
 * identity means equal bytes. A younger ctime might be shared with an edit
 * made within the same tick after the read (git's "racily clean" index
 * entries), and on network and FUSE file systems times come from another
 * clock or from user space: those are compared. What this leaves is what
 * the tree signatures leave as well: a host clock set back by root, and
 * writes that change no ctime (mmap writes before their write-back). */
static bool racy(const stage_ctx *c, const struct stat *st)
{
        if (c->remote)
                return true;
        uint64_t t0 = (uint64_t)c->t0.tv_sec * 1000000000ull + (uint64_t)c->t0.tv_nsec;
        if (st->st_ctim.tv_sec < 0)
                return true; /* a clock that was wrong: no proof */
        uint64_t ct = (uint64_t)st->st_ctim.tv_sec * 1000000000ull + (uint64_t)st->st_ctim.tv_nsec;
        return t0 < RACY_NS || ct >= t0 - RACY_NS;
}

/* File systems whose times are not set by this kernel's clock alone, and
 * whose other clients' changes this kernel's inotify never reports: the
 * table is al_remote_fs's, which the MCP server's tenants folder uses too. */
bool fsx_remote_fs(int fd, const char **ret_name)
{
        return al_remote_fs(fd, ret_name);
}

static int manifest_add(fsx_manifest *m, const char *path, const struct stat *src,
                        const struct stat *copy, bool compare)
{
        if (m->n == m->cap) {
                size_t nc = m->cap ? m->cap * 2 : 256;
                fsx_mrec *nv = realloc(m->v, nc * sizeof(*nv));
                if (!nv)
                        return -ENOMEM;
                m->v = nv;
                m->cap = nc;
        }
        char *p = strdup(path);
        if (!p)
                return -ENOMEM;
        m->v[m->n++] = (fsx_mrec){
            .path = p,
            .sdev = src->st_dev,
            .sino = src->st_ino,
            .size = src->st_size,
            .mtim = src->st_mtim,
            .ctim = src->st_ctim,
            .mode = src->st_mode,
            .cdev = copy->st_dev,
            .cino = copy->st_ino,
            .compare = compare,
        };
        return 0;
}

/* The /input path of an entry rel below the current source's destination. */
static char *input_path(const stage_ctx *c, const char *rel)
{
        const char *base = c->dest_base ? c->dest_base : "";
        size_t lb = strlen(base), lr = strlen(rel);
        char *p = malloc(lb + lr + 2);
        if (!p)
                return NULL;
        memcpy(p, base, lb);
        size_t k = lb;
        if (lb && lr)
                p[k++] = '/';
        memcpy(p + k, rel, lr + 1);
        return p;
}

/* The directory of the previous copy that holds ipath's entry, opened
 * beneath prev_dirfd without following anything (O_PATH), kept for the
 * files after it in the same directory. -errno when it cannot be. */
static int prev_parent(stage_ctx *c, const char *ipath)
{
        const char *slash = strrchr(ipath, '/');
        size_t len = slash ? (size_t)(slash - ipath) : 0;
        if (len == 0)
                return c->prev_dirfd;
        if (c->pp_rel && strlen(c->pp_rel) == len && memcmp(c->pp_rel, ipath, len) == 0)
                return c->pp_fd;
        free(c->pp_rel);
        c->pp_rel = NULL;
        if (c->pp_fd >= 0)
                close(c->pp_fd);
        c->pp_fd = -1;
        char *rel = strndup(ipath, len);
        if (!rel)
                return -ENOMEM;
        int fd = fsx_open_beneath(c->prev_dirfd, rel, O_PATH | O_DIRECTORY | O_NOFOLLOW, 0);
        if (fd < 0) {
                free(rel);
                return fd;
        }
        c->pp_rel = rel;
        c->pp_fd = fd;
        return fd;
}

/* True when the first size bytes of a and b are equal (both read from 0). */
static bool same_bytes(stage_ctx *c, int a, int b, uint64_t size)
{
        if (!c->cmp && !(c->cmp = malloc(2 * REUSE_COMPARE)))
                return false;
        ssize_t na = pread(a, c->cmp, size, 0);
        ssize_t nb = pread(b, c->cmp + REUSE_COMPARE, size, 0);
        return na == (ssize_t)size && nb == (ssize_t)size &&
               memcmp(c->cmp, c->cmp + REUSE_COMPARE, size) == 0;
}

/* Contract: links name in destfd to the previous staged copy of the source
 * file (st its lstat or fstat; in its checked open fd, or -1 when it was not
 * opened), when that copy can stand for a new one. Returns 1 when linked, 0
 * when the file must be copied (no record, anything differs, any doubt, or
 * the bytes must be compared and in is -1), or a negative errno with err
 * filled for a collision, exactly as a copy would fail.
 *
 * Why a hard link is safe. It links only within airlock's own staging area,
 * from the previous staged copy (a private 0700 directory that airlock made
 * and filled), never from or into a source tree: what the host tree holds
 * is read, never linked. A staged copy is never written after staging: the
 * host writes it only while staging (then futimens), and the guest sees it
 * only as the read-only lower layer of /input (overlayfs; a read-only bind
 * mount where the kernel has no overlay in a user namespace), through which
 * no write, chmod, chown or utime reaches the file; the guest cannot reach
 * the staging directory by path at all (it is outside its root). So the two
 * names of the inode always hold the bytes staged from a source with this
 * identity. The identity (dev, ino, size, mtime, ctime, mode) of the source
 * must equal the one recorded when the copy was made: a write changes ctime,
 * which no caller can set, and a replacement changes the inode. When the
 * record is racy (racy(): a ctime close to the staging that made the copy,
 * or a network file system) a file under REUSE_COMPARE bytes is compared
 * byte for byte, through in, with the previous copy; a larger one is
 * vouched for by its identity, as the tree signatures do. The new name
 * must then be the recorded inode, a regular file of the source's size,
 * owned by the owner this staging would give it (as root, sandboxes have
 * distinct guest ids unless one replaces the other, sbx_sandbox_new_from:
 * a copy owned by another guest is never shared); otherwise it is removed
 * and the file copied. The staging caps count a
 * linked file as a copied one (the caller checked the byte cap). */
static int reuse_previous(stage_ctx *c, int in, const struct stat *st, int destfd, const char *name,
                          const char *path, const char *rel, const char *ipath)
{
        const fsx_mrec *m = manifest_find(c->prev, ipath);
        if (!m || m->sdev != st->st_dev || m->sino != st->st_ino || m->size != st->st_size ||
            m->mode != st->st_mode || m->mtim.tv_sec != st->st_mtim.tv_sec ||
            m->mtim.tv_nsec != st->st_mtim.tv_nsec || m->ctim.tv_sec != st->st_ctim.tv_sec ||
            m->ctim.tv_nsec != st->st_ctim.tv_nsec)
                return 0;
        /* Larger files are vouched for by their identity alone, as in the
         * tree signatures: reuse is never looser than staleness. */
        bool compare = m->compare && (uint64_t)st->st_size < REUSE_COMPARE;
        if (compare && in < 0)
                return 0;
        int pfd = prev_parent(c, ipath);
        if (pfd < 0)
                return 0;
        const char *slash = strrchr(ipath, '/');
        const char *pname = slash ? slash + 1 : ipath;
        if (compare) {
                _cleanup_close_ int pf =
                    openat(pfd, pname, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
                struct stat fst;
                if (pf < 0 || fstat(pf, &fst) < 0 || fst.st_ino != m->cino ||
                    fst.st_dev != m->cdev || !same_bytes(c, in, pf, (uint64_t)st->st_size))
                        return 0;
        }
        /* In place, the previous copy is already at name: it is checked
         * there, as a link would be. */
        if (!c->inplace && linkat(pfd, pname, destfd, name, 0) < 0) {
                if (errno == EEXIST)
                        return collision_error(c, path, rel);
                return 0; /* ENOENT, EMLINK, EXDEV, EPERM...: copy instead */
        }
        /* Checked on the new name, which is what the guest will see: the
         * previous copy is then the recorded inode still, unchanged in
         * type, size and owner. */
        struct stat lst;
        if (fstatat(destfd, name, &lst, AT_SYMLINK_NOFOLLOW) < 0 || lst.st_ino != m->cino ||
            lst.st_dev != m->cdev || !S_ISREG(lst.st_mode) || lst.st_size != st->st_size ||
            (c->owner != (uid_t)-1 && (lst.st_uid != c->owner || lst.st_gid != c->group))) {
                if (unlinkat(destfd, name, 0) < 0 &&
                    !(c->inplace && (errno == ENOENT || errno == EISDIR)))
                        return al_error(c->err, -errno, path, "cannot replace the copy of %s: %s",
                                        path, strerror(errno));
                return 0;
        }
        /* Compared now, the record vouches from this staging's start on. */
        if (c->out && manifest_add(c->out, ipath, st, &lst, compare ? racy(c, st) : m->compare) < 0)
                return al_error(c->err, -ENOMEM, NULL, "out of memory");
        c->stats.files++;
        c->stats.reused++;
        c->stats.bytes += (uint64_t)st->st_size;
        return 1;
}

static int copy_range_rw(stage_ctx *c, int in, int out, off_t off, uint64_t len)
{
        if (!c->buf) {
                c->buf = malloc(COPY_BUF);
                if (!c->buf)
                        return -ENOMEM;
        }
        while (len > 0) {
                ssize_t n = pread(in, c->buf, MIN(len, COPY_BUF), off);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (n == 0)
                        return -ENODATA; /* shrank while copied */
                for (ssize_t done = 0; done < n;) {
                        ssize_t w = pwrite(out, c->buf + done, (size_t)(n - done), off + done);
                        if (w < 0) {
                                if (errno == EINTR)
                                        continue;
                                return -errno;
                        }
                        done += w;
                }
                off += n;
                len -= (uint64_t)n;
        }
        return 0;
}

/* Copies len bytes at off from in to out (same offset), in the kernel when
 * it can. Returns -ENODATA when the source ended early. */
static int copy_range(stage_ctx *c, int in, int out, off_t off, uint64_t len)
{
        while (len > 0 && !c->no_cfr) {
                loff_t ioff = off, ooff = off;
                ssize_t n = copy_file_range(in, &ioff, out, &ooff, MIN(len, 1u << 30), 0);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EXDEV || errno == ENOSYS || errno == EOPNOTSUPP ||
                            errno == EINVAL || errno == EBADF || errno == EPERM) {
                                c->no_cfr = true;
                                break;
                        }
                        return -errno;
                }
                if (n == 0)
                        return -ENODATA;
                off += n;
                len -= (uint64_t)n;
        }
        return len ? copy_range_rw(c, in, out, off, len) : 0;
}

static int copy_data(stage_ctx *c, int in, int out, uint64_t size)
{
        if (size == 0)
                return 0;
        if (!c->no_clone) {
                if (ioctl(out, FICLONE, in) == 0) {
                        /* The clone takes the whole file as it is now: cut
                         * what it grew by; a file that shrank is an error,
                         * as in a copy. */
                        struct stat st;
                        if (fstat(out, &st) < 0)
                                return -errno;
                        if ((uint64_t)st.st_size < size)
                                return -ENODATA;
                        return ftruncate(out, (off_t)size) < 0 ? -errno : 0;
                }
                c->no_clone = true;
        }
        if (size < SPARSE_MIN)
                return copy_range(c, in, out, 0, size);

        /* As cp does: a large file is read once, front to back. */
        (void)posix_fadvise(in, 0, 0, POSIX_FADV_SEQUENTIAL);
        off_t pos = 0, end = (off_t)size;
        while (pos < end) {
                off_t data = lseek(in, pos, SEEK_DATA);
                if (data < 0) {
                        if (errno == ENXIO)
                                break; /* only a hole is left */
                        /* No SEEK_DATA here: copy everything. */
                        int r = copy_range(c, in, out, pos, (uint64_t)(end - pos));
                        if (r < 0)
                                return r;
                        break;
                }
                if (data >= end)
                        break;
                off_t hole = lseek(in, data, SEEK_HOLE);
                if (hole < 0 || hole > end)
                        hole = end;
                int r = copy_range(c, in, out, data, (uint64_t)(hole - data));
                if (r < 0)
                        return r;
                pos = hole;
        }
        /* Trailing holes: give the copy its full length. */
        return ftruncate(out, end) < 0 ? -errno : 0;
}

/* Applies owner, mode and times to a created entry, in that order: chown
 * clears set-id bits and futimens must come after every write. */
static int apply_meta(stage_ctx *c, int fd, const struct stat *st, mode_t extra, bool mode_set)
{
        if (c->owner != (uid_t)-1 && fchown(fd, c->owner, c->group) < 0)
                return -errno;
        if (!mode_set && fchmod(fd, (st->st_mode & 0777) | extra) < 0)
                return -errno;
        struct timespec ts[2] = {st->st_atim, st->st_mtim};
        if (futimens(fd, ts) < 0)
                return -errno;
        return 0;
}

static bool fits_cap(const stage_ctx *c, uint64_t size)
{
        return size <= c->lim->max_bytes && size <= c->lim->max_bytes - c->stats.bytes;
}

/* Copies the checked, open regular file in to a new entry name in destfd. */
static int stage_copy_file(stage_ctx *c, int in, const struct stat *st, int destfd,
                           const char *name, const char *path, const char *rel)
{
        uint64_t size = (uint64_t)st->st_size;
        if (!fits_cap(c, size))
                return al_error(c->err, -EFBIG, path,
                                "too large: staging %s (%llu bytes) would exceed the staging cap "
                                "of %llu bytes",
                                path, (unsigned long long)size,
                                (unsigned long long)c->lim->max_bytes);
        _cleanup_free_ char *ipath = NULL;
        if (c->prev || c->out) {
                ipath = input_path(c, rel);
                if (!ipath)
                        return al_error(c->err, -ENOMEM, NULL, "out of memory");
        }
        if (c->prev) {
                int k = reuse_previous(c, in, st, destfd, name, path, rel, ipath);
                if (k != 0)
                        return k < 0 ? k : 0;
        }
        /* Created with its final mode when the umask leaves that intact,
         * which saves an fchmod per file; else 0600 and fchmod later. */
        mode_t mode = (st->st_mode & 0777) | S_IRUSR;
        bool mode_set = (mode & ~c->umask) == mode;
        /* In place, the previous version goes first (a directory there
         * too): nothing else uses this copy while it is updated. */
        if (c->inplace && unlinkat(destfd, name, 0) < 0 && errno != ENOENT) {
                if (errno != EISDIR)
                        return al_error(c->err, -errno, path, "cannot replace the copy of %s: %s",
                                        path, strerror(errno));
                int r = fsx_remove_at(destfd, name, c->err);
                if (r < 0)
                        return r;
        }
        _cleanup_close_ int out =
            openat(destfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                   mode_set ? mode : 0600);
        if (out < 0) {
                if (errno == EEXIST)
                        return collision_error(c, path, rel);
                return al_error(c->err, -errno, path, "cannot create the copy of %s: %s", path,
                                strerror(errno));
        }
        int r = copy_data(c, in, out, size);
        if (r == -ENODATA)
                return al_error(c->err, -ESTALE, path, "%s changed while it was staged (it shrank)",
                                path);
        if (r < 0)
                return al_error(c->err, r, path, "cannot copy %s: %s", path, strerror(-r));
        r = apply_meta(c, out, st, S_IRUSR, mode_set);
        if (r < 0)
                return al_error(c->err, r, path, "cannot set owner, mode or times of %s: %s", path,
                                strerror(-r));
        if (c->out) {
                struct stat cst;
                if (fstat(out, &cst) < 0)
                        return al_error(c->err, -errno, path, "cannot inspect the copy of %s: %s",
                                        path, strerror(errno));
                if (manifest_add(c->out, ipath, st, &cst, racy(c, st)) < 0)
                        return al_error(c->err, -ENOMEM, NULL, "out of memory");
        }
        c->stats.files++;
        c->stats.bytes += size;
        return 0;
}

/* The reuse of an unchanged file without opening it (most files of a
 * rebuild): its lstat must show the regular file the listing named, on the
 * walk's device (not a mount point), under the byte cap, with a record that
 * needs no comparison of bytes. 1 when linked, 0 to go the usual way (which
 * refuses, copies or compares), or a negative errno. Opening the file would
 * add nothing here: no byte of it is read, and the checks of
 * fsx_open_listed are these on the name, with the type and identity then
 * checked again on the new link by reuse_previous. */
static int reuse_unopened(stage_ctx *c, const fsx_item *it, stage_dir *parent)
{
        struct stat st;
        if (fstatat(it->parent_fd, it->name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
            !S_ISREG(st.st_mode) || st.st_ino != it->ino || st.st_dev != it->root_dev ||
            !fits_cap(c, (uint64_t)st.st_size))
                return 0;
        _cleanup_free_ char *ipath = input_path(c, it->rel);
        if (!ipath)
                return al_error(c->err, -ENOMEM, NULL, "out of memory");
        return reuse_previous(c, -1, &st, parent->fd, it->name, it->path, it->rel, ipath);
}

/* Stages one listed file: 1 when its copy is now in place (linked, kept
 * or copied), 0 when it was skipped or vanished, or a negative errno. */
void (*fsx_stage_file_hook)(int parent_fd, const char *name) = NULL;

static int stage_file_one(stage_ctx *c, const fsx_item *it, stage_dir *parent)
{
        if (fsx_stage_file_hook)
                fsx_stage_file_hook(it->parent_fd, it->name);
        if (c->prev) {
                int k = reuse_unopened(c, it, parent);
                if (k != 0)
                        return k;
        }
        struct stat st;
        fsx_reason reason = FSX_CHANGED;
        _cleanup_close_ int fd = fsx_open_listed(it, &st, &reason);
        if (fd == -EAGAIN) {
                if (reason == FSX_MOUNT_POINT) {
                        c->stats.skipped++;
                        return 0;
                }
                if (reason == FSX_SYMLINK)
                        return al_error(c->err, -ELOOP, it->path,
                                        "symlink at %s: staging refuses symbolic links (to stage "
                                        "what it points at, "
                                        "mount that: -m TARGET:NAME)",
                                        it->path);
                return al_error(c->err, -ESTALE, it->path,
                                "%s changed while it was staged (type or identity)", it->path);
        }
        if (fd == -ENOENT)
                return 0;
        if (fd < 0)
                return al_error(c->err, fd, it->path, "cannot open %s: %s", it->path,
                                strerror(-fd));
        int r = stage_copy_file(c, fd, &st, parent->fd, it->name, it->path, it->rel);
        return r < 0 ? r : 1;
}

static int stage_file(void *ctx, const fsx_item *it)
{
        stage_ctx *c = ctx;
        stage_dir *parent = it->parent_data;
        int r = stage_file_one(c, it, parent);
        return r > 0 ? placed(c, parent, it->name) : r;
}

int fsx_stage_refusal(const fsx_item *it, fsx_reason r, const fsx_limits *lim, airlock_error *err)
{
        switch (r) {
        case FSX_SYMLINK:
                return al_error(
                    err, -ELOOP, it->path,
                    "symlink at %s: staging refuses symbolic links (to stage what it points at, "
                    "mount that: -m TARGET:NAME)",
                    it->path);
        case FSX_TOO_DEEP:
                return al_error(err, -ENAMETOOLONG, it->path,
                                "too deep: %s is more than %u directories below its root "
                                "(staging depth cap)",
                                it->path, (unsigned)lim->max_depth);
        case FSX_TOO_MANY:
                return al_error(err, -E2BIG, it->path,
                                "too many files: more than %llu entries to stage (reached in %s)",
                                (unsigned long long)lim->max_files, it->path);
        case FSX_UNREADABLE:
                return al_error(err, -EACCES, it->path, "cannot stage %s: permission denied",
                                it->path);
        default:
                return al_error(err, -ESTALE, it->path,
                                "%s changed while it was staged (type or identity)", it->path);
        }
}

static int stage_refuse(void *ctx, const fsx_item *it, fsx_reason r)
{
        stage_ctx *c = ctx;
        if (r == FSX_NOT_REGULAR || r == FSX_MOUNT_POINT) {
                /* Sockets, FIFOs and devices have no content to stage, and
                 * another file system inside the tree is not ours to copy. */
                c->stats.skipped++;
                return 0;
        }
        return fsx_stage_refusal(it, r, c->lim, c->err);
}

static int stage_dir_enter(void *ctx, const fsx_item *it, int fd, const struct stat *st,
                           void **ret_data)
{
        stage_ctx *c = ctx;
        stage_dir *parent = it->parent_data;
        bool existed = false;
        if (c->inplace) {
                /* The previous version's entry: a directory is kept (and
                 * made writable until its metadata is set again on leaving
                 * it); anything else makes way. */
                int old =
                    openat(parent->fd, it->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (old >= 0) {
                        if (fchmod(old, S_IRWXU) < 0) {
                                int r = -errno;
                                close(old);
                                return al_error(c->err, r, it->path,
                                                "cannot update the copy of %s: %s", it->path,
                                                strerror(-r));
                        }
                        existed = true;
                        close(old);
                } else if (errno != ENOENT) {
                        int r = fsx_remove_at(parent->fd, it->name, c->err);
                        if (r < 0)
                                return r;
                }
        }
        if (!existed && mkdirat(parent->fd, it->name, 0700) < 0) {
                if (errno == EEXIST)
                        return collision_error(c, it->path, it->rel);
                return al_error(c->err, -errno, it->path, "cannot create the copy of %s: %s",
                                it->path, strerror(errno));
        }
        int r = placed(c, parent, it->name);
        if (r < 0)
                return r;
        stage_dir *d = calloc(1, sizeof(*d));
        if (!d)
                return al_error(c->err, -ENOMEM, it->path, "out of memory");
        d->existed = existed;
        d->fd = openat(parent->fd, it->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (d->fd < 0) {
                r = -errno;
                free(d);
                return al_error(c->err, r, it->path, "cannot open the copy of %s: %s", it->path,
                                strerror(-r));
        }
        c->stats.dirs++;
        *ret_data = d;
        return 0;
}

static int stage_dir_leave(void *ctx, void *data, int fd, const struct stat *st, bool ok)
{
        stage_ctx *c = ctx;
        stage_dir *d = data;
        int r = 0;
        if (ok)
                r = prune_dir(c, d, NULL);
        if (ok && r >= 0) {
                /* Directories stay readable and searchable by their owner. */
                r = apply_meta(c, d->fd, st, S_IRUSR | S_IXUSR, false);
                if (r < 0)
                        r = al_error(c->err, r, NULL,
                                     "cannot set owner, mode or times of a staged directory: %s",
                                     strerror(-r));
        }
        close(d->fd);
        stage_dir_names_free(d);
        free(d);
        return r;
}

static const fsx_walk_ops stage_ops = {
    .file = stage_file,
    .dir_enter = stage_dir_enter,
    .dir_leave = stage_dir_leave,
    .refuse = stage_refuse,
};

/* Opens the host path of a source: the path itself is the user's choice and
 * may go through links, but its last component must not be one. */
static int open_source(stage_ctx *c, const char *host, struct stat *st)
{
        int fd = open(host, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        if (fd < 0) {
                if (errno == ELOOP)
                        return al_error(c->err, -ELOOP, host,
                                        "symlink at %s: staging refuses symbolic links (to stage "
                                        "what it points at, "
                                        "mount that: -m TARGET:NAME)",
                                        host);
                return al_error(c->err, -errno, host, "cannot open %s: %s", host, strerror(errno));
        }
        if (fstat(fd, st) < 0) {
                int r = -errno;
                close(fd);
                return al_error(c->err, r, host, "cannot inspect %s: %s", host, strerror(-r));
        }
        return fd;
}

/* Opens (creating as needed) the parent directories of dest below destfd and
 * returns the fd of the last one; *ret_last points into the copy in *buf. */
static int open_dest_parent(stage_ctx *c, int destfd, const char *dest, char **buf,
                            const char **ret_last)
{
        char *copy = strdup(dest);
        if (!copy)
                return al_error(c->err, -ENOMEM, NULL, "out of memory");
        *buf = copy;
        char *last = strrchr(copy, '/');
        if (!last) {
                *ret_last = copy;
                int fd = openat(destfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                return fd < 0 ? al_error(c->err, -errno, NULL, "cannot open /input: %s",
                                         strerror(errno))
                              : fd;
        }
        *last = '\0';
        *ret_last = last + 1;
        _cleanup_close_ int cur = openat(destfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (cur < 0)
                return al_error(c->err, -errno, NULL, "cannot open /input: %s", strerror(errno));
        for (char *s = copy; *s;) {
                char *e = strchrnul(s, '/');
                bool end = *e == '\0';
                *e = '\0';
                int fd = openat(cur, s, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (fd < 0 && errno == ENOENT) {
                        if (mkdirat(cur, s, 0755) < 0 && errno != EEXIST)
                                return al_error(c->err, -errno, dest, "cannot create /input/%s: %s",
                                                copy, strerror(errno));
                        fd = openat(cur, s, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                        if (fd >= 0 && c->owner != (uid_t)-1 &&
                            fchown(fd, c->owner, c->group) < 0) {
                                int r = -errno;
                                close(fd);
                                return al_error(c->err, r, dest, "cannot chown /input/%s: %s", copy,
                                                strerror(-r));
                        }
                }
                if (fd < 0) {
                        if (errno == ENOTDIR || errno == ELOOP)
                                return al_error(c->err, -ENOTDIR, dest,
                                                "collision: mount /input/%s needs a directory at "
                                                "/input/%s, where a file is already staged",
                                                dest, copy);
                        return al_error(c->err, -errno, dest, "cannot open /input/%s: %s", copy,
                                        strerror(errno));
                }
                closep(&cur);
                cur = fd;
                if (!end)
                        *e = '/';
                s = end ? e : e + 1;
        }
        return TAKE_FD(cur);
}

static int stage_source(stage_ctx *c, int dest_dirfd, const fsx_source *src)
{
        if (!src->host_path || !*src->host_path)
                return al_error(c->err, -EINVAL, NULL, "staging: a source has no host path");
        struct stat st;
        _cleanup_close_ int fd = open_source(c, src->host_path, &st);
        if (fd < 0)
                return fd;

        /* Display paths are the host path without trailing slashes. */
        _cleanup_free_ char *prefix = strdup(src->host_path);
        if (!prefix)
                return al_error(c->err, -ENOMEM, NULL, "out of memory");
        for (size_t l = strlen(prefix); l > 1 && prefix[l - 1] == '/'; l--)
                prefix[l - 1] = '\0';
        fsx_walk_opts opts = {
            .prefix = prefix,
            .max_depth = c->lim->max_depth,
            .max_entries = c->lim->max_files,
            .listed = &c->listed,
        };

        c->remote = fsx_remote_fs(fd, NULL);
        c->dest_base = "";
        if (!src->dest) {
                if (!S_ISDIR(st.st_mode))
                        return al_error(c->err, -ENOTDIR, src->host_path,
                                        "workspace %s is not a directory", src->host_path);
                stage_dir root = {.fd = dest_dirfd, .existed = c->inplace};
                int r = fsx_walk(fd, &st, &root, &opts, &stage_ops, c, c->err);
                if (r >= 0)
                        r = prune_dir(c, &root, src->host_path);
                stage_dir_names_free(&root);
                return r;
        }

        if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
                return al_error(c->err, -EINVAL, src->host_path,
                                "mount %s is neither a regular file nor a directory",
                                src->host_path);
        if (++c->listed > c->lim->max_files)
                return al_error(c->err, -E2BIG, src->host_path,
                                "too many files: more than %llu entries to stage (reached at %s)",
                                (unsigned long long)c->lim->max_files, src->host_path);
        /* Normalised again here, whatever the caller did: a ".." or an
         * absolute part must never steer the copy out of dest_dirfd. */
        _cleanup_free_ char *dest = NULL;
        int r = fsx_normalize_mount_path(src->dest, &dest, c->err);
        if (r < 0)
                return r;
        _cleanup_free_ char *buf = NULL;
        const char *last = NULL;
        _cleanup_close_ int parent = open_dest_parent(c, dest_dirfd, dest, &buf, &last);
        if (parent < 0)
                return parent;
        /* dest_base points into dest only while this source is staged. */
        if (S_ISREG(st.st_mode)) {
                c->dest_base = dest;
                r = stage_copy_file(c, fd, &st, parent, last, src->host_path, "");
                c->dest_base = "";
                return r;
        }

        if (mkdirat(parent, last, 0700) < 0) {
                if (errno == EEXIST)
                        return al_error(c->err, -EEXIST, src->host_path,
                                        "collision: mount %s would overwrite /input/%s, already "
                                        "staged from the workspace or another mount",
                                        src->host_path, dest);
                return al_error(c->err, -errno, src->host_path, "cannot create /input/%s: %s", dest,
                                strerror(errno));
        }
        stage_dir root = {
            .fd = openat(parent, last, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)};
        if (root.fd < 0)
                return al_error(c->err, -errno, src->host_path, "cannot open /input/%s: %s", dest,
                                strerror(errno));
        c->stats.dirs++;
        c->dest_base = dest;
        r = fsx_walk(fd, &st, &root, &opts, &stage_ops, c, c->err);
        c->dest_base = "";
        if (r >= 0) {
                r = apply_meta(c, root.fd, &st, S_IRUSR | S_IXUSR, false);
                if (r < 0)
                        r = al_error(c->err, r, src->host_path,
                                     "cannot set owner, mode or times of /input/%s: %s", dest,
                                     strerror(-r));
        }
        close(root.fd);
        return r;
}

/* On ext2/3/4, marks the (empty, airlock-made) destination as the top of a
 * directory hierarchy (FS_TOPDIR_FL, chattr +T), so that the allocator
 * spreads the directories staged in it over the file system's block groups
 * (Orlov) instead of packing every new inode into the group of the
 * destination's parent. Why it matters: ext4 skips inodes freed in the last
 * minutes when it allocates (recently_deleted()), and a /tmp where copies
 * are made and removed all day has its groups full of them; a create there
 * cost 0.5-1.5 ms here against tens of microseconds in a fresh group
 * (10,000 files: 11-15 s against 0.75 s, measured with perf in
 * ext4_create). Best effort: no other file system, no error. */
static void spread_hint(int dest_dirfd)
{
        struct statfs sf;
        if (fstatfs(dest_dirfd, &sf) < 0 || sf.f_type != 0xEF53)
                return;
        int flags = 0;
        if (ioctl(dest_dirfd, FS_IOC_GETFLAGS, &flags) < 0 || (flags & FS_TOPDIR_FL))
                return;
        flags |= FS_TOPDIR_FL;
        (void)ioctl(dest_dirfd, FS_IOC_SETFLAGS, &flags);
}

static int stage_run(int dest_dirfd, const fsx_source *sources, size_t n_sources,
                     const fsx_limits *lim, uid_t owner, gid_t group, int prev_dirfd,
                     const fsx_manifest *prev, bool inplace, fsx_manifest **ret_manifest,
                     fsx_stage_stats *ret_stats, airlock_error *err)
{
        if (!lim || (n_sources && !sources))
                return al_error(err, -EINVAL, NULL, "staging: missing argument");
        /* In place serves one source, the workspace: with mounts, an entry
         * already there could be a collision as well as a previous version. */
        if (inplace && (n_sources != 1 || sources[0].dest || prev_dirfd < 0))
                return al_error(err, -EINVAL, NULL, "staging in place: one workspace only");
        stage_ctx c = {.lim = lim,
                       .err = err,
                       .owner = owner,
                       .group = group,
                       .umask = read_umask(),
                       .prev_dirfd = prev_dirfd,
                       .prev = prev_dirfd >= 0 ? prev : NULL,
                       .pp_fd = -1,
                       .inplace = inplace};
        /* Before any file is read: racy() measures from here. */
        clock_gettime(CLOCK_REALTIME, &c.t0);
        if (!inplace)
                spread_hint(dest_dirfd);
        if (ret_manifest) {
                c.out = calloc(1, sizeof(*c.out));
                if (!c.out)
                        return al_error(err, -ENOMEM, NULL, "out of memory");
        }
        int r = 0;
        /* The workspace first, then the mounts in the order given: a mount
         * that lands on a workspace entry is then a collision, never an
         * overwrite of it. */
        for (size_t i = 0; i < n_sources && r >= 0; i++)
                if (!sources[i].dest)
                        r = stage_source(&c, dest_dirfd, &sources[i]);
        for (size_t i = 0; i < n_sources && r >= 0; i++)
                if (sources[i].dest)
                        r = stage_source(&c, dest_dirfd, &sources[i]);
        free(c.buf);
        free(c.cmp);
        free(c.pp_rel);
        if (c.pp_fd >= 0)
                close(c.pp_fd);
        if (r < 0) {
                fsx_manifest_free(c.out);
                return r;
        }
        if (c.out) {
                if (c.out->n > 1)
                        qsort(c.out->v, c.out->n, sizeof(*c.out->v), mrec_cmp);
                c.out->sorted = true;
                c.out->bytes = c.stats.bytes;
                c.out->listed = c.listed;
                c.out->skipped = c.stats.skipped;
                *ret_manifest = c.out;
        }
        if (ret_stats)
                *ret_stats = c.stats;
        return 0;
}

int fsx_stage(int dest_dirfd, const fsx_source *sources, size_t n_sources, const fsx_limits *lim,
              uid_t owner, gid_t group, fsx_stage_stats *ret_stats, airlock_error *err)
{
        return fsx_error_utf8(err, stage_run(dest_dirfd, sources, n_sources, lim, owner, group, -1,
                                             NULL, false, NULL, ret_stats, err));
}

int fsx_stage_reuse(int dest_dirfd, const fsx_source *sources, size_t n_sources,
                    const fsx_limits *lim, uid_t owner, gid_t group, int prev_dirfd,
                    const fsx_manifest *prev, fsx_manifest **ret_manifest,
                    fsx_stage_stats *ret_stats, airlock_error *err)
{
        return fsx_error_utf8(err,
                              stage_run(dest_dirfd, sources, n_sources, lim, owner, group,
                                        prev_dirfd, prev, false, ret_manifest, ret_stats, err));
}

int fsx_stage_update(int dest_dirfd, const fsx_source *source, const fsx_limits *lim, uid_t owner,
                     gid_t group, const fsx_manifest *prev, fsx_manifest **ret_manifest,
                     fsx_stage_stats *ret_stats, airlock_error *err)
{
        return fsx_error_utf8(err, stage_run(dest_dirfd, source, 1, lim, owner, group, dest_dirfd,
                                             prev, true, ret_manifest, ret_stats, err));
}

/* ---- a delta: only the directories that changed ------------------------ */

/* A directory of the top layer whose owner, mode and times are set from
 * its source once the delta is done (its children all in place). */
typedef struct delta_dir {
        int fd;
        struct stat src;
} delta_dir;

typedef struct delta_ctx {
        stage_ctx c;
        int src_root;
        dev_t root_dev;
        struct stat root_st; /* src_root's */
        int top;
        bool layered;
        const int *lower; /* the layers below top, the nearest first */
        size_t n_lower;
        const fsx_manifest *prev;
        const fsx_hashes *known; /* the version's signature's content hashes, or NULL */
        bool *handled;           /* per prev record: directly in a dirty directory */
        fsx_manifest *fresh;     /* the records of the dirty directories */
        delta_dir *touched;
        size_t n_touched, cap_touched;
        uint64_t bytes, listed; /* the new version's totals */
        /* The totals without the directory being staged (delta_one): what
         * its files add to them is checked against the caps before each
         * copy, not only once the directory is done. */
        uint64_t dir_base_bytes, dir_base_listed;
} delta_ctx;

static int delta_touch(delta_ctx *d, int fd, const struct stat *src)
{
        if (d->n_touched == d->cap_touched) {
                size_t nc = d->cap_touched ? d->cap_touched * 2 : 16;
                delta_dir *nv = realloc(d->touched, nc * sizeof(*nv));
                if (!nv)
                        return -ENOMEM;
                d->touched = nv;
                d->cap_touched = nc;
        }
        int dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
        if (dup_fd < 0)
                return -errno;
        d->touched[d->n_touched++] = (delta_dir){.fd = dup_fd, .src = *src};
        return 0;
}

/* The source directory rel (beneath the source root, no link followed, on
 * the root's device) and its stat; -1 when it cannot be (the caller falls
 * back to a full staging). */
static int delta_src_dir(delta_ctx *d, const char *rel, struct stat *st)
{
        int fd = *rel ? fsx_open_beneath(d->src_root, rel, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0)
                      : openat(d->src_root, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return -1;
        if (fstat(fd, st) < 0 || !S_ISDIR(st->st_mode) || st->st_dev != d->root_dev) {
                close(fd);
                return -1;
        }
        return fd;
}

/* Opens the directory rel of the top layer, each component beneath the
 * last with O_NOFOLLOW. In a layer of its own (d->layered) missing ones
 * are made (0700, their metadata set from their source at the end); in a
 * single tree a missing one means the tree is not what the manifest says:
 * -1, a full staging. Each directory the delta writes in is made writable
 * by its owner until the end. */
static int delta_top_dir(delta_ctx *d, const char *rel)
{
        int cur = openat(d->top, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (cur < 0)
                return -1;
        _cleanup_free_ char *path = strdup(rel);
        if (!path) {
                close(cur);
                return -1;
        }
        for (char *s = path; *s;) {
                char *e = strchrnul(s, '/');
                bool end = *e == '\0';
                *e = '\0';
                int fd = openat(cur, s, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (fd < 0 && errno == ENOENT && d->layered) {
                        struct stat pst, sst;
                        if (fstat(cur, &pst) < 0 || fchmod(cur, (pst.st_mode & 0777) | S_IRWXU) < 0)
                                goto fail;
                        int sfd = delta_src_dir(d, path, &sst);
                        if (sfd < 0)
                                goto fail;
                        close(sfd);
                        if (mkdirat(cur, s, 0700) < 0)
                                goto fail;
                        fd = openat(cur, s, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                        if (fd >= 0 && delta_touch(d, fd, &sst) < 0) {
                                close(fd);
                                goto fail;
                        }
                }
                if (fd < 0)
                        goto fail;
                close(cur);
                cur = fd;
                if (!end)
                        *e = '/';
                s = end ? e : e + 1;
        }
        return cur;
fail:
        close(cur);
        return -1;
}

static bool same_identity(const fsx_mrec *m, const struct stat *st)
{
        return m->sdev == st->st_dev && m->sino == st->st_ino && m->size == st->st_size &&
               m->mode == st->st_mode && m->mtim.tv_sec == st->st_mtim.tv_sec &&
               m->mtim.tv_nsec == st->st_mtim.tv_nsec && m->ctim.tv_sec == st->st_ctim.tv_sec &&
               m->ctim.tv_nsec == st->st_ctim.tv_nsec;
}

/* The index of the first record of d->prev whose path is >= key. */
static size_t manifest_lower(const fsx_manifest *m, const char *key)
{
        size_t lo = 0, hi = m->n;
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (strcmp(m->v[mid].path, key) < 0)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return lo;
}

/* True when the copy that record m vouches for (found as the topmost entry
 * of its path in the top layer, then the lower ones; a whiteout or another
 * inode there ends the search) holds the first size bytes of the source
 * file name of sfd. For a record whose identity is racy (racy()): the same
 * comparison as reuse_previous makes before a link. */
static bool delta_same_bytes(delta_ctx *d, const fsx_mrec *m, int sfd, const char *name,
                             const char *rel, uint64_t size)
{
        _cleanup_close_ int in =
            openat(sfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        if (in < 0)
                return false;
        for (size_t i = 0; i <= d->n_lower; i++) {
                int layer = i == 0 ? d->top : d->lower[i - 1];
                int pfd = *rel ? fsx_open_beneath(layer, rel, O_PATH | O_DIRECTORY | O_NOFOLLOW, 0)
                               : fcntl(layer, F_DUPFD_CLOEXEC, 0);
                if (pfd < 0)
                        continue; /* not in this layer */
                struct stat cst;
                int k = fstatat(pfd, name, &cst, AT_SYMLINK_NOFOLLOW);
                if (k < 0) {
                        close(pfd);
                        continue;
                }
                bool ok = false;
                if (S_ISREG(cst.st_mode) && cst.st_ino == m->cino && cst.st_dev == m->cdev) {
                        int cf = openat(pfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
                        ok = cf >= 0 && same_bytes(&d->c, in, cf, size);
                        if (cf >= 0)
                                close(cf);
                }
                close(pfd);
                return ok;
        }
        return false;
}

/* The copy that record m vouches for (as delta_same_bytes finds it), read
 * and hashed as the tree signature hashes a file's content: true when that
 * is hex, the hash the signature of this version took of the source. The
 * copy is on this machine's disk; the source, perhaps on a network file
 * system, is not read again. */
static bool delta_copy_hashes_to(delta_ctx *d, const fsx_mrec *m, const char *name, const char *rel,
                                 uint64_t size, const char hex[33])
{
        for (size_t i = 0; i <= d->n_lower; i++) {
                int layer = i == 0 ? d->top : d->lower[i - 1];
                _cleanup_close_ int pfd =
                    *rel ? fsx_open_beneath(layer, rel, O_PATH | O_DIRECTORY | O_NOFOLLOW, 0)
                         : fcntl(layer, F_DUPFD_CLOEXEC, 0);
                if (pfd < 0)
                        continue; /* not in this layer */
                struct stat cst;
                if (fstatat(pfd, name, &cst, AT_SYMLINK_NOFOLLOW) < 0)
                        continue;
                if (!S_ISREG(cst.st_mode) || cst.st_ino != m->cino || cst.st_dev != m->cdev ||
                    (uint64_t)cst.st_size != size)
                        return false;
                _cleanup_close_ int cf =
                    openat(pfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
                return cf >= 0 && fsx_content_hash_is(cf, size, hex);
        }
        return false;
}

/* Copies the checked source file name of sfd (lstat st) into tfd, over
 * whatever the top layer had there. 1 to fall back, 0 done, -errno. */
static int delta_copy_from(delta_ctx *d, int in, const void *data, const struct stat *st_in,
                           int tfd, const char *name, const char *ipath);
static int delta_copy(delta_ctx *d, int sfd, int tfd, const char *name, const struct stat *lst,
                      const char *ipath)
{
        _cleanup_close_ int in =
            openat(sfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        struct stat st;
        /* The size too: the caps were checked against lst's, and a file
         * grown since would be copied whole past them. */
        if (in < 0 || fstat(in, &st) < 0 || !S_ISREG(st.st_mode) || st.st_ino != lst->st_ino ||
            st.st_dev != lst->st_dev || st.st_size != lst->st_size)
                return 1;
        return delta_copy_from(d, in, NULL, &st, tfd, name, ipath);
}

/* Writes the len bytes data to out. 0 or -errno. */
static int write_all(int out, const void *data, size_t len)
{
        const unsigned char *p = data;
        while (len) {
                ssize_t n = write(out, p, len);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                p += n;
                len -= (size_t)n;
        }
        return 0;
}

/* Copies the open, checked source file in (st_in its fstat, against which
 * the caps were checked), or its bytes data as the signature read them
 * (in -1), into tfd as name, over whatever the top layer had there. 1 to
 * fall back, 0 done, -errno. */
static int delta_copy_from(delta_ctx *d, int in, const void *data, const struct stat *st_in,
                           int tfd, const char *name, const char *ipath)
{
        stage_ctx *c = &d->c;
        const struct stat st = *st_in;
        if (unlinkat(tfd, name, 0) < 0 && errno != ENOENT)
                return 1; /* a directory there: the tree's shape changed */
        mode_t mode = (st.st_mode & 0777) | S_IRUSR;
        bool mode_set = (mode & ~c->umask) == mode;
        _cleanup_close_ int out =
            openat(tfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                   mode_set ? mode : 0600);
        if (out < 0)
                return 1;
        int r = data ? write_all(out, data, (size_t)st.st_size)
                     : copy_data(c, in, out, (uint64_t)st.st_size);
        if (r == -ENODATA)
                return 1;
        if (r < 0)
                return al_error(c->err, r, ipath, "cannot copy %s: %s", ipath, strerror(-r));
        r = apply_meta(c, out, &st, S_IRUSR, mode_set);
        if (r < 0)
                return al_error(c->err, r, ipath, "cannot set owner, mode or times of %s: %s",
                                ipath, strerror(-r));
        struct stat cst;
        if (fstat(out, &cst) < 0 || manifest_add(d->fresh, ipath, &st, &cst, racy(c, &st)) < 0)
                return al_error(c->err, -ENOMEM, NULL, "out of memory");
        c->stats.files++;
        return 0;
}

/* Brings the directory rel of the top layer up to its source: every
 * regular file whose identity differs from its record (or whose record
 * needs its bytes compared) is copied; a record whose file is gone is
 * removed from the top layer and, over lower layers, hidden by a whiteout
 * (a 0/0 character device, which overlayfs reads as "no such entry").
 * 1 when a full staging must do it instead: anything but regular files and
 * directories, a directory not on the root's device, a cap passed, a
 * directory that was not one before. */
/* One entry n (ipath under the workspace's root) of the changed directory
 * rel (sfd), staged into tfd: a file whose identity its record vouches for (and
 * whose bytes match, when the record is racy) keeps its copy, any other is
 * copied; seen marks its record among the directory's (from lo). 1 hands
 * the version to a full staging (a link, a FIFO, a new directory, a cap),
 * negative is an error. */
static int delta_entry(delta_ctx *d, const char *rel, int sfd, int tfd, const char *n,
                       const char *ipath, size_t lo, bool *seen, uint64_t *new_files,
                       uint64_t *new_bytes)
{
        stage_ctx *c = &d->c;
        struct stat st;
        if (fstatat(sfd, n, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return 1;
        const fsx_mrec *m = manifest_find(d->prev, ipath);
        if (m)
                seen[m - d->prev->v - lo] = true;
        if (S_ISDIR(st.st_mode))
                /* Directories come and go only with a full walk (fsx_watch):
                 * this one was there before. */
                return m || st.st_dev != d->root_dev ? 1 : 0;
        if (!S_ISREG(st.st_mode))
                return 1; /* a link is refused, a FIFO skipped: by a full staging */
        (*new_files)++;
        *new_bytes += (uint64_t)st.st_size;
        /* Past a cap, before anything more is copied: the full staging
         * then names the cap. */
        if (d->dir_base_listed + *new_files > c->lim->max_files ||
            (uint64_t)st.st_size > c->lim->max_bytes ||
            d->dir_base_bytes + *new_bytes > c->lim->max_bytes)
                return 1;
        /* Larger files are vouched for by their identity alone, as in
         * reuse_previous and the tree signatures. */
        bool compare = m && m->compare && (uint64_t)st.st_size < REUSE_COMPARE;
        /* The signature of this version read the file with this very
         * identity: its hash stands for the source's bytes. */
        const fsx_sig_file *k = compare ? fsx_hashes_find(d->known, ipath) : NULL;
        if (k && (k->ino != st.st_ino || k->size != st.st_size ||
                  k->mtim.tv_sec != st.st_mtim.tv_sec || k->mtim.tv_nsec != st.st_mtim.tv_nsec ||
                  k->ctim.tv_sec != st.st_ctim.tv_sec || k->ctim.tv_nsec != st.st_ctim.tv_nsec))
                k = NULL;
        if (m && same_identity(m, &st) &&
            (!compare || (k ? delta_copy_hashes_to(d, m, n, rel, (uint64_t)st.st_size, k->hex)
                            : delta_same_bytes(d, m, sfd, n, rel, (uint64_t)st.st_size)))) {
                if (manifest_add(d->fresh, ipath, &st,
                                 &(struct stat){.st_dev = m->cdev, .st_ino = m->cino},
                                 compare ? racy(c, &st) : m->compare) < 0)
                        return al_error(c->err, -ENOMEM, NULL, "out of memory");
                return 0;
        }
        return delta_copy(d, sfd, tfd, n, &st, ipath);
}

static int delta_one(delta_ctx *d, const char *rel)
{
        stage_ctx *c = &d->c;
        struct stat sst;
        _cleanup_close_ int sfd = delta_src_dir(d, rel, &sst);
        if (sfd < 0)
                return 1;
        _cleanup_close_ int tfd = delta_top_dir(d, rel);
        if (tfd < 0)
                return 1;
        struct stat tst;
        if (fstat(tfd, &tst) < 0 || fchmod(tfd, (tst.st_mode & 0777) | S_IRWXU) < 0)
                return 1;
        int r = delta_touch(d, tfd, &sst);
        if (r < 0)
                return al_error(c->err, r, NULL, "out of memory");

        /* The records directly in rel: those under "rel/" with no further
         * slash (contiguous in the sorted manifest, with deeper ones among
         * them). */
        size_t lr = strlen(rel);
        _cleanup_free_ char *prefix = malloc(lr + 2);
        if (!prefix)
                return al_error(c->err, -ENOMEM, NULL, "out of memory");
        memcpy(prefix, rel, lr);
        if (lr)
                prefix[lr++] = '/';
        prefix[lr] = '\0';
        size_t lo = manifest_lower(d->prev, prefix), hi = lo;
        uint64_t old_files = 0, old_bytes = 0;
        while (hi < d->prev->n && strncmp(d->prev->v[hi].path, prefix, lr) == 0) {
                const fsx_mrec *m = &d->prev->v[hi];
                if (!strchr(m->path + lr, '/')) {
                        d->handled[hi] = true;
                        old_files++;
                        old_bytes += (uint64_t)m->size;
                }
                hi++;
        }
        d->dir_base_listed = d->listed - old_files;
        d->dir_base_bytes = d->bytes - old_bytes;
        bool *seen = calloc(hi - lo + 1, sizeof(*seen));
        int lfd = openat(sfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        DIR *dir = lfd >= 0 ? fdopendir(lfd) : NULL;
        if (!seen || !dir) {
                free(seen);
                if (dir)
                        closedir(dir);
                else if (lfd >= 0)
                        close(lfd);
                return 1;
        }
        uint64_t new_files = 0, new_bytes = 0;
        r = 0;
        struct dirent *de;
        _cleanup_free_ char *ipath = NULL;
        size_t ipath_cap = 0;
        while (r == 0 && (errno = 0, de = readdir(dir))) {
                const char *n = de->d_name;
                if (n[0] == '.' && (!n[1] || (n[1] == '.' && !n[2])))
                        continue;
                size_t ln = strlen(n);
                if (lr + ln + 1 > ipath_cap) {
                        ipath_cap = lr + ln + 64;
                        char *np = realloc(ipath, ipath_cap);
                        if (!np) {
                                r = al_error(c->err, -ENOMEM, NULL, "out of memory");
                                break;
                        }
                        ipath = np;
                }
                memcpy(ipath, prefix, lr);
                memcpy(ipath + lr, n, ln + 1);
                r = delta_entry(d, rel, sfd, tfd, n, ipath, lo, seen, &new_files, &new_bytes);
        }
        if (r == 0 && errno)
                r = 1;
        closedir(dir);
        /* What the source no longer has. */
        for (size_t i = lo; r == 0 && i < hi; i++) {
                if (!d->handled[i] || seen[i - lo])
                        continue;
                const char *name = d->prev->v[i].path + lr;
                if (unlinkat(tfd, name, 0) < 0 && errno != ENOENT) {
                        r = 1;
                        break;
                }
                if (d->layered && mknodat(tfd, name, S_IFCHR | 0000, makedev(0, 0)) < 0)
                        r = 1;
        }
        free(seen);
        if (r != 0)
                return r;
        d->listed = d->listed - old_files + new_files;
        d->bytes = d->bytes - old_bytes + new_bytes;
        if (d->listed > c->lim->max_files || d->bytes > c->lim->max_bytes)
                return 1;
        return 0;
}

/* Whether path's folder (its text up to the last '/') is one of dirs. */
static bool in_dirs(const char *path, const char *const *dirs, size_t n)
{
        const char *slash = strrchr(path, '/');
        size_t len = slash ? (size_t)(slash - path) : 0;
        for (size_t i = 0; i < n; i++)
                if (strlen(dirs[i]) == len && strncmp(dirs[i], path, len) == 0)
                        return true;
        return false;
}

/* Brings the one file path of the top layer up to its source, by itself:
 * a file that changed alone in its directory (told file by file). Its
 * directory is opened (beneath the root, no link followed, on the root's
 * device) but neither listed nor its other entries looked at; the file is
 * copied anew, or, gone, removed and (over lower layers) hidden by a
 * whiteout. 1 hands the version to a full staging (not a regular file, a
 * removal of a file the last version did not have, a cap passed). */
static int delta_file(delta_ctx *d, const char *path)
{
        stage_ctx *c = &d->c;
        const char *slash = strrchr(path, '/');
        const char *name = slash ? slash + 1 : path;
        _cleanup_free_ char *rel = strndup(path, slash ? (size_t)(slash - path) : 0);
        if (!rel)
                return al_error(c->err, -ENOMEM, NULL, "out of memory");
        if (!*name || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
                return 1;
        struct stat sst, tst, st;
        /* The root's own fd for the root (each open, stat and close of a
         * network file system is a round trip to its server). */
        _cleanup_close_ int own = *rel ? delta_src_dir(d, rel, &sst) : -1;
        int sfd = *rel ? own : d->src_root;
        if (!*rel)
                sst = d->root_st;
        if (sfd < 0)
                return 1;
        _cleanup_close_ int tfd = delta_top_dir(d, rel);
        if (tfd < 0 || fstat(tfd, &tst) < 0 || fchmod(tfd, (tst.st_mode & 0777) | S_IRWXU) < 0)
                return 1;
        int r = delta_touch(d, tfd, &sst);
        if (r < 0)
                return al_error(c->err, r, NULL, "out of memory");
        const fsx_mrec *m = manifest_find(d->prev, path);
        if (m) {
                if (d->handled[m - d->prev->v])
                        return 0; /* named twice */
                d->handled[m - d->prev->v] = true;
                d->listed--;
                d->bytes -= (uint64_t)m->size;
        }
        /* A file the signature of this version read whole (a told file):
         * its bytes are the version's, so it is staged from them, the
         * source not opened again (each open, read and close a round trip
         * on a network file system). Else only ever a regular file: a
         * device node put in its place (any host of a shared volume may)
         * opens a device of this machine's. */
        const fsx_kept_file *k = fsx_hashes_kept(d->known, path);
        _cleanup_close_ int in = k ? -1 : al_open_regular(sfd, name, O_RDONLY | O_NONBLOCK);
        if (!k && in < 0) {
                if (in != -ENOENT || !m)
                        return 1;
                if (unlinkat(tfd, name, 0) < 0 && errno != ENOENT)
                        return 1;
                if (d->layered && mknodat(tfd, name, S_IFCHR | 0000, makedev(0, 0)) < 0)
                        return 1;
                return 0;
        }
        if (k)
                st = (struct stat){.st_dev = d->root_dev,
                                   .st_ino = k->rec.ino,
                                   .st_mode = k->rec.mode,
                                   .st_size = k->rec.size,
                                   .st_atim = k->rec.mtim,
                                   .st_mtim = k->rec.mtim,
                                   .st_ctim = k->rec.ctim};
        else if (fstat(in, &st) < 0)
                return 1;
        if (!S_ISREG(st.st_mode) || st.st_dev != d->root_dev)
                return 1; /* another file system (a mount point): a full staging names it */
        d->listed++;
        d->bytes += (uint64_t)st.st_size;
        if (d->listed > c->lim->max_files || (uint64_t)st.st_size > c->lim->max_bytes ||
            d->bytes > c->lim->max_bytes)
                return 1;
        return delta_copy_from(d, in, k ? k->data : NULL, &st, tfd, name, path);
}

int fsx_stage_delta(int top_fd, const int *lower, size_t n_lower, const char *host_path,
                    const char *const *dirs, size_t n_dirs, const char *const *files,
                    size_t n_files, const fsx_hashes *known, const fsx_limits *lim, uid_t owner,
                    gid_t group, const fsx_manifest *prev, fsx_manifest **ret_manifest,
                    fsx_stage_stats *ret_stats, airlock_error *err)
{
        bool layered = n_lower > 0;
        *ret_manifest = NULL;
        /* Totals that the delta cannot carry: a version that skipped
         * entries (how many a directory held is not recorded). */
        if (!prev || !prev->sorted || prev->skipped || !host_path || !lim)
                return 1;
        delta_ctx d = {
            .c = {.lim = lim,
                  .err = err,
                  .owner = owner,
                  .group = group,
                  .umask = read_umask(),
                  .prev_dirfd = -1,
                  .pp_fd = -1},
            .top = top_fd,
            .layered = layered,
            .lower = lower,
            .n_lower = n_lower,
            .prev = prev,
            .known = known,
            .bytes = prev->bytes,
            .listed = prev->listed,
        };
        clock_gettime(CLOCK_REALTIME, &d.c.t0);
        struct stat rst;
        d.src_root = open(host_path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (d.src_root < 0 || fstat(d.src_root, &rst) < 0) {
                if (d.src_root >= 0)
                        close(d.src_root);
                return 1;
        }
        d.root_dev = rst.st_dev;
        d.root_st = rst;
        d.c.remote = fsx_remote_fs(d.src_root, NULL);
        d.handled = calloc(prev->n + 1, sizeof(*d.handled));
        d.fresh = calloc(1, sizeof(*d.fresh));
        int r = d.handled && d.fresh ? 0 : al_error(err, -ENOMEM, NULL, "out of memory");
        for (size_t i = 0; r == 0 && i < n_dirs; i++)
                r = delta_one(&d, dirs[i]);
        for (size_t i = 0; r == 0 && i < n_files; i++)
                if (!in_dirs(files[i], dirs, n_dirs))
                        r = delta_file(&d, files[i]);
        /* Owner, mode and times of every directory written in, deepest
         * first, once nothing more is created in them. */
        for (size_t i = d.n_touched; i-- > 0;) {
                if (r == 0 && apply_meta(&d.c, d.touched[i].fd, &d.touched[i].src,
                                         S_IRUSR | S_IXUSR, false) < 0)
                        r = 1;
                close(d.touched[i].fd);
        }
        free(d.touched);
        close(d.src_root);
        free(d.c.buf);
        free(d.c.cmp); /* same_bytes's buffer, made on the first racy record */
        fsx_manifest *out = NULL;
        if (r == 0) {
                /* The new manifest: the untouched records and the fresh
                 * ones, merged in path order. */
                if (d.fresh->n > 1)
                        qsort(d.fresh->v, d.fresh->n, sizeof(*d.fresh->v), mrec_cmp);
                out = calloc(1, sizeof(*out));
                size_t cap = prev->n + d.fresh->n;
                if (!out || !(out->v = malloc((cap ? cap : 1) * sizeof(*out->v)))) {
                        r = al_error(err, -ENOMEM, NULL, "out of memory");
                } else {
                        out->cap = cap;
                        size_t i = 0, j = 0;
                        while (r == 0 && (i < prev->n || j < d.fresh->n)) {
                                if (i < prev->n && d.handled[i]) {
                                        i++;
                                        continue;
                                }
                                bool take_prev = j == d.fresh->n ||
                                                 (i < prev->n &&
                                                  strcmp(prev->v[i].path, d.fresh->v[j].path) < 0);
                                if (take_prev) {
                                        out->v[out->n] = prev->v[i++];
                                        if (!(out->v[out->n].path = strdup(out->v[out->n].path)))
                                                r = al_error(err, -ENOMEM, NULL, "out of memory");
                                        else
                                                out->n++;
                                } else {
                                        out->v[out->n++] = d.fresh->v[j];
                                        d.fresh->v[j++].path = NULL; /* moved */
                                }
                        }
                        out->sorted = true;
                        out->bytes = d.bytes;
                        out->listed = d.listed;
                }
        }
        if (d.fresh) {
                for (size_t j = 0; j < d.fresh->n; j++)
                        free(d.fresh->v[j].path);
                free(d.fresh->v);
                free(d.fresh);
        }
        free(d.handled);
        if (r != 0) {
                fsx_manifest_free(out);
                return r;
        }
        if (ret_stats)
                *ret_stats = d.c.stats;
        *ret_manifest = out;
        return 0;
}
