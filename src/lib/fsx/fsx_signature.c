/* Tree signatures for cache staleness, and the small 128-bit hash under
 * them. The walk and its refusals are those of staging, so a tree that would
 * not stage has no signature either. */
#include "fsx/fsx.h"
#include "fsx/fsx_internal.h"
#include "core/util.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- hash -------------------------------------------------------------- */

#define P1 0x9E3779B97F4A7C15ull
#define P2 0xC2B2AE3D27D4EB4Full
#define P3 0x165667B19E3779F9ull
#define P4 0x85EBCA77C2B2AE63ull

static inline uint64_t rotl(uint64_t x, int r)
{
        return (x << r) | (x >> (64 - r));
}

static inline uint64_t fmix(uint64_t k)
{
        k ^= k >> 33;
        k *= 0xff51afd7ed558ccdull;
        k ^= k >> 33;
        k *= 0xc4ceb9fe1a85ec53ull;
        k ^= k >> 33;
        return k;
}

void fsx_hash_init(fsx_hash *h)
{
        h->a = P1;
        h->b = P3;
        h->len = 0;
}

/* Two lanes with different multipliers and rotations over 8-byte words; the
 * tail and the length of each update are mixed in, so update boundaries are
 * part of the input (callers feed the same boundaries for the same tree). */
void fsx_hash_update(fsx_hash *h, const void *data, size_t len)
{
        const unsigned char *p = data;
        uint64_t a = h->a, b = h->b;
        size_t i = 0;
        for (; i + 8 <= len; i += 8) {
                uint64_t w;
                memcpy(&w, p + i, 8);
                a = rotl(a ^ (w * P2), 31) * P1;
                b = rotl(b + (w * P4), 27) * P3 + 0x52dce729;
        }
        uint64_t t = 0;
        for (size_t k = 0; i + k < len; k++)
                t |= (uint64_t)p[i + k] << (8 * k);
        t ^= (uint64_t)len << 56;
        a = rotl(a ^ (t * P2), 31) * P1;
        b = rotl(b + (t * P4), 27) * P3 + 0x38495ab5;
        h->a = a;
        h->b = b;
        h->len += len;
}

void fsx_hash_u64(fsx_hash *h, uint64_t v)
{
        fsx_hash_update(h, &v, sizeof(v));
}

void fsx_hash_final(const fsx_hash *h, char ret_hex[33])
{
        uint64_t a = h->a ^ h->len, b = h->b ^ (h->len * P2);
        a = fmix(a);
        b = fmix(b);
        a += b;
        b += a;
        static const char hex[] = "0123456789abcdef";
        uint64_t v[2] = {a, b};
        for (int i = 0; i < 2; i++)
                for (int k = 0; k < 16; k++)
                        ret_hex[i * 16 + k] = hex[(v[i] >> (60 - 4 * k)) & 0xf];
        ret_hex[32] = '\0';
}

/* ---- signature --------------------------------------------------------- */

typedef struct sig_ctx {
        const fsx_limits *lim;
        const fsx_sig_hook *hook;
        airlock_error *err;
        uint64_t threshold;
        uint64_t bytes;
        fsx_hash h;      /* a file root's hash */
        fsx_hash *dir_h; /* one per directory of state, while walking */
        size_t cap_h;
        fsx_sig_state *state;
        bool keep_rel;
        bool keep_files; /* each file's content hash, in its directory's record */
        const uint64_t *listed;
        fsx_hashes *kept; /* told files' bytes, for staging (fsx_tree_signature_files) */
        /* The directory entered last, whose own listing count is settled at
         * the next callback: the walk lists a directory whole right after
         * entering it, before any callback for its entries. */
        size_t pending;
        uint64_t pending_from;
        unsigned char *buf;
} sig_ctx;

#define SIG_BUF    (64 * 1024)
#define NO_PENDING SIZE_MAX

static void sig_files_free(fsx_sig_dir *d)
{
        for (size_t i = 0; i < d->n_files; i++)
                free(d->files[i].name);
        free(d->files);
        d->files = NULL;
        d->n_files = d->cap_files = 0;
}

/* Records the content hash of file name (st) in d. 0 or -ENOMEM. */
static int sig_file_keep(fsx_sig_dir *d, const char *name, size_t len, const struct stat *st,
                         const char *hex)
{
        if (d->n_files == d->cap_files) {
                size_t nc = d->cap_files ? d->cap_files * 2 : 8;
                fsx_sig_file *nv = realloc(d->files, nc * sizeof(*nv));
                if (!nv)
                        return -ENOMEM;
                d->files = nv;
                d->cap_files = nc;
        }
        char *n = strndup(name, len);
        if (!n)
                return -ENOMEM;
        fsx_sig_file *f = &d->files[d->n_files++];
        *f = (fsx_sig_file){.name = n,
                            .ino = st->st_ino,
                            .size = st->st_size,
                            .mtim = st->st_mtim,
                            .ctim = st->st_ctim,
                            .mode = st->st_mode,
                            .hashed = hex != NULL};
        if (hex)
                memcpy(f->hex, hex, 33);
        return 0;
}

void fsx_sig_state_free(fsx_sig_state *s)
{
        if (!s)
                return;
        for (size_t i = 0; i < s->n; i++) {
                free(s->dirs[i].rel);
                sig_files_free(&s->dirs[i]);
        }
        free(s->dirs);
        *s = (fsx_sig_state){0};
}

static void hash_meta(fsx_hash *h, char kind, const char *rel, size_t rel_len,
                      const struct stat *st)
{
        fsx_hash_update(h, &kind, 1);
        fsx_hash_update(h, rel, rel_len);
        fsx_hash_u64(h, (uint64_t)st->st_mode);
        fsx_hash_u64(h, (uint64_t)st->st_size);
        fsx_hash_u64(h, (uint64_t)st->st_mtim.tv_sec);
        fsx_hash_u64(h, (uint64_t)st->st_mtim.tv_nsec);
        fsx_hash_u64(h, (uint64_t)st->st_ino);
}

/* Adds the content of a small file, read from its checked fd, so an edit
 * that keeps size and mtime (within one timestamp tick) still shows.
 * Returns 0 over the threshold, 1 with ret_hex the hash of its size bytes,
 * 2 when the file ended before size bytes (it shrank since its fstat, or
 * a client's attribute cache is behind its server): ret_hex is then the
 * hash of the bytes that came, which is not that of a file of size bytes,
 * and the buffer past them is not the file's (a caller that keeps its
 * bytes must refuse it: apply_file). -errno on a read error. */
static int hash_content(sig_ctx *c, fsx_hash *h, int fd, uint64_t size, const char *path,
                        char ret_hex[33])
{
        if (size >= c->threshold)
                return 0;
        if (!c->buf) {
                c->buf = malloc(SIG_BUF);
                if (!c->buf)
                        return al_error(c->err, -ENOMEM, NULL, "out of memory");
        }
        fsx_hash content;
        fsx_hash_init(&content);
        uint64_t left = size;
        off_t off = 0;
        while (left > 0) {
                /* A file that fits is read whole into the buffer, for
                 * a caller that keeps its bytes (apply_file). */
                unsigned char *into = size <= SIG_BUF ? c->buf + off : c->buf;
                ssize_t n = pread(fd, into, MIN(left, SIG_BUF), off);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return al_error(c->err, -errno, path, "cannot read %s: %s", path,
                                        strerror(errno));
                if (n == 0)
                        break; /* shrank: the metadata no longer matches anyway */
                fsx_hash_update(&content, into, (size_t)n);
                off += n;
                left -= (uint64_t)n;
        }
        char hex[33];
        fsx_hash_final(&content, hex);
        fsx_hash_update(h, hex, 32);
        if (ret_hex)
                memcpy(ret_hex, hex, 33);
        return left ? 2 : 1;
}

static void settle(sig_ctx *c)
{
        if (c->pending == NO_PENDING)
                return;
        c->state->dirs[c->pending].listed = *c->listed - c->pending_from;
        c->pending = NO_PENDING;
}

/* Adds the record of a directory about to be listed; its index + 1 is the
 * walk's data for its entries. */
static int add_dir(sig_ctx *c, const char *rel, size_t rel_len, int fd, const struct stat *st,
                   bool is_root, size_t *ret_idx)
{
        fsx_sig_state *s = c->state;
        if (s->n == s->cap || s->n == c->cap_h) {
                size_t nc = s->cap ? s->cap * 2 : 16;
                fsx_sig_dir *nd = realloc(s->dirs, nc * sizeof(*nd));
                if (nd)
                        s->dirs = nd, s->cap = nc;
                fsx_hash *nh = nd ? realloc(c->dir_h, nc * sizeof(*nh)) : NULL;
                if (nh)
                        c->dir_h = nh, c->cap_h = nc;
                if (!nd || !nh)
                        return al_error(c->err, -ENOMEM, NULL, "out of memory");
        }
        char *r = c->keep_rel ? strndup(rel, rel_len) : NULL;
        if (c->keep_rel && !r)
                return al_error(c->err, -ENOMEM, NULL, "out of memory");
        size_t i = s->n++;
        s->dirs[i] = (fsx_sig_dir){.rel = r,
                                   .dev = st->st_dev,
                                   .ino = st->st_ino,
                                   .wd = -1,
                                   .mode = st->st_mode,
                                   .size = st->st_size,
                                   .mtim = st->st_mtim,
                                   .ctim = st->st_ctim};
        fsx_hash_init(&c->dir_h[i]);
        /* The hook sees the directory before it is listed: a change made
         * after the hook's watch is set shows as an event, one made before
         * shows in the listing. */
        if (c->hook)
                s->dirs[i].wd = c->hook->entered(c->hook->ctx, fd, st, is_root);
        hash_meta(&c->dir_h[i], 'd', rel, rel_len, st);
        c->pending = i;
        c->pending_from = *c->listed;
        *ret_idx = i;
        return 0;
}

static int sig_refuse(void *ctx, const fsx_item *it, fsx_reason r)
{
        sig_ctx *c = ctx;
        if (c->listed)
                settle(c);
        if (r == FSX_NOT_REGULAR || r == FSX_MOUNT_POINT)
                return 0; /* staging skips them; they change nothing staged */
        return fsx_stage_refusal(it, r, c->lim, c->err);
}

static int sig_file_fd(sig_ctx *c, fsx_hash *h, fsx_sig_dir *dir, int fd, const struct stat *st,
                       const char *name, size_t name_len, const char *path)
{
        uint64_t *dir_bytes = dir ? &dir->bytes : NULL;
        uint64_t size = (uint64_t)st->st_size;
        if (size > c->lim->max_bytes || size > c->lim->max_bytes - c->bytes)
                return al_error(c->err, -EFBIG, path,
                                "too large: staging %s (%llu bytes) would exceed the staging cap "
                                "of %llu bytes",
                                path, (unsigned long long)size,
                                (unsigned long long)c->lim->max_bytes);
        c->bytes += size;
        if (dir_bytes)
                *dir_bytes += size;
        hash_meta(h, 'f', name, name_len, st);
        char hex[33];
        int r = hash_content(c, h, fd, size, path, hex);
        /* Every regular file is kept (those over the threshold without a
         * hash), so that a folder's digest can be made again from its
         * records (fsx_tree_signature_files). */
        if (r >= 0 && dir && c->keep_files &&
            sig_file_keep(dir, name, name_len, st, r >= 1 ? hex : NULL) < 0)
                return al_error(c->err, -ENOMEM, NULL, "out of memory");
        return r < 0 ? r : 0;
}

/* -ECANCELED with err filled once the hook's stop is set, else 0. */
static int stopped(const sig_ctx *c)
{
        if (!c->hook || !c->hook->stop || !atomic_load(c->hook->stop))
                return 0;
        return al_error(c->err, -ECANCELED, NULL, "the walk was stopped: its owner is closing");
}

static int sig_file(void *ctx, const fsx_item *it)
{
        sig_ctx *c = ctx;
        settle(c);
        int stop = stopped(c);
        if (stop < 0)
                return stop;
        size_t di = (size_t)(uintptr_t)it->parent_data - 1;
        struct stat st;
        fsx_reason reason = FSX_CHANGED;
        _cleanup_close_ int fd = fsx_open_listed(it, &st, &reason);
        if (fd == -EAGAIN)
                return reason == FSX_MOUNT_POINT ? 0 : sig_refuse(c, it, reason);
        if (fd == -ENOENT)
                return 0;
        if (fd < 0)
                return al_error(c->err, fd, it->path, "cannot open %s: %s", it->path,
                                strerror(-fd));
        return sig_file_fd(c, &c->dir_h[di], &c->state->dirs[di], fd, &st, it->name, it->name_len,
                           it->path);
}

static int sig_dir_enter(void *ctx, const fsx_item *it, int fd, const struct stat *st,
                         void **ret_data)
{
        sig_ctx *c = ctx;
        settle(c);
        size_t i;
        int r = stopped(c);
        if (r == 0)
                r = add_dir(c, it->rel, it->rel_len, fd, st, false, &i);
        if (r < 0)
                return r;
        *ret_data = (void *)(uintptr_t)(i + 1);
        return 0;
}

/* The tree's signature from the directories' digests, in order. */
static void combine(const fsx_sig_state *s, char ret_hex[FSX_SIGNATURE_HEX])
{
        fsx_hash h;
        fsx_hash_init(&h);
        fsx_hash_update(&h, "tree", 4);
        for (size_t i = 0; i < s->n; i++)
                fsx_hash_update(&h, s->dirs[i].hex, 32);
        fsx_hash_final(&h, ret_hex);
}

static int signature_run(const char *host_path, const fsx_limits *lim, uint64_t content_threshold,
                         const fsx_sig_hook *hook, fsx_sig_state *ret_state,
                         char ret_hex[FSX_SIGNATURE_HEX], airlock_error *err)
{
        if (!host_path || !lim || !ret_hex)
                return al_error(err, -EINVAL, NULL, "signature: missing argument");
        if (ret_state)
                fsx_sig_state_free(ret_state);
        _cleanup_close_ int fd =
            open(host_path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        if (fd < 0) {
                if (errno == ELOOP)
                        return al_error(err, -ELOOP, host_path,
                                        "symlink at %s: staging refuses symbolic links (to stage "
                                        "what it points at, "
                                        "mount that: -m TARGET:NAME)",
                                        host_path);
                return al_error(err, -errno, host_path, "cannot open %s: %s", host_path,
                                strerror(errno));
        }
        struct stat st;
        if (fstat(fd, &st) < 0)
                return al_error(err, -errno, host_path, "cannot inspect %s: %s", host_path,
                                strerror(errno));

        fsx_sig_state local = {0};
        sig_ctx c = {.lim = lim,
                     .hook = hook,
                     .err = err,
                     .threshold = content_threshold,
                     .state = ret_state ? ret_state : &local,
                     .keep_rel = ret_state != NULL,
                     .keep_files = ret_state != NULL,
                     .pending = NO_PENDING};
        fsx_hash_init(&c.h);
        int r;
        if (S_ISREG(st.st_mode)) {
                if (hook)
                        hook->entered(hook->ctx, fd, &st, true);
                hash_meta(&c.h, 'f', "", 0, &st);
                r = sig_file_fd(&c, &c.h, NULL, fd, &st, "", 0, host_path);
                if (r >= 0)
                        fsx_hash_final(&c.h, ret_hex);
        } else if (S_ISDIR(st.st_mode)) {
                uint64_t listed = 0;
                c.listed = &listed;
                c.state->is_dir = true;
                _cleanup_free_ char *prefix = strdup(host_path);
                if (!prefix)
                        return al_error(err, -ENOMEM, NULL, "out of memory");
                for (size_t l = strlen(prefix); l > 1 && prefix[l - 1] == '/'; l--)
                        prefix[l - 1] = '\0';
                fsx_walk_opts opts = {
                    .prefix = prefix,
                    .max_depth = lim->max_depth,
                    .max_entries = lim->max_files,
                    .listed = &listed,
                };
                fsx_walk_ops ops = {
                    .file = sig_file, .dir_enter = sig_dir_enter, .refuse = sig_refuse};
                size_t root;
                r = add_dir(&c, "", 0, fd, &st, true, &root);
                if (r >= 0)
                        r = fsx_walk(fd, &st, (void *)(uintptr_t)1, &opts, &ops, &c, err);
                settle(&c);
                if (r >= 0) {
                        for (size_t i = 0; i < c.state->n; i++)
                                fsx_hash_final(&c.dir_h[i], c.state->dirs[i].hex);
                        c.state->bytes = c.bytes;
                        c.state->listed = listed;
                        combine(c.state, ret_hex);
                }
        } else {
                r = al_error(err, -EINVAL, host_path,
                             "%s is neither a regular file nor a directory", host_path);
        }
        free(c.buf);
        free(c.dir_h);
        fsx_sig_state_free(&local);
        if (r < 0 && ret_state)
                fsx_sig_state_free(ret_state);
        return r;
}

int fsx_tree_signature(const char *host_path, const fsx_limits *lim, uint64_t content_threshold,
                       char ret_hex[FSX_SIGNATURE_HEX], airlock_error *err)
{
        return fsx_error_utf8(
            err, signature_run(host_path, lim, content_threshold, NULL, NULL, ret_hex, err));
}

int fsx_tree_signature_hooked(const char *host_path, const fsx_limits *lim,
                              uint64_t content_threshold, const fsx_sig_hook *hook,
                              fsx_sig_state *state, char ret_hex[FSX_SIGNATURE_HEX],
                              airlock_error *err)
{
        return fsx_error_utf8(
            err, signature_run(host_path, lim, content_threshold, hook, state, ret_hex, err));
}

/* Signs the one directory d again, listed alone, into *ret (hex, bytes,
 * listed). 0, or 1 when it cannot be done here. */
static int redo_dir(int root_fd, const fsx_sig_dir *d, const fsx_limits *lim, uint64_t threshold,
                    fsx_sig_dir *ret)
{
        if (!d->rel)
                return 1; /* a state kept without paths */
        _cleanup_close_ int fd =
            d->rel[0] ? fsx_open_beneath(root_fd, d->rel, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0)
                      : openat(root_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_dev != d->dev ||
            st.st_ino != d->ino)
                return 1;
        airlock_error err = {0};
        fsx_sig_state one = {0};
        uint64_t listed = 0;
        sig_ctx c = {.lim = lim,
                     .err = &err,
                     .threshold = threshold,
                     .state = &one,
                     .listed = &listed,
                     .keep_files = true,
                     .pending = NO_PENDING};
        size_t rel_len = strlen(d->rel);
        size_t i;
        fsx_walk_opts opts = {.prefix = "",
                              .max_depth = lim->max_depth,
                              .max_entries = lim->max_files,
                              .listed = &listed,
                              .no_descend = true};
        fsx_walk_ops ops = {.file = sig_file, .refuse = sig_refuse};
        int r = add_dir(&c, d->rel, rel_len, fd, &st, false, &i);
        if (r >= 0)
                r = fsx_walk(fd, &st, (void *)(uintptr_t)1, &opts, &ops, &c, &err);
        settle(&c);
        if (r >= 0) {
                *ret = *d;
                ret->mode = st.st_mode;
                ret->size = st.st_size;
                ret->mtim = st.st_mtim;
                ret->ctim = st.st_ctim;
                fsx_hash_final(&c.dir_h[0], ret->hex);
                ret->bytes = one.dirs[0].bytes;
                ret->listed = one.dirs[0].listed;
                /* The files' hashes move to ret. */
                ret->files = one.dirs[0].files;
                ret->n_files = one.dirs[0].n_files;
                ret->cap_files = one.dirs[0].cap_files;
                one.dirs[0].files = NULL;
                one.dirs[0].n_files = one.dirs[0].cap_files = 0;
        }
        free(c.buf);
        free(c.dir_h);
        fsx_sig_state_free(&one);
        return r >= 0 ? 0 : 1;
}

int fsx_tree_signature_update(int root_fd, fsx_sig_state *state, const size_t *idx, size_t n,
                              const fsx_limits *lim, uint64_t content_threshold,
                              char ret_hex[FSX_SIGNATURE_HEX])
{
        if (!state->is_dir || root_fd < 0)
                return 1;
        /* Worked out aside, applied only when every directory could be done
         * and the totals stay within the caps. */
        fsx_sig_dir *redone = calloc(n ? n : 1, sizeof(*redone));
        if (!redone)
                return 1;
        uint64_t bytes = state->bytes, listed = state->listed;
        int r = 0;
        for (size_t k = 0; k < n && r == 0; k++) {
                if (idx[k] >= state->n) {
                        r = 1;
                        break;
                }
                const fsx_sig_dir *d = &state->dirs[idx[k]];
                r = redo_dir(root_fd, d, lim, content_threshold, &redone[k]);
                if (r == 0) {
                        bytes = bytes - d->bytes + redone[k].bytes;
                        listed = listed - d->listed + redone[k].listed;
                }
        }
        if (r == 0 && (bytes > lim->max_bytes || listed > lim->max_files))
                r = 1;
        if (r == 0) {
                for (size_t k = 0; k < n; k++) {
                        sig_files_free(&state->dirs[idx[k]]);
                        state->dirs[idx[k]] = redone[k]; /* rel and wd are the same */
                        redone[k].files = NULL;
                        redone[k].n_files = 0;
                }
                state->bytes = bytes;
                state->listed = listed;
                combine(state, ret_hex);
        }
        for (size_t k = 0; k < n; k++)
                sig_files_free(&redone[k]); /* what was not moved into state */
        free(redone);
        return r;
}

/* ---- a change told file by file ------------------------------------------ */

void fsx_content_hash(const void *data, size_t len, char ret_hex[33])
{
        /* The updates hash_content makes: one per SIG_BUF bytes read. */
        const unsigned char *p = data;
        fsx_hash h;
        fsx_hash_init(&h);
        for (size_t off = 0; off < len; off += SIG_BUF)
                fsx_hash_update(&h, p + off, MIN(len - off, (size_t)SIG_BUF));
        fsx_hash_final(&h, ret_hex);
}

/* A record's metadata as the stat the walk hashed it from. */
static struct stat stat_of(mode_t mode, off_t size, ino_t ino, struct timespec mtim,
                           struct timespec ctim)
{
        return (struct stat){
            .st_mode = mode, .st_size = size, .st_ino = ino, .st_mtim = mtim, .st_ctim = ctim};
}

/* d's digest made again from its own metadata and its kept records, as a
 * walk of it makes it (files in the walk's order: the records' order). */
static void dir_digest(fsx_sig_dir *d, uint64_t threshold)
{
        fsx_hash h;
        fsx_hash_init(&h);
        struct stat st = stat_of(d->mode, d->size, d->ino, d->mtim, d->ctim);
        hash_meta(&h, 'd', d->rel, strlen(d->rel), &st);
        for (size_t i = 0; i < d->n_files; i++) {
                const fsx_sig_file *f = &d->files[i];
                struct stat fst = stat_of(f->mode, f->size, f->ino, f->mtim, f->ctim);
                hash_meta(&h, 'f', f->name, strlen(f->name), &fst);
                if ((uint64_t)f->size < threshold)
                        fsx_hash_update(&h, f->hex, 32);
        }
        fsx_hash_final(&h, d->hex);
}

/* A copy of d's records (names duplicated) into ret. 0 or -1. */
static int dir_copy(const fsx_sig_dir *d, fsx_sig_dir *ret)
{
        *ret = *d;
        ret->files = calloc(d->n_files + 1, sizeof(*ret->files));
        ret->cap_files = d->n_files + 1;
        ret->n_files = 0;
        if (!ret->files)
                return -1;
        for (size_t i = 0; i < d->n_files; i++) {
                ret->files[i] = d->files[i];
                if (!(ret->files[i].name = strdup(d->files[i].name)))
                        return -1;
                ret->n_files++;
        }
        return 0;
}

/* The index in d of the record name, or where it would go (*found false). */
static size_t file_slot(const fsx_sig_dir *d, const char *name, bool *found)
{
        size_t lo = 0, hi = d->n_files;
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                int c = strcmp(d->files[mid].name, name);
                if (c == 0) {
                        *found = true;
                        return mid;
                }
                if (c < 0)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        *found = false;
        return lo;
}

/* Applies one change (the file name of the folder dfd, dst the folder's
 * stat) to the copy d: 0, or 1 when it is not what the writer told. A
 * file read whole goes to c->kept too, when the caller keeps them. */
static int apply_file(sig_ctx *c, fsx_sig_dir *d, int dfd, const struct stat *dst, const char *name,
                      const fsx_file_change *f)
{
        bool found;
        size_t k = file_slot(d, name, &found);
        if (f->removed) {
                struct stat st;
                if (!found || fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 || errno != ENOENT)
                        return 1;
                d->bytes -= (uint64_t)d->files[k].size;
                d->listed--;
                free(d->files[k].name);
                memmove(d->files + k, d->files + k + 1, (d->n_files - k - 1) * sizeof(*d->files));
                d->n_files--;
                return 0;
        }
        /* Only ever a regular file: a device node put in its place (any
         * host of a shared volume may) opens a device of this machine's. */
        _cleanup_close_ int fd = al_open_regular(dfd, name, O_RDONLY | O_NONBLOCK);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_dev != dst->st_dev ||
            (uint64_t)st.st_size != f->size)
                return 1;
        char hex[33] = "";
        bool small = f->size < c->threshold;
        /* All of the told size read (1), never a short read (2): its
         * hash is of fewer bytes than the size told, and the buffer past
         * them, which would be kept and staged, is this process's memory. */
        if (small && (hash_content(c, &(fsx_hash){0}, fd, f->size, name, hex) != 1 ||
                      memcmp(hex, f->hex, 32) != 0))
                return 1;
        if (!found) {
                if (d->n_files == d->cap_files) {
                        fsx_sig_file *nv = realloc(d->files, (d->cap_files * 2 + 1) * sizeof(*nv));
                        if (!nv)
                                return 1;
                        d->files = nv;
                        d->cap_files = d->cap_files * 2 + 1;
                }
                memmove(d->files + k + 1, d->files + k, (d->n_files - k) * sizeof(*d->files));
                d->n_files++;
                d->listed++;
                if (!(d->files[k].name = strdup(name))) {
                        memmove(d->files + k, d->files + k + 1,
                                (d->n_files - k - 1) * sizeof(*d->files));
                        d->n_files--;
                        return 1;
                }
        } else {
                d->bytes -= (uint64_t)d->files[k].size;
        }
        fsx_sig_file *r = &d->files[k];
        *r = (fsx_sig_file){.name = r->name,
                            .ino = st.st_ino,
                            .size = st.st_size,
                            .mtim = st.st_mtim,
                            .ctim = st.st_ctim,
                            .mode = st.st_mode,
                            .hashed = small};
        memcpy(r->hex, hex, 33);
        d->bytes += f->size;
        /* Past the cap, a file is not kept: staging reads it. */
        if (c->kept && small && f->size <= SIG_BUF)
                (void)fsx_hashes_keep(c->kept, r, f->rel, f->size ? (const void *)c->buf : "");
        return 0;
}

/* The index of the folder rel (len bytes) in s, or s->n. */
static size_t dir_index(const fsx_sig_state *s, const char *rel, size_t len)
{
        for (size_t k = 0; k < s->n; k++)
                if (s->dirs[k].rel && strlen(s->dirs[k].rel) == len &&
                    memcmp(s->dirs[k].rel, rel, len) == 0)
                        return k;
        return s->n;
}

/* Applies the changes of v that fall in folder k of state to the copy
 * ret. 0, or 1. */
static int apply_dir(sig_ctx *c, int root_fd, const fsx_sig_state *state, size_t k,
                     const fsx_file_change *v, size_t n, fsx_sig_dir *ret)
{
        const fsx_sig_dir *d = &state->dirs[k];
        /* The root's own fd for the root: on a network file system every
         * open, stat and close is a round trip to its server. */
        _cleanup_close_ int own =
            d->rel[0] ? fsx_open_beneath(root_fd, d->rel, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0)
                      : -1;
        int fd = d->rel[0] ? own : root_fd;
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_dev != d->dev ||
            st.st_ino != d->ino || dir_copy(d, ret) < 0)
                return 1;
        ret->mode = st.st_mode;
        ret->size = st.st_size;
        ret->mtim = st.st_mtim;
        ret->ctim = st.st_ctim;
        size_t rl = strlen(d->rel);
        for (size_t i = 0; i < n; i++) {
                const char *slash = strrchr(v[i].rel, '/');
                size_t dl = slash ? (size_t)(slash - v[i].rel) : 0;
                if (dl != rl || memcmp(v[i].rel, d->rel, rl) != 0)
                        continue;
                if (apply_file(c, ret, fd, &st, slash ? slash + 1 : v[i].rel, &v[i]) != 0)
                        return 1;
        }
        dir_digest(ret, c->threshold);
        return 0;
}

int fsx_tree_signature_files(int root_fd, fsx_sig_state *state, const fsx_file_change *v, size_t n,
                             const fsx_limits *lim, uint64_t content_threshold,
                             char ret_hex[FSX_SIGNATURE_HEX], fsx_hashes *ret_kept)
{
        if (!state->is_dir || root_fd < 0 || !n)
                return 1;
        fsx_hashes kept = {0};
        /* The folders the changes fall in, each once. */
        size_t *idx = calloc(n, sizeof(*idx));
        fsx_sig_dir *redone = calloc(n, sizeof(*redone));
        airlock_error err = {0};
        sig_ctx c = {.lim = lim,
                     .err = &err,
                     .threshold = content_threshold,
                     .kept = ret_kept ? &kept : NULL};
        size_t m = 0;
        int r = idx && redone ? 0 : 1;
        for (size_t i = 0; r == 0 && i < n; i++) {
                const char *slash = strrchr(v[i].rel, '/');
                size_t k = dir_index(state, v[i].rel, slash ? (size_t)(slash - v[i].rel) : 0);
                /* A name the walk lists: its folder one of the state's
                 * (so never "a//b" or "./a"; a last part "." or ".." is a
                 * folder, which apply_file refuses), and no leading '/',
                 * which the match takes for the root's ("/a" would be
                 * staged as a file "/a" beside the manifest's "a"). */
                if (k == state->n || !v[i].rel[0] || slash == v[i].rel || (slash && !slash[1])) {
                        r = 1;
                        break;
                }
                bool dup = false;
                for (size_t j = 0; j < m && !dup; j++)
                        dup = idx[j] == k;
                if (!dup)
                        idx[m++] = k;
        }
        uint64_t bytes = state->bytes, listed = state->listed;
        for (size_t j = 0; r == 0 && j < m; j++) {
                const fsx_sig_dir *d = &state->dirs[idx[j]];
                r = apply_dir(&c, root_fd, state, idx[j], v, n, &redone[j]);
                if (r == 0) {
                        bytes = bytes - d->bytes + redone[j].bytes;
                        listed = listed - d->listed + redone[j].listed;
                        if (redone[j].bytes > lim->max_bytes)
                                r = 1;
                }
        }
        if (r == 0 && (bytes > lim->max_bytes || listed > lim->max_files))
                r = 1;
        for (size_t j = 0; j < m; j++) {
                if (r == 0) {
                        sig_files_free(&state->dirs[idx[j]]);
                        state->dirs[idx[j]] = redone[j]; /* rel and wd are the same */
                } else {
                        sig_files_free(&redone[j]);
                }
        }
        if (r == 0) {
                state->bytes = bytes;
                state->listed = listed;
                combine(state, ret_hex);
        }
        if (r == 0 && ret_kept) {
                fsx_hashes_free(ret_kept);
                *ret_kept = kept;
        } else {
                fsx_hashes_free(&kept);
        }
        free(c.buf);
        free(idx);
        free(redone);
        return r;
}

/* ---- content hashes for staging -------------------------------------------- */

bool fsx_content_hash_is(int fd, uint64_t size, const char hex[33])
{
        sig_ctx c = {.threshold = UINT64_MAX};
        airlock_error err = {0};
        c.err = &err;
        fsx_hash ignored;
        fsx_hash_init(&ignored);
        char got[33];
        int r = hash_content(&c, &ignored, fd, size, "", got);
        free(c.buf);
        return r == 1 && memcmp(got, hex, 32) == 0;
}

void fsx_hashes_free(fsx_hashes *h)
{
        for (size_t i = 0; i < h->n; i++)
                free(h->v[i].name);
        free(h->v);
        for (size_t i = 0; i < h->n_kept; i++) {
                free(h->kept[i].rec.name);
                free(h->kept[i].data);
        }
        free(h->kept);
        *h = (fsx_hashes){0};
}

const fsx_kept_file *fsx_hashes_kept(const fsx_hashes *h, const char *path)
{
        for (size_t i = 0; h && i < h->n_kept; i++)
                if (strcmp(h->kept[i].rec.name, path) == 0)
                        return &h->kept[i];
        return NULL;
}

int fsx_hashes_keep(fsx_hashes *h, const fsx_sig_file *rec, const char *path, const void *data)
{
        uint64_t total = (uint64_t)rec->size;
        for (size_t i = 0; i < h->n_kept; i++)
                total += (uint64_t)h->kept[i].rec.size;
        if (rec->size < 0 || total > FSX_KEPT_MAX || fsx_hashes_kept(h, path))
                return -1;
        fsx_kept_file k = {.rec = *rec, .data = malloc((size_t)rec->size + 1)};
        k.rec.name = strdup(path);
        fsx_kept_file *nv =
            k.data && k.rec.name ? realloc(h->kept, (h->n_kept + 1) * sizeof(*nv)) : NULL;
        if (!nv) {
                free(k.data);
                free(k.rec.name);
                return -1;
        }
        memcpy(k.data, data, (size_t)rec->size);
        h->kept = nv;
        h->kept[h->n_kept++] = k;
        return 0;
}

static int hash_rec_cmp(const void *a, const void *b)
{
        return strcmp(((const fsx_sig_file *)a)->name, ((const fsx_sig_file *)b)->name);
}

void fsx_hashes_sort(fsx_hashes *h)
{
        if (h->n)
                qsort(h->v, h->n, sizeof(*h->v), hash_rec_cmp);
}

const fsx_sig_file *fsx_hashes_find(const fsx_hashes *h, const char *path)
{
        if (!h || !h->n)
                return NULL;
        fsx_sig_file key = {.name = (char *)path};
        return bsearch(&key, h->v, h->n, sizeof(*h->v), hash_rec_cmp);
}

int fsx_hashes_add_dir(fsx_hashes *h, const fsx_sig_state *state, size_t k)
{
        const fsx_sig_dir *d = &state->dirs[k];
        if (!d->rel || !d->n_files)
                return 0;
        fsx_sig_file *nv = realloc(h->v, (h->n + d->n_files) * sizeof(*nv));
        if (!nv)
                return -ENOMEM;
        h->v = nv;
        for (size_t i = 0; i < d->n_files; i++) {
                if (!d->files[i].hashed)
                        continue; /* no content hash to compare a copy with */
                fsx_sig_file f = d->files[i];
                if (asprintf(&f.name, "%s%s%s", d->rel, d->rel[0] ? "/" : "", d->files[i].name) < 0)
                        return -ENOMEM;
                h->v[h->n++] = f;
        }
        return 0;
}
