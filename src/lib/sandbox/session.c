/* Sessions: a copy of the template that keeps its interpreter state across
 * runs, with fork-based snapshots. The guest side is serve_host() in
 * template.c; this is the host side. A session's interpreter is untrusted
 * like any guest: replies are read with deadlines and caps, and the host
 * watches the active interpreter through a pidfd it sent at its start. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "config/config.h"
#include "core/channel.h"
#include "fsx/fsx.h"
#include "sandbox/sandbox.h"
#include "sandbox/run_trace.h"
#include "core/util.h"

#define SESSION_REPLY_S       30.0
#define SESSION_MAX_SNAPSHOTS 64

/* A copy of the template as sessions share it: the session that opened it
 * and its forks (airlock_session_fork), each an interpreter of its own in
 * the copy's namespaces, with its own channel and output pipes. The copy
 * (its pid 1, /tmp, /output, /input overlay and cgroup) lives until the
 * last of them is closed. Their cells, and every exchange with any of
 * them, are serialised by lock: /output and the /input overlay are the
 * copy's, captured and cleared after each cell. */
typedef struct family {
        airlock_sandbox *sb;
        copy *c; /* its channel is the first handle's, which pid 1 watches */
        int outdir;
        pthread_mutex_t lock;
        airlock_session *members; /* the handles not closed yet */
        void (*on_close)(void *);
        void *on_close_arg;
} family;

struct airlock_session {
        family *f;
        /* The copy as this handle sees it: the family's for the first
         * handle; for a fork, the family's with the fork's own channel,
         * output pipes and a dup of the copy's pidfd (all owned here). */
        copy *c;
        bool own_view;
        int sid; /* the session id of this handle's processes in the copy */
        airlock_session *next_member;
        int active_pidfd;
        bool dead;
        airlock_snapshot *snapshots[SESSION_MAX_SNAPSHOTS];
        size_t n_snapshots;
        /* The cell base: a frozen fork of the current state, taken after
         * each kept cell (and before the first), that a failed cell rolls
         * back to. base_id is its pid in the session's namespace, -1 for
         * none; base_pending: asked for, its reply not yet read (the fork
         * happens while the caller handles the cell's result). */
        int base_id;
        int base_pidfd;
        bool base_pending;
        void (*on_close)(void *);
        void *on_close_arg;
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

/* Reads one byte that must be tag, with at most one fd attached, which
 * it stores in *ret_fd (-1 when none came). */
static int read_tagged_fd(airlock_session *s, char want, int *ret_fd, airlock_error *err)
{
        *ret_fd = -1;
        struct pollfd p = {s->c->chan, POLLIN, 0};
        if (poll(&p, 1, (int)(SESSION_REPLY_S * 1000)) <= 0)
                return al_error(err, -ETIMEDOUT, NULL, "the session did not answer");
        char tag;
        /* A fd that came is closed on every way out but success, the
         * wrong tag or a second fd included. */
        _cleanup_close_ int fd = -1;
        size_t nfd = 0;
        ssize_t n = al_recv_fds(s->c->chan, &tag, 1, &fd, 1, &nfd, 0);
        if (n != 1 || tag != want || nfd > 1)
                return al_error(err, -EPROTO, NULL, "the session broke the protocol");
        *ret_fd = TAKE_FD(fd);
        return 0;
}

/* Reads the announcement of a new active interpreter: one byte with its
 * pidfd, then a frame {"op": expect, "sid"}. */
static int read_active(airlock_session *s, const char *expect, airlock_error *err)
{
        uint64_t deadline = al_now_ns() + (uint64_t)(SESSION_REPLY_S * 1e9);
        _cleanup_close_ int fd = -1;
        int r = read_tagged_fd(s, COPY_ACTIVE, &fd, err);
        if (r < 0)
                return r;
        if (fd < 0)
                return al_error(err, -EPROTO, NULL, "the session broke the protocol");
        if (s->active_pidfd >= 0)
                close(s->active_pidfd);
        s->active_pidfd = TAKE_FD(fd);

        _cleanup_json_ json_t *reply = NULL;
        r = read_reply(s, deadline, expect, &reply, err);
        if (r < 0)
                return r;
        json_int_t sid = json_integer_value(json_object_get(reply, WIRE_KEY_SID));
        if (sid <= 1 || sid > 4194304 || (s->sid > 0 && sid != s->sid))
                return al_error(err, -EPROTO, NULL, "the session broke the protocol");
        s->sid = (int)sid;
        return 0;
}

/* Reads the reply to "snapshot": a byte with the snapshot's pidfd, then
 * {"op": "snapshot", "id": its pid}. -EIO when the session refused (the
 * fork failed: a limit on processes or memory, say), which leaves the
 * session as it was. */
static int read_snapshot(airlock_session *s, int *ret_id, int *ret_pidfd, airlock_error *err)
{
        uint64_t deadline = al_now_ns() + (uint64_t)(SESSION_REPLY_S * 1e9);
        _cleanup_close_ int fd = -1;
        int r = read_tagged_fd(s, COPY_SNAPSHOT, &fd, err);
        if (r < 0)
                return r;
        _cleanup_json_ json_t *reply = NULL;
        r = read_reply(s, deadline, WIRE_OP_SNAPSHOT, &reply, err);
        if (r < 0)
                return r;
        json_int_t id = json_integer_value(json_object_get(reply, WIRE_KEY_ID));
        if (fd < 0 || id <= 1 || id > 4194304)
                return al_error(err, -EPROTO, NULL, "the session broke the protocol");
        *ret_id = (int)id;
        if (ret_pidfd)
                *ret_pidfd = TAKE_FD(fd);
        return 0;
}

/* Continues the handle's active process before the host writes to it: the
 * end of a sibling's cell stops every process of the copy but pid 1 and the
 * sibling's own (tpl_session_freeze), and guest code may stop any. Not
 * stopped, it is not affected. */
static void session_wake(const airlock_session *s)
{
        if (s->active_pidfd >= 0)
                (void)syscall(SYS_pidfd_send_signal, s->active_pidfd, SIGCONT, NULL, 0);
}

/* Sends one control frame and, unless expect is NULL, reads a reply frame
 * whose op is expect. */
static int request(airlock_session *s, json_t *msg, const char *expect, json_t **ret,
                   airlock_error *err)
{
        session_wake(s);
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

static int channel_send_hurry(airlock_session *s)
{
        json_t *msg = json_pack("{s:s}", WIRE_KEY_OP, WIRE_OP_HURRY);
        session_wake(s);
        int r = msg ? channel_send(s->c->chan, msg) : -ENOMEM;
        json_decref(msg);
        return r;
}

/* Sends "snapshot" for a new cell base, whose reply settle_base reads. */
static int base_request(airlock_session *s, airlock_error *err)
{
        int r = request(s, json_pack("{s:s, s:b}", WIRE_KEY_OP, WIRE_OP_SNAPSHOT, WIRE_KEY_BASE, 1),
                        NULL, NULL, err);
        if (r >= 0)
                s->base_pending = true;
        return r;
}

/* Reads the reply to a base_request, if one is outstanding: every other
 * exchange with the session waits for it. A refused fork leaves the
 * session without a base (the next cell asks again); anything else ends
 * the session. */
static int settle_base(airlock_session *s, airlock_error *err)
{
        if (!s->base_pending)
                return 0;
        s->base_pending = false;
        /* The session waits a moment before it takes a base, to let the
         * caller finish (tpl_session_grace in tpl_session.c); now the
         * caller waits for it. */
        if (channel_send_hurry(s) < 0) {
                s->dead = true;
                return session_dead_error(err);
        }
        int r = read_snapshot(s, &s->base_id, &s->base_pidfd, err);
        if (r < 0 && r != -EIO)
                s->dead = true;
        return r;
}

/* Forgets the cell base; drop also ends its process (a restore that does
 * not keep it ends it anyway). */
static void base_forget(airlock_session *s, bool drop)
{
        if (s->base_id < 0)
                return;
        if (drop && !s->dead)
                request(s,
                        json_pack("{s:s, s:i}", WIRE_KEY_OP, WIRE_OP_DROP, WIRE_KEY_ID, s->base_id),
                        NULL, NULL, NULL);
        close(s->base_pidfd);
        s->base_pidfd = -1;
        s->base_id = -1;
}

/* A cell base before a cell: the one taken after the last cell if it is
 * alive, or a new one now. */
static int base_ensure(airlock_session *s, airlock_error *err)
{
        int r = settle_base(s, err);
        /* Guest code can end its base: a dead one is forgotten and
         * replaced, rather than found missing at a rollback. It is not
         * dropped by pid, which may be another process's by now; the new
         * base's taking reaps it (tpl_session_snapshot). */
        struct pollfd p = {s->base_pidfd, POLLIN, 0};
        if (r >= 0 && s->base_id > 0 && poll(&p, 1, 0) > 0)
                base_forget(s, false);
        if (r >= 0 && s->base_id < 0) {
                r = base_request(s, err);
                if (r >= 0)
                        r = settle_base(s, err);
        }
        if (r == -EIO) {
                /* The record's message is copied first: it is rewritten. */
                char why[sizeof(err->message)];
                snprintf(why, sizeof(why), "%s", err ? err->message : "the fork failed");
                return al_error_kind(err, AIRLOCK_ERROR_RUN, -EAGAIN, NULL,
                                     "the session cannot keep a copy of its state for the cell "
                                     "(%s); the cell did not run",
                                     why);
        }
        return r;
}

/* Waits until pidfd's process has exited, for at most SESSION_REPLY_S. */
static int wait_exit(int pidfd)
{
        struct pollfd p = {pidfd, POLLIN, 0};
        uint64_t deadline = al_now_ns() + (uint64_t)(SESSION_REPLY_S * 1e9);
        for (;;) {
                uint64_t now = al_now_ns();
                if (now >= deadline)
                        return -ETIMEDOUT;
                int k = poll(&p, 1, (int)((deadline - now) / 1000000 + 1));
                if (k > 0)
                        return 0;
                if (k < 0 && errno != EINTR)
                        return -errno;
        }
}

/* Discards what the channel holds for the host (frames and fds a dead
 * interpreter sent, unread). */
static void drain_channel(airlock_session *s)
{
        /* Keeping no fd closes every one that came; a message whose fds
         * the kernel cut short (-EPROTO) is read all the same. */
        char buf[4096];
        ssize_t n;
        while ((n = al_recv_fds(s->c->chan, buf, sizeof(buf), NULL, 0, NULL, MSG_DONTWAIT)) > 0 ||
               n == -EPROTO)
                ;
}

/* The snapshots a restore keeps: the caller's, and the base unless
 * without_base. */
static json_t *keep_list(airlock_session *s, bool with_base)
{
        json_t *keep = json_array();
        for (size_t i = 0; keep && i < s->n_snapshots; i++)
                json_array_append_new(keep, json_integer(s->snapshots[i]->id));
        if (keep && with_base && s->base_id > 0)
                json_array_append_new(keep, json_integer(s->base_id));
        return keep;
}

/* The session ids of the handle's live siblings: a restore of this handle
 * leaves their processes alone. */
static json_t *spare_list(airlock_session *s)
{
        json_t *spare = json_array();
        for (airlock_session *o = s->f->members; spare && o; o = o->next_member)
                if (o != s && !o->dead && o->sid > 0)
                        json_array_append_new(spare, json_integer(o->sid));
        return spare;
}

/* Contract: after a failed cell, makes the cell base the session's
 * interpreter again. The host kills the cell's interpreter and waits for
 * its death, discards what it left unread, and wakes the base with
 * SIGUSR1 from outside the session's namespace; the base's new active
 * process discards what the dead one left unread on its side, asks for the
 * snapshots to keep, ends every other process of the session and announces
 * itself (template.c, host_rollback). The base stays, frozen: it still
 * holds the state the session now has. Any failure ends the session. */
static int rollback(airlock_session *s, airlock_error *err)
{
        if (s->base_id < 0)
                return al_error(err, -ESRCH, NULL, "the session has no copy of its state");
        syscall(SYS_pidfd_send_signal, s->active_pidfd, SIGKILL, NULL, 0);
        int r = wait_exit(s->active_pidfd);
        if (r < 0)
                return al_error(err, r, NULL, "the session's interpreter did not end");
        drain_channel(s);
        /* The base sleeps stopped since the cell ended (tpl_session_freeze),
         * or since guest code stopped it (kill(-1, SIGSTOP) in the cell):
         * continued, it takes the wake-up at once. */
        (void)syscall(SYS_pidfd_send_signal, s->base_pidfd, SIGCONT, NULL, 0);
        if (syscall(SYS_pidfd_send_signal, s->base_pidfd, SIGUSR1, NULL, 0) < 0)
                return al_error(err, -errno, NULL, "the session's copy of its state is gone");
        r = read_reply(s, al_now_ns() + (uint64_t)(SESSION_REPLY_S * 1e9), WIRE_OP_RESTORE, NULL,
                       err);
        if (r >= 0)
                r = request(s,
                            json_pack("{s:s, s:o, s:o}", WIRE_KEY_OP, WIRE_OP_RESTORE,
                                      WIRE_KEY_KEEP, keep_list(s, true), WIRE_KEY_SPARE,
                                      spare_list(s)),
                            NULL, NULL, err);
        if (r >= 0)
                r = read_active(s, WIRE_OP_RESTORED, err);
        return r;
}

static airlock_session *session_new(family *f)
{
        airlock_session *s = calloc(1, sizeof(*s));
        if (!s)
                return NULL;
        s->f = f;
        s->active_pidfd = -1;
        s->base_id = -1;
        s->base_pidfd = -1;
        return s;
}

int airlock_session_open(airlock_sandbox *sb, airlock_session **ret, airlock_error *err)
{
        return sbx_session_open_input(sb, NULL, ret, err);
}

int sbx_session_open_input(airlock_sandbox *sb, struct sbx_input *in, airlock_session **ret,
                           airlock_error *err)
{
        airlock_error_clear(err);
        family *f = calloc(1, sizeof(*f));
        airlock_session *s = f ? session_new(f) : NULL;
        if (!s) {
                free(f);
                return al_error(err, -ENOMEM, NULL, "out of memory");
        }
        f->sb = sb;
        f->outdir = -1;
        pthread_mutex_init(&f->lock, NULL);
        f->members = s;
        int r = sbx_take_copy(sb, NULL, &f->c, err);
        s->c = f->c;
        if (r >= 0)
                r = sbx_copy_prepare(sb, f->c, in, NULL, &f->outdir, err);
        if (r >= 0)
                r = request(s, json_pack("{s:s}", WIRE_KEY_OP, WIRE_OP_SESSION), NULL, NULL, err);
        if (r >= 0)
                r = read_active(s, WIRE_OP_SESSION, err);
        /* The first cell's base is forked while the caller gets ready. */
        if (r >= 0)
                r = base_request(s, err);
        sbx_replenish(sb);
        if (r < 0) {
                airlock_session_close(s);
                return r;
        }
        *ret = s;
        return 0;
}

static int session_run_locked(airlock_session *s, const char *code, size_t len,
                              const airlock_run_options *opts, airlock_result **ret,
                              airlock_error *err)
{
        if (s->dead)
                return session_dead_error(err);
        int r = sbx_check_code(code, len, err);
        if (r < 0)
                return r;
        r = base_ensure(s, err);
        if (r < 0)
                return r;
        /* The processes the last cell left, stopped since it ended, go on
         * with this one; those of the siblings stay stopped. */
        r = request(
            s, json_pack("{s:s, s:o}", WIRE_KEY_OP, WIRE_OP_THAW, WIRE_KEY_SPARE, spare_list(s)),
            NULL, NULL, err);
        if (r < 0)
                return r;
        bool alive = false;
        /* The cell is this call's outermost layer with a watch: the steps
         * before it (the base, the thaw) are quick. */
        al_watch w = al_watch_from(opts);
        r = sbx_run_cell(s->f->sb, s->c, s->f->outdir, s->active_pidfd, code, len, opts, &w, &alive,
                         ret, err);
        /* A fork's view reaped the copy's pid 1 through its own pidfd (the
         * copy died): the family's pidfd must not be waited on again. */
        if (s->own_view && s->c->pidfd < 0 && s->f->c->pidfd >= 0) {
                close(s->f->c->pidfd);
                s->f->c->pidfd = -1;
        }
        if (r < 0 || !alive) {
                s->dead = true;
                return r;
        }
        airlock_result *res = *ret;
        if (res->success) {
                /* The cell's state is the session's: the old base goes,
                 * and the next cell's is forked while the caller reads
                 * this result. */
                res->cell_state = AIRLOCK_CELL_KEPT;
                base_forget(s, true);
                if (base_request(s, NULL) < 0)
                        s->dead = true;
        } else {
                airlock_error rerr;
                if (rollback(s, &rerr) < 0) {
                        s->dead = true;
                        char *m = NULL;
                        if (asprintf(&m, "%s; the session ended: %s",
                                     res->error_message ? res->error_message : "the cell failed",
                                     rerr.message) >= 0) {
                                free(res->error_message);
                                res->error_message = m;
                        }
                } else {
                        res->cell_state = AIRLOCK_CELL_ROLLED_BACK;
                }
        }
        /* The next run starts with an empty /output, as a single run does. */
        fsx_clear_dir(s->f->outdir, NULL);
        return 0;
}

int airlock_session_run(airlock_session *s, const char *code, size_t len,
                        const airlock_run_options *opts, airlock_result **ret, airlock_error *err)
{
        airlock_error_clear(err);
        airlock_run_options o;
        int r = al_run_options_in(opts, &o, err);
        if (r < 0)
                return r;
        al_span *span =
            sbx_trace_run_begin("airlock.cell", &o, code, len, sbx_config(s->f->sb)->secrets);
        al_span *outer = al_span_push(span ? span : al_span_current());
        pthread_mutex_lock(&s->f->lock);
        r = session_run_locked(s, code, len, &o, ret, err);
        pthread_mutex_unlock(&s->f->lock);
        al_span_pop(outer);
        if (span && r >= 0)
                al_span_set_str(span, "airlock.cell.state",
                                (*ret)->cell_state == AIRLOCK_CELL_KEPT ? "kept" : "rolled_back");
        sbx_trace_run_end(span, &sbx_config(s->f->sb)->limits, r, r >= 0 ? *ret : NULL,
                          err ? err->message : NULL);
        return r;
}

static int session_snapshot_locked(airlock_session *s, airlock_snapshot **ret, airlock_error *err)
{
        if (s->dead)
                return session_dead_error(err);
        if (s->n_snapshots >= SESSION_MAX_SNAPSHOTS)
                return al_error(err, -E2BIG, NULL, "too many snapshots (at most %d)",
                                SESSION_MAX_SNAPSHOTS);
        int r = settle_base(s, err);
        if (r < 0 && s->dead)
                return r;
        _cleanup_free_ airlock_snapshot *snap = calloc(1, sizeof(*snap));
        if (!snap)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        r = request(s, json_pack("{s:s}", WIRE_KEY_OP, WIRE_OP_SNAPSHOT), NULL, NULL, err);
        if (r >= 0)
                r = read_snapshot(s, &snap->id, NULL, err);
        if (r < 0) {
                if (r != -EIO)
                        s->dead = true;
                return r;
        }
        snap->s = s;
        s->snapshots[s->n_snapshots++] = snap;
        *ret = TAKE_PTR(snap);
        return 0;
}

int airlock_session_snapshot(airlock_session *s, airlock_snapshot **ret, airlock_error *err)
{
        airlock_error_clear(err);
        pthread_mutex_lock(&s->f->lock);
        int r = session_snapshot_locked(s, ret, err);
        pthread_mutex_unlock(&s->f->lock);
        return r;
}

static int session_restore_locked(airlock_session *s, const airlock_snapshot *snap,
                                  airlock_error *err)
{
        if (s->dead)
                return session_dead_error(err);
        if (!snap || snap->s != s)
                return al_error(err, -EINVAL, NULL, "the snapshot belongs to another session");
        int r = settle_base(s, err);
        if (r < 0 && s->dead)
                return r;
        /* The base holds the state that the restore replaces: the restore
         * ends it, and the next cell forks a new one. */
        base_forget(s, false);
        r = request(s,
                    json_pack("{s:s, s:i, s:o, s:o}", WIRE_KEY_OP, WIRE_OP_RESTORE, WIRE_KEY_ID,
                              snap->id, WIRE_KEY_KEEP, keep_list(s, false), WIRE_KEY_SPARE,
                              spare_list(s)),
                    NULL, NULL, err);
        if (r >= 0)
                r = read_active(s, WIRE_OP_RESTORED, err);
        if (r < 0)
                s->dead = true;
        else
                fsx_clear_dir(s->f->outdir, NULL);
        return r;
}

int airlock_session_restore(airlock_session *s, const airlock_snapshot *snap, airlock_error *err)
{
        airlock_error_clear(err);
        pthread_mutex_lock(&s->f->lock);
        int r = session_restore_locked(s, snap, err);
        pthread_mutex_unlock(&s->f->lock);
        return r;
}

void airlock_snapshot_free(airlock_snapshot *snap)
{
        if (!snap)
                return;
        airlock_session *s = snap->s;
        family *f = s ? s->f : NULL;
        if (f)
                pthread_mutex_lock(&f->lock);
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
        if (f)
                pthread_mutex_unlock(&f->lock);
        free(snap);
}

/* Frees a fork's own view of the copy: its channel, output pipes and
 * pidfd (the rest is the family's). */
static void view_free(copy *v)
{
        if (!v)
                return;
        closep(&v->chan);
        closep(&v->out_r);
        closep(&v->err_r);
        closep(&v->pidfd);
        free(v);
}

/* Contract: ends the processes of handle s while its siblings stay, s
 * being unlinked from them already. A live sibling's active process, asked
 * to "leave" for s's session id, ends every process of it and returns once
 * pid 1 has reaped them all. Without a live sibling, or when it fails, s's
 * active process and cell base are killed from here, and what else it left
 * ends with the copy (or at a sibling's next restore: s's session id is no
 * longer spared). */
static void session_leave(airlock_session *s)
{
        airlock_session *o = s->f->members;
        while (o && o->dead)
                o = o->next_member;
        if (o && s->sid > 0) {
                /* The sibling's pending cell base is read first: its reply
                 * comes before the answer to "leave". */
                settle_base(o, NULL);
                int r = o->dead ? -ESRCH
                                : request(o,
                                          json_pack("{s:s, s:i}", WIRE_KEY_OP, WIRE_OP_LEAVE,
                                                    WIRE_KEY_SID, s->sid),
                                          WIRE_OP_LEAVE, NULL, NULL);
                /* A refusal leaves the sibling's channel at a frame
                 * boundary; anything else (a timeout) does not. */
                if (r < 0 && r != -EIO)
                        o->dead = true;
                if (r >= 0)
                        return;
        }
        if (s->active_pidfd >= 0)
                syscall(SYS_pidfd_send_signal, s->active_pidfd, SIGKILL, NULL, 0);
        if (s->base_pidfd >= 0)
                syscall(SYS_pidfd_send_signal, s->base_pidfd, SIGKILL, NULL, 0);
}

static void session_close(airlock_session *s);

void airlock_session_close(airlock_session *s)
{
        if (!s)
                return;
        al_span *span = sbx_trace_child("airlock.session.close");
        session_close(s);
        al_span_end(span);
}

static void session_close(airlock_session *s)
{
        family *f = s->f;
        pthread_mutex_lock(&f->lock);
        for (size_t i = 0; i < s->n_snapshots; i++)
                s->snapshots[i]->s = NULL;
        for (airlock_session **p = &f->members; *p; p = &(*p)->next_member)
                if (*p == s) {
                        *p = s->next_member;
                        break;
                }
        bool last = !f->members;
        if (!last && f->c)
                session_leave(s);
        if (s->base_pidfd >= 0)
                close(s->base_pidfd);
        if (s->active_pidfd >= 0)
                close(s->active_pidfd);
        if (s->own_view)
                view_free(s->c);
        pthread_mutex_unlock(&f->lock);
        free(s);
        if (!last)
                return;
        if (f->outdir >= 0)
                close(f->outdir);
        /* Returns once every process of the copy is gone. */
        if (f->c)
                sbx_copy_end(f->sb, f->c);
        if (f->on_close)
                f->on_close(f->on_close_arg);
        pthread_mutex_destroy(&f->lock);
        free(f);
}

void sbx_session_on_close(airlock_session *s, void (*fn)(void *), void *arg)
{
        s->f->on_close = fn;
        s->f->on_close_arg = arg;
}

/* A fork's view of the copy: the family's, with a channel, output pipes
 * and pidfd of its own; *ret_theirs gets the fork's ends (its channel and
 * the pipes' write ends), to send. */
static int view_new(const copy *c, copy **ret, int theirs[3], airlock_error *err)
{
        copy *v = calloc(1, sizeof(*v));
        if (!v)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        *v = *c;
        v->chan = v->out_r = v->err_r = v->pidfd = -1;
        int sv[2], out[2], er[2];
        int r = 0;
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
                r = -errno;
        else {
                v->chan = sv[0];
                theirs[0] = sv[1];
        }
        if (r >= 0 && pipe2(out, O_CLOEXEC) < 0)
                r = -errno;
        else if (r >= 0) {
                v->out_r = out[0];
                theirs[1] = out[1];
        }
        if (r >= 0 && pipe2(er, O_CLOEXEC) < 0)
                r = -errno;
        else if (r >= 0) {
                v->err_r = er[0];
                theirs[2] = er[1];
        }
        /* The host's ends are non-blocking, as the copy's own are
         * (template.c); the pidfd is a dup, which run.c may close. */
        if (r >= 0 &&
            (fcntl(v->out_r, F_SETFL, O_NONBLOCK) < 0 || fcntl(v->err_r, F_SETFL, O_NONBLOCK) < 0 ||
             (c->pidfd >= 0 && (v->pidfd = fcntl(c->pidfd, F_DUPFD_CLOEXEC, 3)) < 0)))
                r = -errno;
        if (r < 0) {
                for (int i = 0; i < 3; i++)
                        closep(&theirs[i]);
                view_free(v);
                return al_error(err, r, NULL, "cannot make the fork's channel: %s", strerror(-r));
        }
        *ret = v;
        return 0;
}

/* Sends the fork's three fds after the "fork" frame. */
static int send_fork_fds(int chan, const int fds[3])
{
        char tag = COPY_FORK;
        return al_send_fds(chan, &tag, 1, fds, 3);
}

/* Contract: a new handle of s's copy whose interpreter holds s's state.
 * With a cell base, which holds the state as s's last cell left it, the
 * base becomes the fork (tpl_session_fork, base_become_fork): no page table
 * is copied while the caller waits, and s asks for a new base once the fork
 * has answered, which is taken while the caller handles the new handle. Without one, s's active
 * process clones itself. The fds that follow the "fork" frame are the fork's channel and output
 * pipes; it announces itself on its own channel and takes its own cell base at once, whose reply
 * the new handle's first call reads. A refused fork (a limit on processes or memory, a base that
 * could not) leaves s as it was, without a base after a base's refusal; anything else ends s. */
static int session_fork_locked(airlock_session *s, airlock_session **ret, airlock_error *err)
{
        if (s->dead)
                return session_dead_error(err);
        int r = settle_base(s, err);
        if (r < 0 && s->dead)
                return r;
        airlock_session *n = session_new(s->f);
        if (!n)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        int theirs[3] = {-1, -1, -1};
        r = view_new(s->f->c, &n->c, theirs, err);
        if (r < 0) {
                free(n);
                return r;
        }
        n->own_view = true;
        bool via_base = s->base_id > 0;
        json_t *msg =
            via_base ? json_pack("{s:s, s:i}", WIRE_KEY_OP, WIRE_OP_FORK, WIRE_KEY_BASE, s->base_id)
                     : json_pack("{s:s}", WIRE_KEY_OP, WIRE_OP_FORK);
        r = request(s, msg, NULL, NULL, err);
        if (r >= 0) {
                r = send_fork_fds(s->c->chan, theirs);
                if (r < 0) {
                        s->dead = true;
                        r = session_dead_error(err);
                }
        }
        for (int i = 0; i < 3; i++)
                closep(&theirs[i]);
        if (r >= 0) {
                _cleanup_json_ json_t *reply = NULL;
                r = read_reply(s, al_now_ns() + (uint64_t)(SESSION_REPLY_S * 1e9), WIRE_OP_FORK,
                               &reply, err);
                if (r < 0 && r != -EIO)
                        s->dead = true;
                /* The base is gone either way: the fork's interpreter now,
                 * or ended after its refusal. s takes a new one. A refusal
                 * of the clone that replaced the hand-over (a link that
                 * guest code broke or filled) leaves the base alive: it is
                 * ended here, through its pidfd (its pid may be reused). */
                bool gave = json_is_true(json_object_get(reply, WIRE_KEY_BASE));
                if (via_base && r == -EIO && s->base_pidfd >= 0)
                        syscall(SYS_pidfd_send_signal, s->base_pidfd, SIGKILL, NULL, 0);
                if (via_base && (r == -EIO || gave))
                        base_forget(s, false);
        }
        if (r >= 0)
                r = read_active(n, WIRE_OP_FORK, err);
        /* s's new base is asked for once the fork has answered: forked
         * meanwhile, it would keep the fork's announcement (or this
         * thread) from a CPU on a small machine. */
        if (!s->dead && s->base_id < 0 && !s->base_pending && base_request(s, NULL) < 0)
                s->dead = true;
        if (r < 0) {
                /* A clone that got so far ends with its pidfd's kill. */
                if (n->active_pidfd >= 0) {
                        syscall(SYS_pidfd_send_signal, n->active_pidfd, SIGKILL, NULL, 0);
                        close(n->active_pidfd);
                }
                view_free(n->c);
                free(n);
                if (r != -EIO)
                        return r;
                char why[sizeof(err->message)];
                snprintf(why, sizeof(why), "%s", err ? err->message : "refused");
                return al_error_kind(err, AIRLOCK_ERROR_RUN, -EAGAIN, NULL,
                                     "the session could not fork (%s); it goes on as it was", why);
        }
        n->base_pending = true;
        n->next_member = s->f->members;
        s->f->members = n;
        *ret = n;
        return 0;
}

int airlock_session_fork(airlock_session *s, airlock_session **ret, airlock_error *err)
{
        airlock_error_clear(err);
        al_span *span = sbx_trace_child("airlock.session.fork");
        pthread_mutex_lock(&s->f->lock);
        int r = session_fork_locked(s, ret, err);
        pthread_mutex_unlock(&s->f->lock);
        if (r < 0)
                al_span_error(span, "the fork failed");
        al_span_end(span);
        return r;
}

/* The pid, in the host's namespace, of the process behind pidfd, from
 * /proc/self/fdinfo; -1 when it is gone. */
static pid_t pidfd_pid(int pidfd)
{
        char path[64], line[256];
        snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", pidfd);
        FILE *f = fopen(path, "re");
        if (!f)
                return -1;
        pid_t pid = -1;
        while (fgets(line, sizeof(line), f))
                if (strncmp(line, "Pid:", 4) == 0)
                        pid = (pid_t)atoi(line + 4);
        fclose(f);
        return pid;
}

/* The proportional set size of a process, in bytes, from its
 * smaps_rollup; 0 when it cannot be read. Summed over the interpreter and
 * its rollback copy, a page only the two share counts once, which their
 * private sizes (USS) would miss right after every fork. */
static uint64_t pss_bytes(pid_t pid)
{
        char path[64], line[256];
        snprintf(path, sizeof(path), "/proc/%d/smaps_rollup", (int)pid);
        FILE *f = fopen(path, "re");
        if (!f)
                return 0;
        uint64_t kib = 0;
        while (fgets(line, sizeof(line), f)) {
                unsigned long long v;
                if (sscanf(line, "Pss: %llu kB", &v) == 1)
                        kib += v;
        }
        fclose(f);
        return kib * 1024;
}

int airlock_session_memory(airlock_session *s, uint64_t *ret_bytes, airlock_error *err)
{
        airlock_error_clear(err);
        if (s->dead)
                return session_dead_error(err);
        uint64_t total = 0;
        /* The copy's own cgroup where there is one: everything the
         * session holds, in one cheap read. */
        if (sbx_copy_memory(s->f->sb, s->f->c, &total) >= 0) {
                *ret_bytes = total;
                return 0;
        }
        int fds[2] = {s->active_pidfd, s->base_pidfd};
        for (int i = 0; i < 2; i++) {
                pid_t pid = fds[i] >= 0 ? pidfd_pid(fds[i]) : -1;
                if (pid > 0)
                        total += pss_bytes(pid);
        }
        *ret_bytes = total;
        return 0;
}

bool airlock_session_alive(const airlock_session *s)
{
        return s && !s->dead;
}
