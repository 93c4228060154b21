/* Tree signatures for cache staleness, and the small 128-bit hash under
 * them. The walk and its refusals are those of staging, so a tree that would
 * not stage has no signature either. */
#include "fsx/fsx.h"
#include "fsx/fsx_internal.h"
#include "core/util.h"

#include <fcntl.h>
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
        fsx_hash h;
        unsigned char *buf;
} sig_ctx;

#define SIG_BUF (64 * 1024)

static void hash_meta(sig_ctx *c, char kind, const char *rel, size_t rel_len, const struct stat *st)
{
        fsx_hash_update(&c->h, &kind, 1);
        fsx_hash_update(&c->h, rel, rel_len);
        fsx_hash_u64(&c->h, (uint64_t)st->st_mode);
        fsx_hash_u64(&c->h, (uint64_t)st->st_size);
        fsx_hash_u64(&c->h, (uint64_t)st->st_mtim.tv_sec);
        fsx_hash_u64(&c->h, (uint64_t)st->st_mtim.tv_nsec);
        fsx_hash_u64(&c->h, (uint64_t)st->st_ino);
}

/* Adds the content of a small file, read from its checked fd, so an edit
 * that keeps size and mtime (within one timestamp tick) still shows. */
static int hash_content(sig_ctx *c, int fd, uint64_t size, const char *path)
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
                ssize_t n = pread(fd, c->buf, MIN(left, SIG_BUF), off);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return al_error(c->err, -errno, path, "cannot read %s: %s", path,
                                        strerror(errno));
                if (n == 0)
                        break; /* shrank: the metadata no longer matches anyway */
                fsx_hash_update(&content, c->buf, (size_t)n);
                off += n;
                left -= (uint64_t)n;
        }
        char hex[33];
        fsx_hash_final(&content, hex);
        fsx_hash_update(&c->h, hex, 32);
        return 0;
}

static int sig_refuse(void *ctx, const fsx_item *it, fsx_reason r)
{
        sig_ctx *c = ctx;
        if (r == FSX_NOT_REGULAR || r == FSX_MOUNT_POINT)
                return 0; /* staging skips them; they change nothing staged */
        return fsx_stage_refusal(it, r, c->lim, c->err);
}

static int sig_file_fd(sig_ctx *c, int fd, const struct stat *st, const char *rel, size_t rel_len,
                       const char *path)
{
        uint64_t size = (uint64_t)st->st_size;
        if (size > c->lim->max_bytes || size > c->lim->max_bytes - c->bytes)
                return al_error(c->err, -EFBIG, path,
                                "too large: staging %s (%llu bytes) would exceed the staging cap "
                                "of %llu bytes",
                                path, (unsigned long long)size,
                                (unsigned long long)c->lim->max_bytes);
        c->bytes += size;
        hash_meta(c, 'f', rel, rel_len, st);
        return hash_content(c, fd, size, path);
}

static int sig_file(void *ctx, const fsx_item *it)
{
        sig_ctx *c = ctx;
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
        return sig_file_fd(c, fd, &st, it->rel, it->rel_len, it->path);
}

static int sig_dir_enter(void *ctx, const fsx_item *it, int fd, const struct stat *st,
                         void **ret_data)
{
        sig_ctx *c = ctx;
        /* The hook sees the directory before it is listed: a change made
         * after the hook's watch is set shows as an event, one made before
         * shows in the listing below. */
        if (c->hook)
                c->hook->entered(c->hook->ctx, fd, st, false);
        hash_meta(c, 'd', it->rel, it->rel_len, st);
        return 0;
}

static int signature_run(const char *host_path, const fsx_limits *lim, uint64_t content_threshold,
                         const fsx_sig_hook *hook, char ret_hex[FSX_SIGNATURE_HEX],
                         airlock_error *err)
{
        if (!host_path || !lim || !ret_hex)
                return al_error(err, -EINVAL, NULL, "signature: missing argument");
        _cleanup_close_ int fd =
            open(host_path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        if (fd < 0) {
                if (errno == ELOOP)
                        return al_error(err, -ELOOP, host_path,
                                        "symlink at %s: staging refuses symbolic links", host_path);
                return al_error(err, -errno, host_path, "cannot open %s: %s", host_path,
                                strerror(errno));
        }
        struct stat st;
        if (fstat(fd, &st) < 0)
                return al_error(err, -errno, host_path, "cannot inspect %s: %s", host_path,
                                strerror(errno));

        sig_ctx c = {.lim = lim, .hook = hook, .err = err, .threshold = content_threshold};
        fsx_hash_init(&c.h);
        if (hook && (S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)))
                hook->entered(hook->ctx, fd, &st, true);
        int r;
        if (S_ISREG(st.st_mode)) {
                r = sig_file_fd(&c, fd, &st, "", 0, host_path);
        } else if (S_ISDIR(st.st_mode)) {
                hash_meta(&c, 'd', "", 0, &st);
                uint64_t listed = 0;
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
                r = fsx_walk(fd, &st, NULL, &opts, &ops, &c, err);
        } else {
                r = al_error(err, -EINVAL, host_path,
                             "%s is neither a regular file nor a directory", host_path);
        }
        free(c.buf);
        if (r < 0)
                return r;
        fsx_hash_final(&c.h, ret_hex);
        return 0;
}

int fsx_tree_signature(const char *host_path, const fsx_limits *lim, uint64_t content_threshold,
                       char ret_hex[FSX_SIGNATURE_HEX], airlock_error *err)
{
        return fsx_error_utf8(err,
                              signature_run(host_path, lim, content_threshold, NULL, ret_hex, err));
}

int fsx_tree_signature_hooked(const char *host_path, const fsx_limits *lim,
                              uint64_t content_threshold, const fsx_sig_hook *hook,
                              char ret_hex[FSX_SIGNATURE_HEX], airlock_error *err)
{
        return fsx_error_utf8(err,
                              signature_run(host_path, lim, content_threshold, hook, ret_hex, err));
}
