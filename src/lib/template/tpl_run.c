/* A copy serving the host: the loop that reads the host's frames (one run,
 * or a session's runs, snapshots and restores), the end of a single run,
 * and the whole runs the template's probe goes through (tpl_prefault.c). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/channel.h"
#include "core/util.h"
#include "template/template.h"
#include "template/template_internal.h"

/* The number of threads of this process, or -1 when it cannot be read.
 * procfs gives /proc/PID/task a link count of 2 plus the process's threads
 * (proc_task_getattr, since Linux 2.6), the figure of field 20 of
 * /proc/self/stat: one stat, where reading the stat file has the kernel
 * gather all of that file's fields (the CPU times of every thread among
 * them), 8 us against 1.5 here. A count below one thread is no such
 * procfs: the stat file then. */
static int own_threads(void)
{
        struct stat st;
        if (stat("/proc/self/task", &st) == 0 && st.st_nlink >= 3 && st.st_nlink < INT_MAX)
                return (int)(st.st_nlink - 2);
        char buf[1024];
        ssize_t n;
        {
                _cleanup_close_ int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
                if (fd < 0)
                        return -1;
                n = read(fd, buf, sizeof(buf) - 1);
        }
        if (n <= 0)
                return -1;
        buf[n] = '\0';
        /* The name (field 2) may hold spaces and parentheses: count fields
         * from its closing parenthesis, after which field 3 starts. */
        char *p = strrchr(buf, ')');
        for (int field = 2; p && field < 20; field++)
                p = strchr(p + 1, ' ');
        return p ? atoi(p + 1) : -1;
}

/* Contract: called in a single run's copy, pid 1 of its PID namespace,
 * after the guest's code has returned. Kills every other process of the
 * namespace and reaps them all, then tells whether this process is left
 * alone with a single thread. Only then can nothing of the guest's write
 * to /output or the output pipes any more, and the host may capture at
 * once rather than wait for this process's exit, which tears down the
 * whole interpreter. A guest that fakes the answer (it owns this
 * process's memory) only races its own capture, which is safe against
 * concurrent writers by design. */
static bool end_run_alone(void)
{
        /* As pid 1, kill(-1) reaches every other process of the namespace;
         * orphans are re-parented to us, so reaping until ECHILD collects
         * them all. Repeat until nothing is left to signal. */
        for (int pass = 0; pass < 100; pass++) {
                /* No child at all means no other process: orphans would be
                 * ours. This is one cheap call, where kill(-1) walks every
                 * process of the machine. */
                if (waitpid(-1, NULL, WNOHANG | __WALL) < 0 && errno == ECHILD)
                        return own_threads() == 1;
                if (kill(-1, SIGKILL) < 0 && errno == ESRCH)
                        return own_threads() == 1;
                for (;;) {
                        pid_t w = waitpid(-1, NULL, __WALL);
                        if (w < 0 && errno != EINTR)
                                break;
                }
        }
        return false;
}

/* A copy that serves asks for the shortest time slice the scheduler gives
 * a SCHED_OTHER task (0.1 ms; the default is 0.7 ms times one plus the log2
 * of the CPUs). The weight, and so its share of the CPUs, stays the
 * caller's: on an EEVDF scheduler (Linux 6.12 and later) a shorter slice
 * only means an earlier deadline, so that the host's frame, when it wakes
 * the copy, preempts a CPU-bound task at once instead of after the rest of
 * that task's slice, and likewise each of the copy's own wake-ups. Any
 * process may ask this for itself (a guest could, too, with the same call).
 * An older kernel ignores the field (the call still makes the copy
 * SCHED_OTHER at the caller's nice value); one without sched_setattr fails
 * it, and tpl_set_preparing then uses sched_setscheduler. Returns 0 when
 * the call succeeded. */
#define SERVE_SLICE_NS 100000ULL
static int serve_slice(void)
{
        struct al_sched_attr {
                uint32_t size, policy;
                uint64_t flags;
                int32_t nice;
                uint32_t priority;
                uint64_t runtime, deadline, period;
        } a = {.size = sizeof(a), .policy = SCHED_OTHER, .runtime = SERVE_SLICE_NS};
        a.nice = getpriority(PRIO_PROCESS, 0);
        return syscall(SYS_sched_setattr, 0, &a, 0) < 0 ? -errno : 0;
}

/* The caller's policy, which the template inherited from the host: -1
 * until tpl_set_preparing first reads it. */
static int caller_policy = -1;

/* Copies are prepared with the caller's weight, never at idle priority,
 * where other work on the machine starved the preparation and the next
 * call waited for it (and an unprivileged process cannot leave SCHED_IDLE
 * again). Where the caller runs as SCHED_OTHER, preparation runs as
 * SCHED_BATCH, the same weight and nice value, which only does not preempt
 * a running task when it wakes: a copy's exit and the next copy's fork,
 * which overlap with the host's capture and answer, then do not cut in on
 * the host on its CPU. Any process may switch between the two. A copy
 * serves the host with the caller's own policy and weight, and the
 * shortest slice (serve_slice), so that the host's frames wake it at
 * once. */
void tpl_set_preparing(bool preparing)
{
        if (caller_policy < 0)
                caller_policy = sched_getscheduler(0);
        if (caller_policy != SCHED_OTHER)
                return;
        if (!preparing && serve_slice() == 0)
                return;
        struct sched_param sp = {0};
        (void)sched_setscheduler(0, preparing ? SCHED_BATCH : SCHED_OTHER, &sp);
}

/* After a snapshot op, in whichever process it returned in: the active
 * process that took a cell base copies the pages a run writes (once the
 * host had its moment), so that the next cell does not fault on each; so
 * does a new active process that a restore or a rollback made (its pages
 * are all its base's). A new fork takes its cell base at once, so that its
 * first cell need not wait for it, and populates nothing, so that the fork
 * stays shared until a side writes; the loop goes on in each later fork or
 * restore made from that base. populate is false after a base that became
 * a fork, whose pages stay shared as well. */
static void after_snapshot(struct template_state *tpl, int chan, enum snapshot_end e, bool populate)
{
        while (e == SNAPSHOT_FORKED) {
                e = tpl_session_snapshot(tpl, chan, true);
                populate = false;
        }
        /* The pages the last cell wrote, when they were learned before the
         * base was forked (tpl_precopy_learn); otherwise those a copy writes.
         * A restore's process was made from a base that holds what was
         * learned before it was forked. */
        if (e == SNAPSHOT_RESTORED) {
                tpl_session_grace(chan);
                if (!tpl_precopy_populate(chan))
                        tpl_populate_learned(tpl);
        } else if (e == SNAPSHOT_TAKEN && populate) {
                if (!tpl_precopy_populate(chan))
                        tpl_populate_learned(tpl);
        } else {
                tpl_precopy_forget();
        }
}

/* Before a run: the code's sys.argv and standard input, when the "run"
 * frame has them (airlock_run_options.argv, stdin_data). Standard input is
 * fd 0 itself, an unlinked file of the run's /tmp (whose size the run's
 * memory bounds), so that sys.stdin, input() and the processes the code
 * starts read it, as they read `python3 script.py < data`'s; sys.stdin
 * wraps fd 0 and has read nothing of it yet. */
static void set_script(const json_t *argv, const json_t *stdin_b64, const json_t *stdin_mode)
{
        /* Every run says where its standard input comes from: a session's
         * cell does not keep the last one's. */
        const char *mode = json_string_value(stdin_mode);
        guest_set_stdin(mode ? mode : "");
        if (json_is_array(argv)) {
                size_t n = json_array_size(argv);
                _cleanup_free_ const char **v = calloc(n + 1, sizeof(*v));
                size_t k = 0;
                for (size_t i = 0; v && i < n; i++) {
                        const char *s = json_string_value(json_array_get(argv, i));
                        if (s)
                                v[k++] = s;
                }
                if (v)
                        guest_set_argv(v, k);
        }
        if (!json_is_string(stdin_b64))
                return;
        _cleanup_free_ unsigned char *data = NULL;
        size_t n = 0;
        int r = al_base64_decode(json_string_value(stdin_b64), json_string_length(stdin_b64), &data,
                                 &n);
        _cleanup_close_ int fd = r < 0 ? -1 : open("/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
        if (fd < 0 || al_write_full(fd, data, n) < 0 || lseek(fd, 0, SEEK_SET) != 0 ||
            dup2(fd, 0) < 0)
                fprintf(stderr, "airlock: cannot give the run its standard input: %s\n",
                        r < 0 ? "not base64" : strerror(errno));
}

/* The copy's loop: one run and exit, or, once the host opens a session,
 * runs, snapshots and restores until the host closes it. */
_Noreturn void tpl_serve_host(struct template_state *tpl, int chan)
{
        /* A late-input copy served the host's first frame already
         * (await_input). */
        bool session = false, first = !tpl->params.late_input;
        frame_reader fr;
        channel_reader_init(&fr, CHANNEL_MAX_FRAME);
        for (;;) {
                /* Freed at the end of each pass, also in the processes a
                 * session op returns in (a fork's own copy of it). */
                _cleanup_json_ json_t *msg = NULL;
                if (channel_reader_feed(&fr, chan, &msg) != 1)
                        _exit(0); /* the host is gone or closed this copy */
                if (first)
                        tpl_set_preparing(false);
                first = false;
                const char *op = json_string_value(json_object_get(msg, WIRE_KEY_OP));
                op = op ? op : "";
                /* A cell base left for the next base goes before any other
                 * op is served. */
                if (session && strcmp(op, WIRE_OP_SNAPSHOT) != 0)
                        tpl_session_finish_drop(tpl);
                if (strcmp(op, WIRE_OP_RUN) == 0) {
                        json_t *jc = json_object_get(msg, WIRE_KEY_CODE);
                        const char *code = json_string_value(jc);
                        const char *status = WIRE_STATUS_ERROR;
                        /* A session's threads may call the host while the
                         * cell runs, and only then (guest_channel_hold). */
                        if (session)
                                guest_channel_hold(false);
                        /* The preloads' pages, if the code names one. */
                        if (code)
                                tpl_populate_for(tpl, code, json_string_length(jc));
                        set_script(json_object_get(msg, WIRE_KEY_ARGV),
                                   json_object_get(msg, WIRE_KEY_STDIN),
                                   json_object_get(msg, WIRE_KEY_STDIN_MODE));
                        int exit_code =
                            code ? guest_run(code, json_string_length(jc), true, &status) : 1;
                        if (session) {
                                guest_channel_hold(true);
                                /* The cell's other processes stop until the
                                 * next cell of this handle. */
                                tpl_session_freeze();
                                if (channel_send_end(chan, status, exit_code, 0, false) < 0)
                                        _exit(0); /* the host is gone */
                                continue;
                        }
                        /* A single run: when nothing else of the run is
                         * left, close the output pipes and say so, so that
                         * the host captures at once; otherwise the host
                         * waits for the exit, which ends the rest. */
                        bool alone = end_run_alone();
                        if (alone)
                                syscall(SYS_close_range, 1, 2, 0);
                        guest_end_of_run();
                        if (channel_send_end(chan, status, exit_code, 0, alone) < 0)
                                _exit(0); /* the host is gone */
                        /* The exit tears down a whole interpreter, a
                         * millisecond or more of CPU here, with the
                         * caller's weight: the template starts the next
                         * copy beside it once the host has the frame above
                         * (sbx_run_ended in sandbox.c), and at idle
                         * priority a busy machine starved this exit. */
                        if (alone)
                                tpl_set_preparing(true);
                        _exit(exit_code & 0xff);
                } else if (strcmp(op, WIRE_OP_SESSION) == 0 && !session) {
                        tpl_session_open(tpl, chan);
                        guest_channel_hold(true);
                        session = true;
                } else if (strcmp(op, WIRE_OP_THAW) == 0 && session) {
                        tpl_session_thaw(msg);
                } else if (strcmp(op, WIRE_OP_SNAPSHOT) == 0 && session) {
                        /* The fork made every page copy-on-write again.
                         * The pages a run writes are copied now, while the
                         * host is busy with the last result, at a quarter
                         * of a fault's cost each, rather than one fault at
                         * a time in the next cell; not after the base
                         * became a fork, whose pages stay shared until a
                         * side writes. */
                        bool base = json_is_true(json_object_get(msg, WIRE_KEY_BASE));
                        bool gave = tpl_session_gave_base();
                        after_snapshot(tpl, chan, tpl_session_snapshot(tpl, chan, base), !gave);
                } else if (strcmp(op, WIRE_OP_RESTORE) == 0 && session) {
                        tpl_session_restore(tpl, chan, msg);
                } else if (strcmp(op, WIRE_OP_DROP) == 0 && session) {
                        tpl_session_drop(tpl, msg);
                } else if (strcmp(op, WIRE_OP_FORK) == 0 && session) {
                        if (tpl_session_fork(tpl, chan, msg))
                                after_snapshot(tpl, chan, SNAPSHOT_FORKED, false);
                } else if (strcmp(op, WIRE_OP_LEAVE) == 0 && session) {
                        tpl_session_leave(tpl, chan, msg);
                }
        }
}

/* The probe's run itself: the "run" frame of code written on one end of a
 * socket pair and read from the other, as from the host, and the "end"
 * frame written back. */
static void probe_frames(const int sv[2], const char *code)
{
        json_t *msg = json_pack("{s:s, s:s}", WIRE_KEY_OP, WIRE_OP_RUN, WIRE_KEY_CODE, code);
        int r = msg ? channel_send(sv[0], msg) : -ENOMEM;
        json_decref(msg);
        msg = NULL;
        frame_reader fr;
        channel_reader_init(&fr, CHANNEL_MAX_FRAME);
        if (r >= 0 && channel_reader_feed(&fr, sv[1], &msg) == 1) {
                json_t *jc = json_object_get(msg, WIRE_KEY_CODE);
                const char *status = WIRE_STATUS_ERROR;
                int exit_code =
                    guest_run(json_string_value(jc), json_string_length(jc), false, &status);
                (void)channel_send_end(sv[1], status, exit_code, 0, end_run_alone());
        }
        json_decref(msg);
        channel_reader_free(&fr);
}

/* Goes through a whole single run once, as a copy's agent's run does, with
 * the output going to /dev/null: reading the "run" frame from a channel,
 * running code, ending the run's processes and writing the "end" frame.
 * The template's probe does, so that the pages it learns (tpl_prefault.c)
 * are those of a run's whole path. */
static void probe_run(const char *code)
{
        _cleanup_close_ int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
        _cleanup_close_ int saved_out = fcntl(1, F_DUPFD_CLOEXEC, 3);
        _cleanup_close_ int saved_err = fcntl(2, F_DUPFD_CLOEXEC, 3);
        _cleanup_close_pair_ int sv[2] = {-1, -1};
        if (null >= 0 && saved_out >= 0 && saved_err >= 0 && dup2(null, 1) >= 0 &&
            dup2(null, 2) >= 0 && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0)
                probe_frames(sv, code);
        /* Before the cleanups close the saved fds. */
        if (saved_out >= 0)
                dup2(saved_out, 1);
        if (saved_err >= 0)
                dup2(saved_err, 2);
}

void tpl_preloads_pass(void)
{
        /* print(1), then the common paths of preloaded numpy and pandas, if
         * any (runtime._prewarm): the probe learns the pages they write and
         * read, which a copy then populates while it is prepared, not in
         * the agent's run. */
        probe_run("print(1)\nimport sys\nsys.modules['_airlock_runtime']._prewarm()\n");
}

void tpl_plain_pass(void)
{
        probe_run("print(1)\n");
}
