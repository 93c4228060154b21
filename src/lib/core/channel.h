/* The guest <-> host channel: length-prefixed JSON frames over a stream
 * socket. The host side never trusts a frame: sizes are capped, the body is
 * parsed with jansson, and a partial or oversized frame is an error. */
#ifndef AIRLOCK_CHANNEL_H
#define AIRLOCK_CHANNEL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Largest frame either side accepts: a 16 MiB HTTP body in base64 plus room. */
#define CHANNEL_MAX_FRAME (24u << 20)

/* Incremental reader of frames. With nonblock set (on a socket), the
 * reads do not block even when the fd does, so a caller that polls need
 * not switch the fd's own mode. */
typedef struct frame_reader {
        bool nonblock;
        unsigned char hdr[4];
        size_t hdr_got;
        char *body;
        size_t need;
        size_t got;
        size_t max;
        /* Optional: asked with each complete body before it is parsed; a
         * negative answer refuses the frame unparsed (the body is dropped,
         * the stream stays in step), which the feed returns. The host sets
         * it to charge the parse against the run's budget (run.c). */
        int (*admit)(void *arg, const char *body, size_t len);
        void *admit_arg;
} frame_reader;

void channel_reader_init(frame_reader *r, size_t max);
void channel_reader_free(frame_reader *r);

/* Reads what is available from fd. Returns 1 and a parsed JSON object in
 * *ret when a frame is complete, 0 when more bytes are needed (EAGAIN),
 * -EPIPE at end of stream (-EPROTO if it ends inside a frame), -EMSGSIZE for
 * a frame over the cap, -EBADMSG for a body that is not a JSON object, or
 * what admit returned (< 0) for a frame it refused, after which the next
 * frame can be read. */
int channel_reader_feed(frame_reader *r, int fd, json_t **ret);

/* How a side waits for its peer's next frame (the guest for a reply, the
 * host for the next request of a guest that calls tools in a loop): a spin
 * of polls without blocking, then a sleep on the fd. A spin pays when the
 * peer runs on another CPU. When both share one (a synchronous wake-up puts
 * the woken side on the waker's CPU, and there they stay), the spin only
 * keeps the peer from running, and every hop of a round trip costs the
 * whole spin; so after a spin that ran out, the next frames are waited for
 * asleep, and a spin is tried again now and then. */
typedef struct channel_spin {
        unsigned skip; /* frames still to wait for asleep */
} channel_spin;

/* Whether to spin for the next frame; false: sleep on the fd at once. */
bool channel_spin_wanted(channel_spin *s);
/* The spin ran out without a frame: the caller sleeps on the fd. */
void channel_spin_expired(channel_spin *s);

/* Parses one complete frame body (exposed for the fuzzer). */
int channel_frame_parse(const char *body, size_t len, json_t **ret);

/* A frame's 4-byte header: its body's length, little-endian. */
void channel_frame_header(unsigned char hdr[4], size_t len);
uint32_t channel_frame_len(const unsigned char hdr[4]);

/* Sends msg as one frame (blocking, MSG_NOSIGNAL). */
int channel_send(int fd, const json_t *msg);
/* Sends a raw body as one frame. Async-signal-safe. */
int channel_send_raw(int fd, const char *body, size_t len);
/* Contract: async-signal-safe (no allocation, no jansson). Sends a run's
 * "end" frame: its status (a WIRE_STATUS_* name, which needs no escaping,
 * at most 32 bytes, else -EINVAL), its exit code, the signal that ended
 * it when sig is not 0, and whether it ran alone. Written out here rather
 * than packed by jansson: the signal handler that ends a run may not
 * allocate, and jansson's code, cold when a run ends, took 17 us of a
 * warm call's path. */
int channel_send_end(int fd, const char *status, int exit_code, int sig, bool alone);

#endif
