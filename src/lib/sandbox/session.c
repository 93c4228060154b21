/* Sessions: a copy of the template that keeps its interpreter state across
 * runs, with fork-based snapshots. The guest side is serve_host() in
 * template.c; this is the host side. A session's interpreter is untrusted
 * like any guest: replies are read with deadlines and caps, and the host
 * watches the active interpreter through a pidfd it sent at its start. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/channel.h"
#include "fsx/fsx.h"
#include "sandbox/sandbox.h"
#include "core/util.h"

#define SESSION_REPLY_S       30.0
#define SESSION_MAX_SNAPSHOTS 64

struct airlock_session {
        airlock_sandbox *sb;
        copy *c;
        int outdir;
        int active_pidfd;
        bool dead;
        airlock_snapshot *snapshots[SESSION_MAX_SNAPSHOTS];
        size_t n_snapshots;
};

struct airlock_snapshot {
        airlock_session *s; /* NULL once the session is closed */
        int id;             /* its pid, in the session's namespace */
};

static int session_dead_error(airlock_error *err)
{
        return al_error_kind(err, AIRLOCK_ERROR_RUN, -ESRCH, NULL,
                             "the session has ended (timeout, cancel or exit); open a new one");
}

/* Reads one reply frame of the session before the deadline and checks
 * that its op is expect. The frame is small; anything else is an error. */
static int read_reply(airlock_session *s, uint64_t deadline, const char *expect, json_t **ret,
                      airlock_error *err)
{
        frame_reader fr;
        channel_reader_init(&fr, 4096);
        fr.nonblock = true; /* polled below */
        _cleanup_json_ json_t *reply = NULL;
        struct pollfd p = {s->c->chan, POLLIN, 0};
        int r = 0;
        while (r == 0) {
                uint64_t now = al_now_ns();
                if (now >= deadline) {
                        r = -ETIMEDOUT;
                        break;
                }
                if (poll(&p, 1, (int)((deadline - now) / 1000000 + 1)) <= 0)
                        continue;
                r = channel_reader_feed(&fr, s->c->chan, &reply);
        }
        channel_reader_free(&fr);
        if (r != 1)
                return al_error(err, r < 0 ? r : -EPROTO, NULL, "the session did not answer");
        const char *op = json_string_value(json_object_get(reply, WIRE_KEY_OP));
        if (!op || strcmp(op, expect) != 0) {
                const char *e = json_string_value(json_object_get(reply, WIRE_KEY_ERROR));
                return al_error(err, -EIO, NULL, "the session refused: %s",
                                e ? e : "protocol error");
        }
        if (ret)
                *ret = TAKE_PTR(reply);
        return 0;
}

/* Reads the announcement of a new active interpreter: one byte with its
 * pidfd, then a frame {"op": expect}. */
static int read_active(airlock_session *s, const char *expect, airlock_error *err)
{
        uint64_t deadline = al_now_ns() + (uint64_t)(SESSION_REPLY_S * 1e9);
        struct pollfd p = {s->c->chan, POLLIN, 0};
        if (poll(&p, 1, (int)(SESSION_REPLY_S * 1000)) <= 0)
                return al_error(err, -ETIMEDOUT, NULL, "the session did not answer");
        char tag;
        char cbuf[CMSG_SPACE(sizeof(int))];
        struct iovec iov = {&tag, 1};
        struct msghdr mh = {
            .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
        ssize_t n = recvmsg(s->c->chan, &mh, MSG_CMSG_CLOEXEC);
        struct cmsghdr *cm = n >= 0 ? CMSG_FIRSTHDR(&mh) : NULL;
        /* A fd that came is closed on every way out but success, the
         * wrong tag or a truncated message included. */
        _cleanup_close_ int fd = -1;
        if (cm && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS &&
            cm->cmsg_len == CMSG_LEN(sizeof(int)))
                memcpy(&fd, CMSG_DATA(cm), sizeof(int));
        if (n != 1 || fd < 0 || tag != COPY_ACTIVE || (mh.msg_flags & MSG_CTRUNC))
                return al_error(err, -EPROTO, NULL, "the session broke the protocol");
        if (s->active_pidfd >= 0)
                close(s->active_pidfd);
        s->active_pidfd = TAKE_FD(fd);

        return read_reply(s, deadline, expect, NULL, err);
}

/* Sends one control frame and, unless expect is NULL, reads a reply frame
 * whose op is expect. */
static int request(airlock_session *s, json_t *msg, const char *expect, json_t **ret,
                   airlock_error *err)
{
        int r = msg ? channel_send(s->c->chan, msg) : -ENOMEM;
        json_decref(msg);
        if (r < 0) {
                s->dead = true;
                return session_dead_error(err);
        }
        if (!expect)
                return 0;
        return read_reply(s, al_now_ns() + (uint64_t)(SESSION_REPLY_S * 1e9), expect, ret, err);
}

int airlock_session_open(airlock_sandbox *sb, airlock_session **ret, airlock_error *err)
{
        airlock_error_clear(err);
        airlock_session *s = calloc(1, sizeof(*s));
        if (!s)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        s->sb = sb;
        s->outdir = -1;
        s->active_pidfd = -1;
        int r = sbx_take_copy(sb, &s->c, err);
        if (r >= 0)
                r = sbx_copy_wait_ready(s->c, &s->outdir, err);
        if (r >= 0)
                r = request(s, json_pack("{s:s}", WIRE_KEY_OP, WIRE_OP_SESSION), NULL, NULL, err);
        if (r >= 0)
                r = read_active(s, WIRE_OP_SESSION, err);
        sbx_replenish(sb);
        if (r < 0) {
                airlock_session_close(s);
                return r;
        }
        *ret = s;
        return 0;
}

int airlock_session_run(airlock_session *s, const char *code, size_t len,
                        const airlock_run_options *opts, airlock_result **ret, airlock_error *err)
{
        airlock_error_clear(err);
        if (s->dead)
                return session_dead_error(err);
        int r = sbx_check_code(code, len, err);
        if (r < 0)
                return r;
        bool alive = false;
        r = sbx_run_cell(s->sb, s->c, s->outdir, s->active_pidfd, code, len, opts, &alive, ret,
                         err);
        if (r < 0 || !alive) {
                s->dead = true;
                return r;
        }
        /* The next run starts with an empty /output, as a single run does. */
        fsx_clear_dir(s->outdir, NULL);
        return r;
}

int airlock_session_snapshot(airlock_session *s, airlock_snapshot **ret, airlock_error *err)
{
        airlock_error_clear(err);
        if (s->dead)
                return session_dead_error(err);
        if (s->n_snapshots >= SESSION_MAX_SNAPSHOTS)
                return al_error(err, -E2BIG, NULL, "too many snapshots (at most %d)",
                                SESSION_MAX_SNAPSHOTS);
        _cleanup_free_ airlock_snapshot *snap = calloc(1, sizeof(*snap));
        if (!snap)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        _cleanup_json_ json_t *reply = NULL;
        int r = request(s, json_pack("{s:s}", WIRE_KEY_OP, WIRE_OP_SNAPSHOT), WIRE_OP_SNAPSHOT,
                        &reply, err);
        if (r < 0)
                return r;
        json_int_t id = json_integer_value(json_object_get(reply, WIRE_KEY_ID));
        if (id <= 1 || id > 4194304)
                return al_error(err, -EPROTO, NULL, "the session broke the protocol");
        snap->s = s;
        snap->id = (int)id;
        s->snapshots[s->n_snapshots++] = snap;
        *ret = TAKE_PTR(snap);
        return 0;
}

int airlock_session_restore(airlock_session *s, const airlock_snapshot *snap, airlock_error *err)
{
        airlock_error_clear(err);
        if (s->dead)
                return session_dead_error(err);
        if (!snap || snap->s != s)
                return al_error(err, -EINVAL, NULL, "the snapshot belongs to another session");
        json_t *keep = json_array();
        for (size_t i = 0; i < s->n_snapshots; i++)
                json_array_append_new(keep, json_integer(s->snapshots[i]->id));
        int r = request(s,
                        json_pack("{s:s, s:i, s:o}", WIRE_KEY_OP, WIRE_OP_RESTORE, WIRE_KEY_ID,
                                  snap->id, WIRE_KEY_KEEP, keep),
                        NULL, NULL, err);
        if (r >= 0)
                r = read_active(s, WIRE_OP_RESTORED, err);
        if (r < 0)
                s->dead = true;
        else
                fsx_clear_dir(s->outdir, NULL);
        return r;
}

void airlock_snapshot_free(airlock_snapshot *snap)
{
        if (!snap)
                return;
        airlock_session *s = snap->s;
        for (size_t i = 0; s && i < s->n_snapshots; i++) {
                if (s->snapshots[i] != snap)
                        continue;
                s->snapshots[i] = s->snapshots[--s->n_snapshots];
                if (!s->dead)
                        request(s,
                                json_pack("{s:s, s:i}", WIRE_KEY_OP, WIRE_OP_DROP, WIRE_KEY_ID,
                                          snap->id),
                                NULL, NULL, NULL);
                break;
        }
        free(snap);
}

void airlock_session_close(airlock_session *s)
{
        if (!s)
                return;
        for (size_t i = 0; i < s->n_snapshots; i++)
                s->snapshots[i]->s = NULL;
        if (s->active_pidfd >= 0)
                close(s->active_pidfd);
        if (s->outdir >= 0)
                close(s->outdir);
        /* Returns once every process of the session is gone. */
        sbx_copy_end(s->sb, s->c);
        free(s);
}
