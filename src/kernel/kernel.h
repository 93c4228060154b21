/* airlock kernel: a Jupyter kernel (messaging protocol 5.3 over ZeroMQ)
 * whose cells run in one airlock session (docs/jupyter.md). Built, as the
 * MCP server is, on the public API alone (include/airlock.h). */
#ifndef AIRLOCK_KERNEL_H
#define AIRLOCK_KERNEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <zmq.h>

#include "airlock.h"
#include "base.h"

/* ---- libzmq, opened at run time (kzmq.c) ---------------------------------- */

typedef struct kzmq_table {
        void *(*ctx_new)(void);
        int (*ctx_term)(void *);
        void *(*socket)(void *, int);
        int (*close)(void *);
        int (*setsockopt)(void *, int, const void *, size_t);
        int (*bind)(void *, const char *);
        int (*msg_init)(zmq_msg_t *);
        int (*msg_recv)(zmq_msg_t *, void *, int);
        int (*msg_close)(zmq_msg_t *);
        void *(*msg_data)(zmq_msg_t *);
        size_t (*msg_size)(const zmq_msg_t *);
        int (*msg_more)(const zmq_msg_t *);
        int (*send)(void *, const void *, size_t, int);
        int (*poll)(zmq_pollitem_t *, int, long);
        const char *(*strerror)(int);
        int (*errno_)(void);
} kzmq_table;

extern kzmq_table kz;
/* Opens libzmq and fills kz; -ELIBACC naming the library when it cannot. */
int kzmq_open(airlock_error *err);

/* ---- the wire (wire.c) ------------------------------------------------------- */

/* Caps on what a client sends. A message past them is dropped with one log
 * line (the kernel goes on): KWIRE_MAX_BYTES is also set as the sockets'
 * ZMQ_MAXMSGSIZE, so that libzmq drops the connection of a peer that sends
 * a larger frame before the kernel holds it; the code of a cell is capped
 * at 16 MiB by the library (airlock_check_code). */
#define KWIRE_MAX_BYTES  (32u << 20)
#define KWIRE_MAX_FRAMES 64
/* Signatures remembered against replays: a message whose signature was
 * seen among the last KWIRE_REPLAY_WINDOW is dropped. */
#define KWIRE_REPLAY_WINDOW 4096

/* The connection file (jupyter_client's): where to bind, and the key. */
typedef struct kconn {
        char transport[8]; /* "tcp" or "ipc" */
        char ip[256];
        int shell_port, iopub_port, stdin_port, control_port, hb_port;
        unsigned char *key; /* may be empty: no signatures (with a warning) */
        size_t key_len;
} kconn;

int kconn_load(const char *path, kconn *c, airlock_error *err);
void kconn_free(kconn *c);
/* "tcp://127.0.0.1:5555" or "ipc://path-5555" for port. */
void kconn_endpoint(const kconn *c, int port, char *buf, size_t size);

/* HMAC-SHA256 (RFC 2104) over the n parts, as lowercase hex (65 bytes with
 * the NUL). */
void khmac_hex(const unsigned char *key, size_t key_len, const void *const *parts,
               const size_t *lens, size_t n, char out[65]);

/* A message as received: the routing identities, and the four JSON parts
 * parsed (header, parent_header, metadata, content). */
typedef struct kmsg {
        char **ids;
        size_t *id_lens;
        size_t n_ids;
        json_t *header, *parent, *metadata, *content;
        const char *msg_type; /* borrowed from header */
} kmsg;

/* The signatures seen (replay protection): a ring and a hash set over it. */
typedef struct kreplay kreplay;
kreplay *kreplay_new(void);
void kreplay_free(kreplay *r);

/* Receives one multipart message from a ROUTER socket (whose first part is
 * ready) and checks it: its frames' count and size, the delimiter, the
 * signature (constant-time), a replay, and the JSON of its parts. Returns 0
 * with m filled, or -EBADMSG (the whole message was read and dropped; why
 * is in err, for the one log line) or -EAGAIN (nothing to read).
 * Contract: nothing of a message whose signature does not verify is
 * parsed or acted on; a dropped message leaves no state but its
 * signature in the replay window (only a verified one is remembered). */
int kmsg_recv(void *sock, const kconn *c, kreplay *replay, kmsg *m, airlock_error *err);
void kmsg_free(kmsg *m);

/* A message to send: frames built and signed, for the I/O thread. */
typedef struct kout {
        struct kout *next;
        int sock; /* KSOCK_* */
        size_t n;
        char **data;
        size_t *len;
} kout;

enum { KSOCK_SHELL, KSOCK_IOPUB, KSOCK_CONTROL, KSOCK_STDIN };

/* Builds a signed message of msg_type with content (stolen) in reply to
 * parent (may be NULL); ids (may be NULL) are the routing identities of
 * the request (copied), or for iopub, the topic. */
kout *kout_build(const kconn *c, const char *session, int sock, const kmsg *parent,
                 const char *msg_type, json_t *content);
void kout_free(kout *o);
int kout_send(void *sock, const kout *o);

/* "2026-12-04T14:24:13.123456Z" */
void kwire_now(char buf[40]);

/* ---- what a cell shows, safe for the notebook page (ksafe.c) ------------ */

/* Contract: a mime bundle of the cell's side (its code chose every byte)
 * rewritten so that no front-end runs a script from it: text/plain,
 * application/json and base64 images as they are, text/html through
 * ksafe_html, every other type dropped (a text/plain note names them when
 * nothing else is left). Returns a new object (empty for a non-object). */
json_t *ksafe_bundle(const json_t *data);
/* Contract: HTML re-serialised from an allow-list of tags and attributes:
 * the result holds only those tags, double-quoted escaped attribute values
 * and escaped text, never a script, an event attribute, a URL but an
 * image's data: URL, or SVG/MathML. NULL past its cap or without memory. */
char *ksafe_html(const char *in, size_t len);

/* The Python side of the kernel, loaded once into the session
 * (driver.py, embedded by driver_blob.c). */
extern const char kdriver_src[];

#endif
