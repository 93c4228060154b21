/* The Jupyter wire protocol (messaging 5.3): the connection file, HMAC
 * signatures, and messages as multipart ZeroMQ frames:
 *   [identities...] "<IDS|MSG>" signature header parent_header metadata content [buffers...]
 * The signature is HMAC-SHA256, in lowercase hex, of the four JSON parts
 * with the connection file's key. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "kernel.h"
#include "sha256.h"

#define DELIM "<IDS|MSG>"

/* ---- connection file ------------------------------------------------------- */

static int conn_port(json_t *root, const char *name, int *ret, const char *path, airlock_error *err)
{
        json_t *v = json_object_get(root, name);
        if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 65535)
                return al_error(err, -EINVAL, path,
                                "connection file %s: \"%s\" is not a port number from 1 to 65535",
                                path, name);
        *ret = (int)json_integer_value(v);
        return 0;
}

int kconn_load(const char *path, kconn *c, airlock_error *err)
{
        memset(c, 0, sizeof(*c));
        json_error_t je;
        /* A connection file is a few hundred bytes; 1 MiB is plenty. */
        FILE *f = fopen(path, "re");
        if (!f)
                return al_error(err, -errno, path, "cannot open the connection file %s: %s", path,
                                strerror(errno));
        char *buf = malloc(1u << 20);
        size_t n = buf ? fread(buf, 1, (1u << 20) - 1, f) : 0;
        fclose(f);
        if (!buf)
                return al_error(err, -ENOMEM, path, "out of memory");
        buf[n] = '\0';
        json_t *root = json_loadb(buf, n, 0, &je);
        free(buf);
        if (!json_is_object(root)) {
                json_decref(root);
                return al_error(err, -EINVAL, path, "connection file %s is not a JSON object: %s",
                                path, je.text);
        }
        int r = 0;
        const char *transport = json_string_value(json_object_get(root, "transport"));
        const char *ip = json_string_value(json_object_get(root, "ip"));
        const char *scheme = json_string_value(json_object_get(root, "signature_scheme"));
        const char *key = json_string_value(json_object_get(root, "key"));
        if (!transport)
                transport = "tcp";
        if (strcmp(transport, "tcp") != 0 && strcmp(transport, "ipc") != 0)
                r = al_error(err, -EINVAL, path,
                             "connection file %s: transport \"%s\" is not \"tcp\" or \"ipc\"", path,
                             transport);
        else if (!ip || !*ip || strlen(ip) >= sizeof(c->ip))
                r = al_error(err, -EINVAL, path, "connection file %s: no \"ip\"", path);
        else if (scheme && *scheme && strcmp(scheme, "hmac-sha256") != 0)
                r = al_error(err, -EINVAL, path,
                             "connection file %s: signature_scheme \"%s\" is not hmac-sha256", path,
                             scheme);
        if (r >= 0)
                r = conn_port(root, "shell_port", &c->shell_port, path, err);
        if (r >= 0)
                r = conn_port(root, "iopub_port", &c->iopub_port, path, err);
        if (r >= 0)
                r = conn_port(root, "stdin_port", &c->stdin_port, path, err);
        if (r >= 0)
                r = conn_port(root, "control_port", &c->control_port, path, err);
        if (r >= 0)
                r = conn_port(root, "hb_port", &c->hb_port, path, err);
        if (r >= 0) {
                snprintf(c->transport, sizeof(c->transport), "%s", transport);
                snprintf(c->ip, sizeof(c->ip), "%s", ip);
                c->key_len = key ? strlen(key) : 0;
                c->key = (unsigned char *)strdup(key ? key : "");
                if (!c->key)
                        r = al_error(err, -ENOMEM, path, "out of memory");
        }
        json_decref(root);
        return r;
}

void kconn_free(kconn *c)
{
        free(c->key);
        c->key = NULL;
}

void kconn_endpoint(const kconn *c, int port, char *buf, size_t size)
{
        if (strcmp(c->transport, "ipc") == 0)
                snprintf(buf, size, "ipc://%s-%d", c->ip, port);
        else if (strchr(c->ip, ':'))
                snprintf(buf, size, "tcp://[%s]:%d", c->ip, port);
        else
                snprintf(buf, size, "tcp://%s:%d", c->ip, port);
}

/* ---- HMAC-SHA256 -------------------------------------------------------------- */

/* Built on the one-shot SHA-256 of src/mcp/sha256.c: each of the two
 * hashes is taken over one buffer holding the padded key and the text. */
void khmac_hex(const unsigned char *key, size_t key_len, const void *const *parts,
               const size_t *lens, size_t n, char out[65])
{
        unsigned char k[64] = {0}, inner[32], outer_buf[64 + 32];
        if (key_len > 64)
                mcp_sha256(key, key_len, k);
        else
                memcpy(k, key, key_len);
        size_t total = 64;
        for (size_t i = 0; i < n; i++)
                total += lens[i];
        unsigned char *buf = malloc(total);
        if (!buf) {
                /* No memory for the text: a signature that matches nothing. */
                memset(out, 'x', 64);
                out[64] = '\0';
                return;
        }
        for (size_t i = 0; i < 64; i++)
                buf[i] = k[i] ^ 0x36;
        size_t at = 64;
        for (size_t i = 0; i < n; i++) {
                memcpy(buf + at, parts[i], lens[i]);
                at += lens[i];
        }
        mcp_sha256(buf, total, inner);
        free(buf);
        for (size_t i = 0; i < 64; i++)
                outer_buf[i] = k[i] ^ 0x5c;
        memcpy(outer_buf + 64, inner, 32);
        unsigned char mac[32];
        mcp_sha256(outer_buf, sizeof(outer_buf), mac);
        static const char hex[] = "0123456789abcdef";
        for (size_t i = 0; i < 32; i++) {
                out[2 * i] = hex[mac[i] >> 4];
                out[2 * i + 1] = hex[mac[i] & 15];
        }
        out[64] = '\0';
}

/* ---- replays -------------------------------------------------------------------- */

struct kreplay {
        char (*sig)[64];
        size_t next, used;
};

kreplay *kreplay_new(void)
{
        kreplay *r = calloc(1, sizeof(*r));
        if (r && !(r->sig = calloc(KWIRE_REPLAY_WINDOW, 64))) {
                free(r);
                r = NULL;
        }
        return r;
}

void kreplay_free(kreplay *r)
{
        if (r)
                free(r->sig);
        free(r);
}

/* A linear scan: 4096 signatures of 64 bytes, a quarter of a megabyte per
 * message at most, which is nothing beside a cell. */
static bool replay_seen(const kreplay *r, const char *sig)
{
        for (size_t i = 0; i < r->used; i++)
                if (memcmp(r->sig[i], sig, 64) == 0)
                        return true;
        return false;
}

static void replay_add(kreplay *r, const char *sig)
{
        memcpy(r->sig[r->next], sig, 64);
        r->next = (r->next + 1) % KWIRE_REPLAY_WINDOW;
        if (r->used < KWIRE_REPLAY_WINDOW)
                r->used++;
}

/* ---- receiving ------------------------------------------------------------------ */

typedef struct frames {
        char *data[KWIRE_MAX_FRAMES];
        size_t len[KWIRE_MAX_FRAMES];
        size_t n;
} frames;

static void frames_free(frames *f)
{
        for (size_t i = 0; i < f->n; i++)
                free(f->data[i]);
        f->n = 0;
}

/* Reads every part of the message, keeping up to KWIRE_MAX_FRAMES of them
 * and KWIRE_MAX_BYTES in all. 1: more frames or bytes than that (all read,
 * none kept). */
static int recv_frames(void *sock, frames *f)
{
        size_t total = 0;
        bool over = false;
        f->n = 0;
        for (int first = 1;; first = 0) {
                zmq_msg_t part;
                kz.msg_init(&part);
                if (kz.msg_recv(&part, sock, first ? ZMQ_DONTWAIT : 0) < 0) {
                        int e = kz.errno_();
                        kz.msg_close(&part);
                        frames_free(f);
                        return first && e == EAGAIN ? -EAGAIN : -EIO;
                }
                size_t len = kz.msg_size(&part);
                total += len;
                if (f->n == KWIRE_MAX_FRAMES || total > KWIRE_MAX_BYTES)
                        over = true;
                if (!over) {
                        char *d = malloc(len + 1);
                        if (!d) {
                                over = true;
                        } else {
                                memcpy(d, kz.msg_data(&part), len);
                                d[len] = '\0';
                                f->data[f->n] = d;
                                f->len[f->n++] = len;
                        }
                }
                bool more = kz.msg_more(&part);
                kz.msg_close(&part);
                if (!more)
                        break;
        }
        if (over) {
                frames_free(f);
                return 1;
        }
        return 0;
}

static bool consttime_eq(const char *a, const char *b, size_t n)
{
        unsigned char d = 0;
        for (size_t i = 0; i < n; i++)
                d |= (unsigned char)(a[i] ^ b[i]);
        return d == 0;
}

int kmsg_recv(void *sock, const kconn *c, kreplay *replay, kmsg *m, airlock_error *err)
{
        memset(m, 0, sizeof(*m));
        frames f;
        int r = recv_frames(sock, &f);
        if (r == -EAGAIN)
                return r;
        if (r < 0)
                return al_error(err, -EBADMSG, NULL, "a message could not be read");
        if (r > 0)
                return al_error(err, -EBADMSG, NULL, "a message of more than %d frames or %u bytes",
                                KWIRE_MAX_FRAMES, KWIRE_MAX_BYTES);
        size_t d = 0;
        while (d < f.n && !(f.len[d] == strlen(DELIM) && memcmp(f.data[d], DELIM, f.len[d]) == 0))
                d++;
        if (d == f.n || f.n - d < 6) {
                frames_free(&f);
                return al_error(err, -EBADMSG, NULL,
                                "a message without the <IDS|MSG> delimiter and its five parts");
        }
        const char *sig = f.data[d + 1];
        size_t sig_len = f.len[d + 1];
        if (c->key_len) {
                char want[65];
                const void *parts[4] = {f.data[d + 2], f.data[d + 3], f.data[d + 4], f.data[d + 5]};
                size_t lens[4] = {f.len[d + 2], f.len[d + 3], f.len[d + 4], f.len[d + 5]};
                khmac_hex(c->key, c->key_len, parts, lens, 4, want);
                if (sig_len != 64 || !consttime_eq(sig, want, 64)) {
                        frames_free(&f);
                        return al_error(err, -EBADMSG, NULL,
                                        sig_len ? "a message with a wrong signature"
                                                : "a message without a signature");
                }
                if (replay_seen(replay, sig)) {
                        frames_free(&f);
                        return al_error(err, -EBADMSG, NULL,
                                        "a replayed message (its signature was seen before)");
                }
                replay_add(replay, sig);
        }
        json_t *parts[4];
        for (int i = 0; i < 4; i++)
                parts[i] =
                    json_loadb(f.data[d + 2 + i], f.len[d + 2 + i], JSON_REJECT_DUPLICATES, NULL);
        const char *type = json_string_value(json_object_get(parts[0], "msg_type"));
        if (!json_is_object(parts[0]) || !json_is_object(parts[1]) || !json_is_object(parts[2]) ||
            !json_is_object(parts[3]) || !type ||
            !json_is_string(json_object_get(parts[0], "msg_id"))) {
                for (int i = 0; i < 4; i++)
                        json_decref(parts[i]);
                frames_free(&f);
                return al_error(err, -EBADMSG, NULL,
                                "a message whose header, parent_header, metadata or content is "
                                "not a JSON object (or whose header has no msg_id or msg_type)");
        }
        m->header = parts[0];
        m->parent = parts[1];
        m->metadata = parts[2];
        m->content = parts[3];
        m->msg_type = type;
        m->n_ids = d;
        m->ids = calloc(d ? d : 1, sizeof(char *));
        m->id_lens = calloc(d ? d : 1, sizeof(size_t));
        if (!m->ids || !m->id_lens) {
                frames_free(&f);
                kmsg_free(m);
                return al_error(err, -EBADMSG, NULL, "out of memory");
        }
        for (size_t i = 0; i < d; i++) {
                m->ids[i] = f.data[i];
                m->id_lens[i] = f.len[i];
                f.data[i] = NULL;
        }
        frames_free(&f);
        return 0;
}

void kmsg_free(kmsg *m)
{
        for (size_t i = 0; i < m->n_ids; i++)
                free(m->ids[i]);
        free(m->ids);
        free(m->id_lens);
        json_decref(m->header);
        json_decref(m->parent);
        json_decref(m->metadata);
        json_decref(m->content);
        memset(m, 0, sizeof(*m));
}

/* ---- sending -------------------------------------------------------------------- */

void kwire_now(char buf[40])
{
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        struct tm tm;
        gmtime_r(&ts.tv_sec, &tm);
        char day[24];
        if (!strftime(day, sizeof(day), "%Y-%m-%dT%H:%M:%S", &tm))
                day[0] = '\0';
        snprintf(buf, 40, "%.20s.%06uZ", day, (unsigned)(ts.tv_nsec / 1000) % 1000000u);
}

static atomic_ulong msg_counter;

kout *kout_build(const kconn *c, const char *session, int sock, const kmsg *parent,
                 const char *msg_type, json_t *content)
{
        char date[40], msg_id[128];
        kwire_now(date);
        snprintf(msg_id, sizeof(msg_id), "%s_%lu", session, atomic_fetch_add(&msg_counter, 1) + 1);
        json_t *header =
            json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "msg_id", msg_id, "session", session,
                      "username", "airlock", "date", date, "msg_type", msg_type, "version", "5.3");
        char *parts[4] = {
            json_dumps(header, JSON_COMPACT),
            parent && parent->header ? json_dumps(parent->header, JSON_COMPACT) : strdup("{}"),
            strdup("{}"),
            content ? json_dumps(content, JSON_COMPACT) : strdup("{}"),
        };
        json_decref(header);
        json_decref(content);
        size_t n_ids = sock == KSOCK_IOPUB ? 1 : (parent ? parent->n_ids : 0);
        kout *o = calloc(1, sizeof(*o));
        size_t n = n_ids + 2 + 4;
        if (o) {
                o->data = calloc(n, sizeof(char *));
                o->len = calloc(n, sizeof(size_t));
        }
        bool ok = o && o->data && o->len;
        for (int i = 0; i < 4; i++)
                ok = ok && parts[i];
        if (!ok) {
                for (int i = 0; i < 4; i++)
                        free(parts[i]);
                kout_free(o);
                return NULL;
        }
        o->sock = sock;
        o->n = n;
        size_t at = 0;
        if (sock == KSOCK_IOPUB) {
                char topic[160];
                snprintf(topic, sizeof(topic), "kernel.%s.%s", session, msg_type);
                o->data[at] = strdup(topic);
                o->len[at++] = strlen(topic);
        } else {
                for (size_t i = 0; i < n_ids; i++) {
                        o->data[at] = malloc(parent->id_lens[i] ? parent->id_lens[i] : 1);
                        if (o->data[at])
                                memcpy(o->data[at], parent->ids[i], parent->id_lens[i]);
                        o->len[at++] = parent->id_lens[i];
                }
        }
        o->data[at] = strdup(DELIM);
        o->len[at++] = strlen(DELIM);
        const void *sp[4];
        size_t sl[4];
        for (int i = 0; i < 4; i++) {
                sp[i] = parts[i];
                sl[i] = strlen(parts[i]);
        }
        char sig[65] = "";
        if (c->key_len)
                khmac_hex(c->key, c->key_len, sp, sl, 4, sig);
        o->data[at] = strdup(sig);
        o->len[at++] = strlen(sig);
        for (int i = 0; i < 4; i++) {
                o->data[at] = parts[i];
                o->len[at++] = sl[i];
        }
        for (size_t i = 0; i < n; i++)
                if (!o->data[i]) {
                        kout_free(o);
                        return NULL;
                }
        return o;
}

void kout_free(kout *o)
{
        if (!o)
                return;
        if (o->data)
                for (size_t i = 0; i < o->n; i++)
                        free(o->data[i]);
        free(o->data);
        free(o->len);
        free(o);
}

int kout_send(void *sock, const kout *o)
{
        for (size_t i = 0; i < o->n; i++)
                if (kz.send(sock, o->data[i], o->len[i], i + 1 < o->n ? ZMQ_SNDMORE : 0) < 0)
                        return -kz.errno_();
        return 0;
}
