/* Length-prefixed JSON frames: 4 bytes of little-endian length, then a JSON
 * object of that many bytes. */
#include "core/channel.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/util.h"
#include "core/wire.h"

void channel_reader_init(frame_reader *r, size_t max)
{
        memset(r, 0, sizeof(*r));
        r->max = max ? max : CHANNEL_MAX_FRAME;
}

void channel_reader_free(frame_reader *r)
{
        free(r->body);
        r->body = NULL;
        r->hdr_got = r->need = r->got = 0;
}

int channel_frame_parse(const char *body, size_t len, json_t **ret)
{
        json_error_t jerr;
        /* NUL is legal inside JSON strings ("\u0000"); allow it so tool
         * arguments round-trip, but refuse anything that is not an object. */
        json_t *j = json_loadb(body, len, JSON_ALLOW_NUL | JSON_REJECT_DUPLICATES, &jerr);
        if (!j)
                return -EBADMSG;
        if (!json_is_object(j)) {
                json_decref(j);
                return -EBADMSG;
        }
        *ret = j;
        return 0;
}

/* After a spin that ran out, this many frames are waited for asleep
 * before a spin is tried again: on a shared CPU each costs a sleep and a
 * wake-up, not a wasted spin, and one spin in CHANNEL_SPIN_SKIP + 1 finds
 * out whether the two sides run apart again. */
#define CHANNEL_SPIN_SKIP 16

bool channel_spin_wanted(channel_spin *s)
{
        if (s->skip) {
                s->skip--;
                return false;
        }
        return true;
}

void channel_spin_expired(channel_spin *s)
{
        s->skip = CHANNEL_SPIN_SKIP;
}

static ssize_t reader_read(const frame_reader *r, int fd, void *buf, size_t len)
{
        return r->nonblock ? recv(fd, buf, len, MSG_DONTWAIT) : read(fd, buf, len);
}

int channel_reader_feed(frame_reader *r, int fd, json_t **ret)
{
        for (;;) {
                if (r->hdr_got < 4) {
                        ssize_t n = reader_read(r, fd, r->hdr + r->hdr_got, 4 - r->hdr_got);
                        if (n < 0) {
                                if (errno == EINTR)
                                        continue;
                                if (errno == EAGAIN)
                                        return 0;
                                return -errno;
                        }
                        if (n == 0)
                                return r->hdr_got ? -EPROTO : -EPIPE;
                        r->hdr_got += (size_t)n;
                        if (r->hdr_got < 4)
                                continue;
                        uint32_t len = channel_frame_len(r->hdr);
                        if (len > r->max)
                                return -EMSGSIZE;
                        r->need = len;
                        r->got = 0;
                        r->body = malloc(len + 1);
                        if (!r->body)
                                return -ENOMEM;
                }
                while (r->got < r->need) {
                        ssize_t n = reader_read(r, fd, r->body + r->got, r->need - r->got);
                        if (n < 0) {
                                if (errno == EINTR)
                                        continue;
                                if (errno == EAGAIN)
                                        return 0;
                                return -errno;
                        }
                        if (n == 0)
                                return -EPROTO;
                        r->got += (size_t)n;
                }
                json_t *j = NULL;
                int k = r->admit ? r->admit(r->admit_arg, r->body, r->need) : 0;
                if (k >= 0)
                        k = channel_frame_parse(r->body, r->need, &j);
                free(r->body);
                r->body = NULL;
                r->hdr_got = 0;
                if (k < 0)
                        return k;
                *ret = j;
                return 1;
        }
}

void channel_frame_header(unsigned char hdr[4], size_t len)
{
        for (int i = 0; i < 4; i++)
                hdr[i] = (unsigned char)(len >> (8 * i));
}

uint32_t channel_frame_len(const unsigned char hdr[4])
{
        return (uint32_t)hdr[0] | (uint32_t)hdr[1] << 8 | (uint32_t)hdr[2] << 16 |
               (uint32_t)hdr[3] << 24;
}

int channel_send_raw(int fd, const char *body, size_t len)
{
        if (len > CHANNEL_MAX_FRAME)
                return -EMSGSIZE;
        unsigned char hdr[4];
        channel_frame_header(hdr, len);
        struct iovec iov[2] = {{hdr, 4}, {(void *)body, len}};
        size_t total = 4 + len, done = 0;
        while (done < total) {
                struct msghdr mh = {0};
                struct iovec v[2];
                int nv = 0;
                if (done < 4) {
                        v[nv++] = (struct iovec){hdr + done, 4 - done};
                        v[nv++] = iov[1];
                } else {
                        v[nv++] = (struct iovec){(char *)body + (done - 4), len - (done - 4)};
                }
                mh.msg_iov = v;
                mh.msg_iovlen = (size_t)nv;
                ssize_t n = sendmsg(fd, &mh, MSG_NOSIGNAL);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                done += (size_t)n;
        }
        return 0;
}

static char *put_str(char *p, const char *s)
{
        while (*s)
                *p++ = *s++;
        return p;
}

int channel_send_end(int fd, const char *status, int exit_code, int sig, bool alone)
{
        char body[192];
        if (strlen(status) > 32)
                return -EINVAL;
        char *p =
            put_str(body, "{\"" WIRE_KEY_OP "\":\"" WIRE_OP_END "\",\"" WIRE_KEY_STATUS "\":\"");
        p = put_str(p, status);
        p = put_str(p, "\",\"" WIRE_KEY_EXIT_CODE "\":");
        p = al_put_decimal(p, exit_code);
        if (sig) {
                p = put_str(p, ",\"" WIRE_KEY_SIGNAL "\":");
                p = al_put_decimal(p, sig);
        }
        p = put_str(p, alone ? ",\"" WIRE_KEY_ALONE "\":true}" : ",\"" WIRE_KEY_ALONE "\":false}");
        return channel_send_raw(fd, body, (size_t)(p - body));
}

int channel_send(int fd, const json_t *msg)
{
        char *s = json_dumps(msg, JSON_COMPACT | JSON_ENCODE_ANY);
        if (!s)
                return -ENOMEM;
        int r = channel_send_raw(fd, s, strlen(s));
        free(s);
        return r;
}
