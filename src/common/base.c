/* Error records, bounded buffers, full reads and writes, a regular file's
 * open, UTF-8 and base64 (base.h). */
#include "base.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/vfs.h>
#include <time.h>

void airlock_error_clear(airlock_error *err)
{
        if (!err)
                return;
        err->code = 0;
        err->kind = AIRLOCK_ERROR_INPUT;
        err->message[0] = '\0';
        err->path[0] = '\0';
}

int al_verror(airlock_error *err, airlock_error_kind kind, int code, const char *path,
              const char *fmt, va_list ap)
{
        if (code >= 0)
                code = -EINVAL;
        if (!err)
                return code;
        err->code = code;
        err->kind = kind;
        vsnprintf(err->message, sizeof(err->message), fmt, ap);
        snprintf(err->path, sizeof(err->path), "%s", path ? path : "");
        return code;
}

int al_error(airlock_error *err, int code, const char *path, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        code = al_verror(err, AIRLOCK_ERROR_INPUT, code, path, fmt, ap);
        va_end(ap);
        return code;
}

int al_error_kind(airlock_error *err, airlock_error_kind kind, int code, const char *path,
                  const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        code = al_verror(err, kind, code, path, fmt, ap);
        va_end(ap);
        return code;
}

int al_error_as(airlock_error *err, airlock_error_kind kind, int code)
{
        if (code >= 0)
                code = -EINVAL;
        if (!err)
                return code;
        if (err->code == 0)
                return al_error_kind(err, kind, code, NULL, "%s", strerror(-code));
        err->code = code;
        err->kind = kind;
        return code;
}

void dynbuf_init(dynbuf *b, size_t cap)
{
        b->data = NULL;
        b->len = 0;
        b->alloc = 0;
        b->cap = cap;
}

/* Room for len more bytes and a NUL, within the cap. */
static int dynbuf_reserve(dynbuf *b, size_t len)
{
        /* The terminating NUL needs one byte past the content: a cap of
         * SIZE_MAX leaves no room for it, and must not wrap to 0. */
        if (len > b->cap || b->len > b->cap - len || b->len + len == SIZE_MAX)
                return -E2BIG;
        size_t need = b->len + len + 1;
        if (need > b->alloc) {
                size_t n = b->alloc ? b->alloc : 256;
                while (n < need)
                        n = n > SIZE_MAX / 2 ? need : n * 2;
                if (b->cap < SIZE_MAX && n > b->cap + 1)
                        n = b->cap + 1;
                char *p = realloc(b->data, n);
                if (!p)
                        return -ENOMEM;
                b->data = p;
                b->alloc = n;
        }
        return 0;
}

int dynbuf_append(dynbuf *b, const void *data, size_t len)
{
        int r = dynbuf_reserve(b, len);
        if (r < 0)
                return r;
        if (len)
                memcpy(b->data + b->len, data, len);
        b->len += len;
        b->data[b->len] = '\0';
        return 0;
}

/* Formats straight into the buffer's spare room, and only when that is too
 * small grows it and formats again: no temporary string per call, which the
 * cache fingerprint of every run would otherwise allocate and free. */
int dynbuf_appendf(dynbuf *b, const char *fmt, ...)
{
        va_list ap, again;
        va_start(ap, fmt);
        va_copy(again, ap);
        size_t room = b->alloc > b->len ? b->alloc - b->len : 0;
        int n = vsnprintf(room ? b->data + b->len : NULL, room, fmt, ap);
        va_end(ap);
        /* Text that fits the room is within the cap: dynbuf_reserve never
         * allocates past cap + 1. */
        int r = n < 0 ? -EINVAL : 0;
        if (r >= 0 && (size_t)n >= room) {
                r = dynbuf_reserve(b, (size_t)n);
                if (r >= 0)
                        vsnprintf(b->data + b->len, (size_t)n + 1, fmt, again);
        }
        va_end(again);
        if (r < 0) {
                if (b->data)
                        b->data[b->len] = '\0';
                return r;
        }
        b->len += (size_t)n;
        return 0;
}

char *dynbuf_take(dynbuf *b, size_t *ret_len)
{
        if (!b->data && dynbuf_append(b, "", 0) < 0)
                return NULL;
        char *p = b->data;
        if (ret_len)
                *ret_len = b->len;
        b->data = NULL;
        b->len = b->alloc = 0;
        return p;
}

void dynbuf_free(dynbuf *b)
{
        free(b->data);
        b->data = NULL;
        b->len = b->alloc = 0;
}

uint64_t al_now_ns(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

ssize_t al_read_full(int fd, void *buf, size_t len)
{
        size_t done = 0;
        while (done < len) {
                ssize_t n = read(fd, (char *)buf + done, len - done);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (n == 0)
                        break;
                done += (size_t)n;
        }
        return (ssize_t)done;
}

int al_write_full(int fd, const void *buf, size_t len)
{
        size_t done = 0;
        while (done < len) {
                ssize_t n = write(fd, (const char *)buf + done, len - done);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                done += (size_t)n;
        }
        return 0;
}

/* Length of the valid UTF-8 sequence at s (at most len bytes), or 0. */
static size_t utf8_seq(const unsigned char *s, size_t len)
{
        unsigned c = s[0];
        size_t n;
        unsigned min;
        if (c < 0x80)
                return 1;
        if (c >= 0xc2 && c <= 0xdf) {
                n = 2;
                min = 0x80;
        } else if (c >= 0xe0 && c <= 0xef) {
                n = 3;
                min = 0x800;
        } else if (c >= 0xf0 && c <= 0xf4) {
                n = 4;
                min = 0x10000;
        } else {
                return 0;
        }
        if (len < n)
                return 0;
        unsigned cp = c & (0xff >> (n + 1));
        for (size_t i = 1; i < n; i++) {
                if ((s[i] & 0xc0) != 0x80)
                        return 0;
                cp = (cp << 6) | (s[i] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
                return 0;
        return n;
}

bool al_utf8_valid(const char *s, size_t len)
{
        const unsigned char *p = (const unsigned char *)s;
        size_t i = 0;
        while (i < len) {
                size_t n = utf8_seq(p + i, len - i);
                if (!n)
                        return false;
                i += n;
        }
        return true;
}

char *al_utf8_sanitize(const char *s, size_t len)
{
        return al_utf8_sanitize_n(s, len, NULL);
}

char *al_utf8_sanitize_n(const char *s, size_t len, size_t *ret_len)
{
        const unsigned char *p = (const unsigned char *)s;
        /* Each bad byte becomes three bytes of U+FFFD. */
        if (len > (SIZE_MAX - 1) / 3)
                return NULL;
        char *out = malloc(len * 3 + 1);
        if (!out)
                return NULL;
        size_t o = 0, i = 0;
        while (i < len) {
                size_t n = utf8_seq(p + i, len - i);
                if (n) {
                        memcpy(out + o, p + i, n);
                        o += n;
                        i += n;
                } else {
                        memcpy(out + o, "\xef\xbf\xbd", 3);
                        o += 3;
                        i++;
                }
        }
        out[o] = '\0';
        if (ret_len)
                *ret_len = o;
        return out;
}

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *al_base64_encode(const unsigned char *data, size_t len, size_t *ret_len)
{
        if (len > (SIZE_MAX - 4) / 4 * 3)
                return NULL;
        size_t olen = (len + 2) / 3 * 4;
        char *out = malloc(olen + 1);
        if (!out)
                return NULL;
        size_t o = 0, i = 0;
        for (; i + 2 < len; i += 3) {
                uint32_t v = (uint32_t)data[i] << 16 | (uint32_t)data[i + 1] << 8 | data[i + 2];
                out[o++] = b64_alphabet[v >> 18];
                out[o++] = b64_alphabet[(v >> 12) & 63];
                out[o++] = b64_alphabet[(v >> 6) & 63];
                out[o++] = b64_alphabet[v & 63];
        }
        if (i < len) {
                uint32_t v = (uint32_t)data[i] << 16;
                if (i + 1 < len)
                        v |= (uint32_t)data[i + 1] << 8;
                out[o++] = b64_alphabet[v >> 18];
                out[o++] = b64_alphabet[(v >> 12) & 63];
                out[o++] = i + 1 < len ? b64_alphabet[(v >> 6) & 63] : '=';
                out[o++] = '=';
        }
        out[o] = '\0';
        if (ret_len)
                *ret_len = o;
        return out;
}

static int b64_value(char c)
{
        if (c >= 'A' && c <= 'Z')
                return c - 'A';
        if (c >= 'a' && c <= 'z')
                return c - 'a' + 26;
        if (c >= '0' && c <= '9')
                return c - '0' + 52;
        if (c == '+')
                return 62;
        if (c == '/')
                return 63;
        return -1;
}

int al_base64_decode(const char *text, size_t len, unsigned char **ret, size_t *ret_len)
{
        if (len % 4)
                return -EINVAL;
        size_t pad = 0;
        if (len && text[len - 1] == '=')
                pad++;
        if (len > 1 && text[len - 2] == '=')
                pad++;
        size_t olen = len / 4 * 3 - pad;
        unsigned char *out = malloc(olen + 1);
        if (!out)
                return -ENOMEM;
        size_t o = 0;
        for (size_t i = 0; i < len; i += 4) {
                int v[4];
                for (int k = 0; k < 4; k++) {
                        char c = text[i + k];
                        bool tail = i + 4 == len && k >= 4 - (int)pad;
                        v[k] = tail ? 0 : b64_value(c);
                        if (v[k] < 0) {
                                free(out);
                                return -EINVAL;
                        }
                }
                uint32_t x = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 |
                             (uint32_t)v[3];
                if (o < olen)
                        out[o++] = (unsigned char)(x >> 16);
                if (o < olen)
                        out[o++] = (unsigned char)(x >> 8);
                if (o < olen)
                        out[o++] = (unsigned char)x;
        }
        out[olen] = 0;
        *ret = out;
        *ret_len = olen;
        return 0;
}

int al_send_fds(int sock, const void *buf, size_t len, const int *fds, size_t n)
{
        struct iovec iov = {(void *)buf, len};
        return al_send_fdsv(sock, &iov, 1, fds, n);
}

int al_send_fdsv(int sock, const struct iovec *iov, size_t niov, const int *fds, size_t n)
{
        size_t len = 0;
        for (size_t i = 0; i < niov; i++)
                len += iov[i].iov_len;
        ssize_t w = al_send_fdsv_part(sock, iov, niov, fds, n, 0);
        return w == (ssize_t)len ? 0 : w < 0 ? (int)w : -EIO;
}

ssize_t al_send_fdsv_part(int sock, const struct iovec *iov, size_t niov, const int *fds, size_t n,
                          int flags)
{
        char cbuf[CMSG_SPACE(sizeof(int) * 8)];
        if (n > 8)
                return -EINVAL;
        memset(cbuf, 0, sizeof(cbuf));
        struct msghdr mh = {.msg_iov = (struct iovec *)iov, .msg_iovlen = niov};
        if (n) {
                mh.msg_control = cbuf;
                mh.msg_controllen = CMSG_SPACE(sizeof(int) * n);
                struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
                cm->cmsg_level = SOL_SOCKET;
                cm->cmsg_type = SCM_RIGHTS;
                cm->cmsg_len = CMSG_LEN(sizeof(int) * n);
                memcpy(CMSG_DATA(cm), fds, sizeof(int) * n);
        }
        ssize_t w;
        while ((w = sendmsg(sock, &mh, MSG_NOSIGNAL | flags)) < 0 && errno == EINTR)
                ;
        return w < 0 ? -errno : w;
}

int al_send_rest(int sock, const struct iovec *iov, size_t niov, size_t *done, size_t total,
                 int flags)
{
        while (*done < total) {
                struct iovec v[8];
                size_t nv = 0, skip = *done;
                for (size_t i = 0; i < niov && nv < ARRAY_SIZE(v); i++) {
                        if (skip >= iov[i].iov_len) {
                                skip -= iov[i].iov_len;
                                continue;
                        }
                        v[nv++] =
                            (struct iovec){(char *)iov[i].iov_base + skip, iov[i].iov_len - skip};
                        skip = 0;
                }
                struct msghdr mh = {.msg_iov = v, .msg_iovlen = nv};
                ssize_t w = sendmsg(sock, &mh, MSG_NOSIGNAL | flags);
                if (w < 0 && errno == EINTR)
                        continue;
                if (w <= 0)
                        return w < 0 ? -errno : -EIO;
                *done += (size_t)w;
        }
        return 0;
}

ssize_t al_recv_fds(int sock, void *buf, size_t len, int *fds, size_t max, size_t *ret_n, int flags)
{
        /* Room for 8 fds whatever max is: a sender that attaches more than
         * the caller keeps is seen (and its extras closed) rather than cut
         * short by the kernel. */
        union {
                char buf[CMSG_SPACE(sizeof(int) * 8)];
                struct cmsghdr align;
        } cbuf;
        if (max > 8)
                return -EINVAL;
        for (size_t i = 0; i < max; i++)
                fds[i] = -1;
        if (ret_n)
                *ret_n = 0;
        struct iovec iov = {buf, len};
        struct msghdr mh = {.msg_iov = &iov,
                            .msg_iovlen = 1,
                            .msg_control = cbuf.buf,
                            .msg_controllen = sizeof(cbuf.buf)};
        ssize_t n;
        while ((n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | flags)) < 0 && errno == EINTR)
                ;
        if (n < 0)
                return -errno;
        size_t came = 0;
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
                if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
                        continue;
                size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                for (size_t i = 0; i < k; i++, came++) {
                        int fd;
                        memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
                        if (came < max)
                                fds[came] = fd;
                        else
                                close(fd);
                }
        }
        if (mh.msg_flags & MSG_CTRUNC) {
                for (size_t i = 0; i < max && i < came; i++) {
                        close(fds[i]);
                        fds[i] = -1;
                }
                return -EPROTO;
        }
        if (ret_n)
                *ret_n = came;
        return n;
}

int al_open_regular(int dirfd, const char *name, int flags)
{
        int pfd = openat(dirfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        if (pfd < 0)
                return -errno;
        struct statx sx;
        int r = statx(pfd, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC, STATX_TYPE, &sx) < 0 ? -errno
                : !(sx.stx_mask & STATX_TYPE)                                           ? -EINVAL
                : S_ISLNK(sx.stx_mode)                                                  ? -ELOOP
                : !S_ISREG(sx.stx_mode)                                                 ? -EINVAL
                                                                                        : 0;
        if (r == 0)
                r = al_reopen(pfd, flags & ~O_CREAT);
        close(pfd);
        return r;
}

int al_reopen(int fd, int flags)
{
        char proc[32];
        snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
        int r = open(proc, flags | O_NOCTTY | O_CLOEXEC);
        /* ENOENT here is /proc missing, never the file. */
        return r >= 0 ? r : errno == ENOENT ? -EOPNOTSUPP : -errno;
}

/* The short name of a network or FUSE file system's magic number, or
 * NULL. */
static const char *remote_name(unsigned long magic)
{
        static const struct {
                unsigned long magic;
                const char *name;
        } remote[] = {
            {0x6969ul, "nfs"},      {0x517bul, "smb"},        {0xfe534d42ul, "smb2"},
            {0xff534d42ul, "cifs"}, {0x65735546ul, "fuse"},   {0x01021997ul, "9p"},
            {0x00c36400ul, "ceph"}, {0x5346414ful, "afs"},    {0x6b414653ul, "kafs"},
            {0x73757245ul, "coda"}, {0x01161970ul, "gfs2"},   {0x7461636ful, "ocfs2"},
            {0x47504653ul, "gpfs"}, {0x0bd00bd0ul, "lustre"},
        };
        for (size_t i = 0; i < ARRAY_SIZE(remote); i++)
                if (magic == remote[i].magic)
                        return remote[i].name;
        return NULL;
}

bool al_remote_fs(int fd, const char **ret_name)
{
        struct statfs sf;
        if (ret_name)
                *ret_name = "unknown";
        if (fstatfs(fd, &sf) < 0)
                return true;
        const char *name = remote_name((unsigned long)sf.f_type);
        if (name && ret_name)
                *ret_name = name;
        return name != NULL;
}

bool al_foreign_devices(int fd)
{
        struct statfs sf;
        if (fstatfs(fd, &sf) < 0)
                return true;
        return remote_name((unsigned long)sf.f_type) && !(sf.f_flags & ST_NODEV);
}

char *al_put_decimal(char *p, long v)
{
        char digits[20];
        int k = 0;
        unsigned long n = v < 0 ? 0ul - (unsigned long)v : (unsigned long)v;
        do {
                digits[k++] = (char)('0' + n % 10);
                n /= 10;
        } while (n);
        if (v < 0)
                *p++ = '-';
        while (k)
                *p++ = digits[--k];
        return p;
}
