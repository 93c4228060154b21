/* One run of code in one copy of the template: the code is delivered, the
 * guest's requests on its channel are served (tools, HTTP through the
 * gateway), its stdout and stderr are read, the deadline, the caller's
 * cancel fd and watch are watched, and how the copy ended becomes the
 * result, with the files of /output.
 *
 * The run is a small state machine: a phase (enum run_phase) says what is
 * polled and what moves the run on, and one struct holds the run's state.
 * A single run ends when the copy's PID namespace is gone (or when its
 * guest says it is the last thing left); a session's cell ends at the
 * guest's "end" frame, and the copy must survive it.
 *
 * Nothing the guest sends is trusted: frames are capped and parsed with
 * jansson, /output is read through the fd the copy handed over (never a
 * path), and the run's status comes from how the copy ended, not from what
 * it claimed, except where the copy is known to outlive the claim.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config/config.h"
#include "config/limits.h"
#include "core/channel.h"
#include "core/util.h"
#include "fsx/fsx.h"
#include "host/gateway.h"
#include "host/tools.h"
#include "jsonrpc.h"
#include "sandbox/cgroup.h"
#include "sandbox/sandbox.h"
#include "sandbox/run_trace.h"

#define REQUEST_SPIN_NS 30000    /* 30 us */
#define SERVE_SLICE_NS  10000000 /* 10 ms */
/* Output is read once the run ends or after PIPES_QUIET_NS: each read while
 * the copy runs would wake this thread, which on the copy's CPU preempts it
 * twice (the copy is woken on the waker's CPU). The pipes hold 64 KiB
 * meanwhile; a guest that writes more waits for the first read. */
#define PIPES_QUIET_NS 2000000 /* 2 ms */
/* Once a copy has exited, every process of its run is gone, and its pipes
 * reach end of file as soon as what they hold is read. Data that keeps
 * coming after that is no run's output: it is read for at most this long. */
#define DRAIN_AFTER_EXIT_NS 250000000 /* 250 ms */
/* The most a "stdin" request reads from the caller's stdin_fd at once. */
#define STDIN_CHUNK 65536
/* Without a cgroup, the copy's private memory is sampled this often. */
#define USAGE_SAMPLE_NS 20000000 /* 20 ms */

/* Where a run is. The code is delivered, then runs (quiet at first); from
 * there a run ends in one of four ways:
 *   - the copy exits: DRAINING, then DONE;
 *   - the host kills it (deadline, cancel, a protocol error): STOPPING until
 *     it has exited, then DRAINING, then DONE;
 *   - a single run's guest says "end" and that nothing else of the run is
 *     left: ENDING until the pipes are at their end, then DONE (the copy is
 *     killed and reaped after the capture, off the run's path);
 *   - a cell's guest says "end", or the session's interpreter dies: DONE.
 */
typedef enum run_phase {
        /* The code is being sent to the copy. */
        RUN_DELIVERING,
        /* The code runs and its output pipes are left alone for
         * PIPES_QUIET_NS; otherwise as RUN_RUNNING. */
        RUN_QUIET,
        /* The code runs: the channel is served, the pipes read, and the
         * deadline, the cancel fd, the copy's exit (and a cell's
         * interpreter) watched. */
        RUN_RUNNING,
        /* As RUN_RUNNING, and done once both pipes are at end of file. */
        RUN_ENDING,
        /* The host has killed the copy (run.stop says why): its exit is
         * awaited, its pipes still read. Nothing else is served. */
        RUN_STOPPING,
        /* The copy has exited: its pipes are read to their end, for at most
         * DRAIN_AFTER_EXIT_NS. */
        RUN_DRAINING,
        RUN_DONE,
} run_phase;

/* Why the host killed the copy. The first reason is the run's status. */
typedef enum run_stop {
        STOP_NONE,
        STOP_TIMEOUT,  /* the deadline passed */
        STOP_CANCEL,   /* the caller's cancel fd became readable */
        STOP_PROTOCOL, /* the guest wrote something that is not a valid request */
} run_stop;

typedef struct run_pipe {
        int fd;
        bool open; /* not yet at end of file */
        bool truncated;
        dynbuf buf;
        /* The caller's live output hook (airlock_run_options.on_output),
         * or NULL, and the stream it is told (1 stdout, 2 stderr): from
         * the run's own options, which every layer above hands down. */
        airlock_output_fn live;
        void *live_arg;
        int stream;
} run_pipe;

typedef struct run_state {
        run_phase phase;
        run_stop stop;
        airlock_sandbox *sb;
        const airlock_limits *lim;
        copy *c;
        /* The caller's options (checked by al_run_options_in), or NULL. */
        const airlock_run_options *opts;
        /* The watch of the public call this run serves (made by its
         * outermost layer, which may have fired it already), or NULL. */
        al_watch *watch;
        /* A cell's: the session's current interpreter, -1 for a single run. */
        int active_pidfd;
        int cancel_fd;
        uint64_t t0, deadline;
        uint64_t quiet_until; /* RUN_QUIET ends */
        uint64_t drain_until; /* RUN_DRAINING ends */
        uint64_t oom_before;  /* the copy's cgroup's OOM kills before this run */
        run_pipe out, err;
        frame_reader fr;
        channel_spin spin; /* how serve_channel waits for the next request */
        bool chan_open;
        bool exited;      /* the copy's pidfd said it exited */
        bool active_dead; /* a cell's interpreter is gone */
        struct {
                bool seen;
                bool alone; /* nothing else of a single run is left */
                int signal; /* the signal that ended a single run's pid 1, or 0 */
                int exit_code;
                char status[16];
        } end; /* the guest's "end" frame: how it says the code ended */
        /* The usage record under way (airlock_usage): the lists, capped,
         * and the baselines that the end is measured against. */
        struct {
                airlock_tool_record *tools;
                size_t n_tools, tools_omitted;
                airlock_http_record *http;
                size_t n_http, http_omitted;
                uint64_t cpu_before_us; /* UINT64_MAX: unknown */
                uint64_t cpu_after_us;  /* without a cgroup: read before the reap */
                bool cpu_cgroup;
                bool cpu_fine;     /* without a cgroup: schedstat was read */
                uint64_t uss_peak; /* sampled; UINT64_MAX: never sampled */
                uint64_t next_sample;
        } use;
        /* Calls of upstream MCP tools in this run, for their per-run caps
         * (mcp/mcp_hub.c); .tool is allocated at the first call. Its
         * .budget is the run's host budget, which the frames' parses
         * are charged against too (frame_admit). */
        mcp_run_counts mcp;
        /* The bytes of the caller's stdin_fd the code has read (serve_stdin). */
        uint64_t stdin_read;
        /* A request frame refused unparsed (frame_admit): the answer the
         * guest gets instead. */
        struct {
                const char *kind;
                char message[400];
        } refused;
} run_state;

/* ---- the usage record --------------------------------------------------- */

/* Milliseconds since t0, rounded to microseconds: the clock's figure past
 * that is noise, and a rounded value prints short in JSON (with
 * AL_JSON_REALS: 17.296, not 17.295583000000001). */
static double ms_since(uint64_t t0)
{
        return (double)((al_now_ns() - t0 + 500) / 1000) / 1e3;
}

/* Reads the file at path (relative to dirfd) into buf as text, at most
 * size - 1 bytes in one read, NUL-terminated: a /proc file of the copy.
 * The bytes read, or <= 0 when it cannot be read or is empty. */
static ssize_t read_text_at(int dirfd, const char *path, char *buf, size_t size)
{
        _cleanup_close_ int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC);
        ssize_t n = fd >= 0 ? read(fd, buf, size - 1) : -1;
        if (n > 0)
                buf[n] = '\0';
        return n;
}

/* The run time of the threads of process pid now, in nanoseconds: the sum
 * of the first field of /proc/PID/task/TID/schedstat (the scheduler's own
 * account, in ns), or UINT64_MAX where it cannot be read (a kernel without
 * schedstats). Threads that ended are not in it. */
static uint64_t proc_threads_ns(pid_t pid)
{
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
        int dfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0)
                return UINT64_MAX;
        DIR *d = fdopendir(dfd);
        if (!d) {
                close(dfd);
                return UINT64_MAX;
        }
        uint64_t sum = 0;
        bool any = false;
        struct dirent *de;
        while ((de = readdir(d))) {
                if (de->d_name[0] < '0' || de->d_name[0] > '9')
                        continue;
                char file[64], buf[128];
                snprintf(file, sizeof(file), "%.20s/schedstat", de->d_name);
                if (read_text_at(dirfd(d), file, buf, sizeof(buf)) <= 0)
                        continue;
                unsigned long long v;
                if (sscanf(buf, "%llu", &v) == 1) {
                        sum += v;
                        any = true;
                }
        }
        closedir(d);
        return any ? sum : UINT64_MAX;
}

/* The CPU time of the copy's pid and its reaped children, in microseconds,
 * or UINT64_MAX; *fine tells whether the copy's own part came from
 * schedstat (ns) rather than clock ticks alone. /proc/PID/stat has the
 * process's time (utime + stime, every thread's, those that ended too) and
 * its reaped children's (cutime + cstime) only in clock ticks (10 ms): a
 * short run would read 0. schedstat has the live threads' time in ns: the
 * copy's own part is the larger of the two (ticks truncate; schedstat
 * misses threads that ended), the children's stays in ticks. */
static uint64_t proc_cpu_us(pid_t pid, bool *fine)
{
        char path[64], buf[1024];
        *fine = false;
        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
        if (read_text_at(AT_FDCWD, path, buf, sizeof(buf)) <= 0)
                return UINT64_MAX;
        /* The name may hold anything, ')' too: the fields follow the last ')'. */
        const char *p = strrchr(buf, ')');
        unsigned long long t[4];
        if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %llu %llu",
                         &t[0], &t[1], &t[2], &t[3]) != 4)
                return UINT64_MAX;
        long hz = sysconf(_SC_CLK_TCK);
        uint64_t tick_us = 1000000ull / (uint64_t)(hz > 0 ? hz : 100);
        uint64_t own = (t[0] + t[1]) * tick_us, children = (t[2] + t[3]) * tick_us;
        uint64_t threads = proc_threads_ns(pid);
        if (threads != UINT64_MAX) {
                *fine = true;
                if (threads / 1000 > own)
                        own = threads / 1000;
        }
        return own + children;
}

/* The copy's private memory now (smaps_rollup's Private_Clean,
 * Private_Dirty and Private_Hugetlb: USS, not RSS, since the pages it
 * shares with the template are the template's), or UINT64_MAX. */
static uint64_t proc_uss(pid_t pid)
{
        char path[64], buf[4096];
        snprintf(path, sizeof(path), "/proc/%d/smaps_rollup", (int)pid);
        if (read_text_at(AT_FDCWD, path, buf, sizeof(buf)) <= 0)
                return UINT64_MAX;
        uint64_t kib = 0;
        bool any = false;
        for (const char *p = buf; p && *p;) {
                unsigned long long v;
                const char *colon = strchr(p, ':');
                if (strncmp(p, "Private_", 8) == 0 && colon && sscanf(colon + 1, "%llu", &v) == 1) {
                        kib += v;
                        any = true;
                }
                p = strchr(p, '\n');
                p = p ? p + 1 : NULL;
        }
        return any ? kib * 1024 : UINT64_MAX;
}

static void usage_begin(run_state *run)
{
        uint64_t cpu;
        cg_copy_usage(sbx_cgroup(run->sb), run->c->cpufd, -1, &cpu, NULL);
        run->use.cpu_cgroup = cpu != UINT64_MAX;
        run->use.cpu_before_us =
            run->use.cpu_cgroup ? cpu : proc_cpu_us(run->c->pid, &run->use.cpu_fine);
        run->use.cpu_after_us = UINT64_MAX;
        run->use.uss_peak = UINT64_MAX;
        run->use.next_sample = 0;
}

/* Samples the copy's private memory where no cgroup keeps its peak, at
 * most every USAGE_SAMPLE_NS (reading smaps_rollup costs tens of us). */
static void usage_sample(run_state *run, uint64_t now)
{
        if (run->c->cg || now < run->use.next_sample || run->exited)
                return;
        run->use.next_sample = now + USAGE_SAMPLE_NS;
        uint64_t u = proc_uss(run->c->pid);
        if (u != UINT64_MAX && (run->use.uss_peak == UINT64_MAX || u > run->use.uss_peak))
                run->use.uss_peak = u;
}

static void usage_add_tool(run_state *run, const char *name, uint64_t t0, bool ok)
{
        if (run->use.n_tools >= AIRLOCK_USAGE_MAX_TOOL_CALLS) {
                run->use.tools_omitted++;
                return;
        }
        airlock_tool_record *v =
            realloc(run->use.tools, (run->use.n_tools + 1) * sizeof(*run->use.tools));
        if (v)
                run->use.tools = v;
        char *n = v ? al_utf8_sanitize(name ? name : "", name ? strnlen(name, 64) : 0) : NULL;
        if (!n) {
                run->use.tools_omitted++;
                return;
        }
        v[run->use.n_tools++] =
            (airlock_tool_record){.name = n, .duration_ms = ms_since(t0), .ok = ok};
}

static void usage_add_http(run_state *run, const gateway_record *g, uint64_t t0)
{
        if (run->use.n_http >= AIRLOCK_USAGE_MAX_HTTP) {
                run->use.http_omitted++;
                return;
        }
        airlock_http_record *v =
            realloc(run->use.http, (run->use.n_http + 1) * sizeof(*run->use.http));
        if (v)
                run->use.http = v;
        char *m = v ? al_utf8_sanitize(g->method, strlen(g->method)) : NULL;
        char *u = v ? al_utf8_sanitize(g->url, strlen(g->url)) : NULL;
        if (!m || !u) {
                free(m);
                free(u);
                run->use.http_omitted++;
                return;
        }
        v[run->use.n_http++] = (airlock_http_record){
            .method = m,
            .url = u,
            .status = g->status,
            .bytes_sent = g->bytes_sent,
            .bytes_received = g->bytes_received,
            .allowed = g->allowed,
            .duration_ms = ms_since(t0),
        };
}

/* Fills res->usage from what the run collected; the lists move into it. */
static void usage_end(run_state *run, airlock_result *res)
{
        airlock_usage *u = &res->usage;
        u->cpu_ms = -1;
        u->peak_private_bytes = UINT64_MAX;
        uint64_t cpu = UINT64_MAX, peak = UINT64_MAX;
        cg_copy_usage(sbx_cgroup(run->sb), run->c->cpufd, run->c->peakfd, &cpu, &peak);
        if (!run->use.cpu_cgroup)
                cpu = run->use.cpu_after_us;
        if (cpu != UINT64_MAX && run->use.cpu_before_us != UINT64_MAX &&
            cpu >= run->use.cpu_before_us) {
                u->cpu_ms = (double)(cpu - run->use.cpu_before_us) / 1e3;
                u->cpu_source = run->use.cpu_cgroup ? "cgroup"
                                : run->use.cpu_fine ? "schedstat"
                                                    : "proc";
        }
        if (peak != UINT64_MAX) {
                u->peak_private_bytes = peak;
                u->memory_source = "cgroup";
        } else if (run->use.uss_peak != UINT64_MAX) {
                u->peak_private_bytes = run->use.uss_peak;
                u->memory_source = "smaps_rollup";
        }
        for (size_t i = 0; i < res->n_files; i++)
                u->output_bytes += res->files[i].size;
        u->tool_calls = TAKE_PTR(run->use.tools);
        u->n_tool_calls = run->use.n_tools;
        u->tool_calls_omitted = run->use.tools_omitted;
        u->http = TAKE_PTR(run->use.http);
        u->n_http = run->use.n_http;
        u->http_omitted = run->use.http_omitted;
        run->use.n_tools = run->use.n_http = 0;
}

static bool run_is_cell(const run_state *run)
{
        return run->active_pidfd >= 0;
}

/* The phases in which the code may still be running on its own: the
 * channel is served and the deadline and the cancel fd are watched. */
static bool run_is_live(const run_state *run)
{
        return run->phase == RUN_QUIET || run->phase == RUN_RUNNING || run->phase == RUN_ENDING;
}

/* Contract: the admission of a request frame of the guest, before it is
 * parsed. Parsed, a frame costs the host JSONRPC_VALUE_COST a JSON value
 * beside its text (a 24 MiB frame of "[0,0,...", 12 million values, would
 * be a gigabyte), so the frame is measured first, without building
 * anything, as serve measures HTTP bodies (charge_parse), and parsed only
 * when that cost, with the results the hub holds for the run, fits the
 * run's host budget (mcp_run_budget: half of --memory, at least 32 MiB).
 * The cost lasts while the request is served, one at a time, so it is not
 * kept. A refused frame gets an answer naming the cap: ValueError when
 * the frame alone is over it, RuntimeError when the run's uncollected
 * results make the difference. */
static int frame_admit(void *arg, const char *body, size_t len)
{
        run_state *run = arg;
        uint64_t values = 0;
        unsigned depth = 0;
        jsonrpc_measure(body, len, &values, &depth);
        uint64_t cost = values * JSONRPC_VALUE_COST + len;
        uint64_t budget = run->mcp.budget;
        mcp_hub *hub = sbx_mcp(run->sb);
        uint64_t held = hub ? mcp_hub_run_held(hub, &run->mcp) : 0;
        if (cost + held <= budget)
                return 0;
        run->refused.kind = cost > budget ? WIRE_KIND_VALUE : WIRE_KIND_RUNTIME;
        char beside[96] = "";
        if (held)
                snprintf(beside, sizeof(beside),
                         ", beside the %" PRIu64 " bytes of this run's uncollected results", held);
        snprintf(run->refused.message, sizeof(run->refused.message),
                 "the request is too large once parsed: %zu bytes with %" PRIu64
                 " JSON values would hold about %" PRIu64
                 " bytes on the host%s, more than the run's host budget of %" PRIu64 " bytes (%s)",
                 len, values, cost, beside, budget, MCP_RUN_BUDGET_TEXT);
        return -ENOBUFS;
}

static void run_init(run_state *run, airlock_sandbox *sb, copy *c, int active_pidfd,
                     const airlock_run_options *opts, al_watch *w)
{
        const airlock_limits *l = sbx_limits(sb);
        *run = (run_state){
            .phase = RUN_DELIVERING,
            .sb = sb,
            .lim = l,
            .c = c,
            .active_pidfd = active_pidfd,
            .opts = opts,
            .watch = w,
            .cancel_fd = opts ? opts->cancel_fd : -1,
            .out = {.fd = c->out_r, .open = true, .stream = 1},
            .err = {.fd = c->err_r, .open = true, .stream = 2},
            .chan_open = true,
        };
        run->t0 = al_now_ns();
        run->oom_before = cg_oom_kills(c->oomfd);
        run->deadline = run->t0 + (uint64_t)(l->timeout_s * 1e9);
        dynbuf_init(&run->out.buf, l->max_stdout);
        dynbuf_init(&run->err.buf, l->max_stdout);
        channel_reader_init(&run->fr, CHANNEL_MAX_FRAME);
        run->fr.nonblock = true; /* the loop polls */
        run->mcp.budget = mcp_run_budget(l->memory_bytes);
        run->fr.admit = frame_admit;
        run->fr.admit_arg = run;
        if (opts && opts->on_output) {
                run->out.live = run->err.live = opts->on_output;
                run->out.live_arg = run->err.live_arg = opts->output_arg;
        }
        usage_begin(run);
}

static void run_free(run_state *run)
{
        for (size_t i = 0; i < run->use.n_tools; i++)
                free(run->use.tools[i].name);
        free(run->use.tools);
        for (size_t i = 0; i < run->use.n_http; i++) {
                free(run->use.http[i].method);
                free(run->use.http[i].url);
        }
        free(run->use.http);
        /* The run's calls started and not collected end with it: running
         * ones are cancelled upstream, done ones dropped. */
        mcp_hub_run_end(sbx_mcp(run->sb), &run->mcp);
        free(run->mcp.tool);
        dynbuf_free(&run->out.buf);
        dynbuf_free(&run->err.buf);
        channel_reader_free(&run->fr);
}

static void kill_copy(run_state *run)
{
        syscall(SYS_pidfd_send_signal, run->c->pidfd, SIGKILL, NULL, 0);
}

/* Kills the copy for reason why, once: a run the host has stopped only
 * waits for the copy's exit. A cell's stop kills only the session's
 * interpreter, so that the session can roll back to the state before the
 * cell (session.c). */
static void run_stop_copy(run_state *run, run_stop why)
{
        if (!run_is_live(run))
                return;
        run->stop = why;
        run->phase = RUN_STOPPING;
        if (run_is_cell(run))
                syscall(SYS_pidfd_send_signal, run->active_pidfd, SIGKILL, NULL, 0);
        else
                kill_copy(run);
}

/* Sends a reply frame. A guest that stops reading its replies cannot hold
 * the host: the wait for room also watches the run's deadline (-ETIMEDOUT,
 * the run timed out), its cancellation (-ECANCELED, the run was cancelled)
 * and the caller's watch. */
static int send_reply(run_state *run, json_t *msg)
{
        _cleanup_free_ char *s = json_dumps(msg, JSON_COMPACT | JSON_ENCODE_ANY);
        if (!s)
                return -ENOMEM;
        size_t len = strlen(s);
        if (len > CHANNEL_MAX_FRAME)
                return -EMSGSIZE;
        unsigned char hdr[4];
        channel_frame_header(hdr, len);
        size_t total = 4 + len, done = 0;
        while (done < total) {
                /* The header and the body in one call: sent apart, the
                 * header alone wakes the guest, which then sleeps again
                 * until the body comes (two wake-ups a reply, not one). */
                struct iovec v[2];
                int nv = 0;
                if (done < 4)
                        v[nv++] = (struct iovec){hdr + done, 4 - done};
                v[nv++] =
                    (struct iovec){s + (done < 4 ? 0 : done - 4), len - (done < 4 ? 0 : done - 4)};
                struct msghdr mh = {.msg_iov = v, .msg_iovlen = (size_t)nv};
                ssize_t w = sendmsg(run->c->chan, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (w >= 0) {
                        done += (size_t)w;
                        continue;
                }
                if (errno == EINTR)
                        continue;
                if (errno != EAGAIN)
                        return -errno;
                struct pollfd pf[3] = {{run->c->chan, POLLOUT, 0},
                                       {run->cancel_fd, POLLIN, 0},
                                       {al_watch_fd(run->watch), POLLIN, 0}};
                uint64_t now = al_now_ns();
                if (now >= run->deadline) {
                        run_stop_copy(run, STOP_TIMEOUT);
                        return -ETIMEDOUT;
                }
                /* A negative fd is not polled. */
                int k = poll(pf, 3, (int)MIN((run->deadline - now) / 1000000 + 1, 1000000u));
                if (k > 0 && pf[2].revents)
                        al_watch_fire(run->watch);
                if (k > 0 && pf[1].revents) {
                        run_stop_copy(run, STOP_CANCEL);
                        return -ECANCELED;
                }
        }
        return 0;
}

/* A refusal for the guest: kind is the name of the built-in exception it
 * raises (gateway_guest_exception() for HTTP errors). */
static json_t *error_reply(const char *kind, const char *message)
{
        return json_pack("{s:b, s:s, s:s}", WIRE_KEY_OK, 0, WIRE_KEY_KIND, kind, WIRE_KEY_ERROR,
                         message);
}

/* Records the guest's "end" frame: how it says the code ended. */
static void guest_ended(run_state *run, const json_t *msg)
{
        const char *s = json_string_value(json_object_get(msg, WIRE_KEY_STATUS));
        snprintf(run->end.status, sizeof(run->end.status), "%s", s ? s : "");
        run->end.exit_code = (int)json_integer_value(json_object_get(msg, WIRE_KEY_EXIT_CODE));
        run->end.alone = json_is_true(json_object_get(msg, WIRE_KEY_ALONE));
        json_int_t sig = json_integer_value(json_object_get(msg, WIRE_KEY_SIGNAL));
        run->end.signal = sig > 0 && sig < 65 ? (int)sig : 0;
        run->end.seen = true;
}

/* The reply to airlock.secret(name): the placeholder of a declared secret,
 * never its value; an unknown name is a ValueError naming the secrets there
 * are (names are not secret; the tool description may list them too). */
static json_t *secret_reply(const airlock_config *cfg, const char *name)
{
        char ph[SECRET_PLACEHOLDER_SIZE];
        if (name && secrets_lookup(cfg->secrets, name, ph) == 0)
                return json_pack("{s:b, s:s}", WIRE_KEY_OK, 1, WIRE_KEY_RESULT, ph);
        char names[512] = "";
        size_t n = secrets_count(cfg->secrets), at = 0;
        for (size_t i = 0; i < n && at < sizeof(names) - 1; i++) {
                if (secrets_is_peer(cfg->secrets, i))
                        continue; /* the cluster secret is not the guest's to ask for */
                int w = snprintf(names + at, sizeof(names) - at, "%s%s", at ? ", " : "",
                                 secrets_name(cfg->secrets, i));
                at += w > 0 ? (size_t)w : 0;
        }
        char msg[700];
        snprintf(msg, sizeof(msg), "airlock.secret: no secret named '%.64s' (%s%s)",
                 name ? name : "", at ? "the secrets are: " : "no secret is declared",
                 at ? names : "");
        return error_reply(WIRE_KIND_VALUE, msg);
}

/* A request's handler (a row of WIRE_REQUESTS): the reply frame to send,
 * NULL when out of memory. */
typedef json_t *request_fn(run_state *run, const airlock_config *cfg, json_t *msg);
#define REQUEST_DECLARE(id, handler, slow) static request_fn serve_##handler;
WIRE_REQUESTS(REQUEST_DECLARE)

/* call_tool(name, **args): a host tool, or a tool of an upstream MCP server
 * of code mode (mcp_hub), bounded by the run. */
static json_t *serve_tool(run_state *run, const airlock_config *cfg, json_t *msg)
{
        const char *name = json_string_value(json_object_get(msg, WIRE_KEY_NAME));
        json_t *args = json_object_get(msg, WIRE_KEY_ARGS);
        if (!name) {
                usage_add_tool(run, "", al_now_ns(), false);
                return error_reply(WIRE_KIND_VALUE, "call_tool: the tool name must be a string");
        }
        json_t *result = NULL;
        _cleanup_free_ char *message = NULL, *type = NULL;
        /* Bounded by the run: a slow tool cannot hold the run past
         * its limit, and a cancel stops it. */
        tool_call_bounds b = {run->deadline, run->cancel_fd, cfg->secrets};
        uint64_t t0 = al_now_ns();
        mcp_hub *hub = sbx_mcp(run->sb);
        tool_fail f;
        al_span *outer, *span = sbx_trace_tool_begin(name, hub && mcp_hub_owns(hub, name), args,
                                                     cfg->secrets, &outer);
        if (hub && mcp_hub_owns(hub, name)) {
                if (!run->mcp.tool)
                        run->mcp.tool = calloc(MCP_MAX_TOOLS, sizeof(uint32_t));
                f = run->mcp.tool ? mcp_hub_call(hub, name, args, &b, &run->mcp, cfg->approver,
                                                 cfg->approver_data, &result, &message, &type)
                                  : tools_fail(TOOL_FAIL_RUNTIME, &message, "out of memory");
        } else {
                f = tools_call_typed(cfg->tools, name, args, &b, &result, &message, &type);
        }
        sbx_trace_tool_end(span, outer, f == TOOL_OK, type);
        usage_add_tool(run, name, t0, f == TOOL_OK);
        /* A tool runs with the host's environment, where a
         * secret may sit, and may come by a value otherwise:
         * what it returns is scrubbed like a response, and
         * withheld when that cannot be done. */
        if ((f == TOOL_OK && secrets_scrub_json(cfg->secrets, &result) < 0) ||
            (f != TOOL_OK && secrets_scrub_string(cfg->secrets, &message) < 0)) {
                json_decref(result);
                result = NULL;
                free(message);
                message = strdup("the tool's result was withheld: it could not "
                                 "be checked for the secrets' values");
                f = TOOL_FAIL_RUNTIME;
        }
        json_t *reply;
        if (f == TOOL_OK)
                reply = json_pack("{s:b, s:o}", WIRE_KEY_OK, 1, WIRE_KEY_RESULT,
                                  result ? result : json_null());
        else
                reply = error_reply(f == TOOL_FAIL_INVALID ? WIRE_KIND_VALUE : WIRE_KIND_RUNTIME,
                                    message ? message : "the tool failed");
        /* A typed tool's failure names its type (additive: the
         * key is there only then). */
        if (reply && type)
                json_object_set_new(reply, WIRE_KEY_ERROR_TYPE, json_string(type));
        return reply;
}

/* http_request(...): through the gateway, under the allow-list and the
 * run's limits. */
static json_t *serve_http(run_state *run, const airlock_config *cfg, json_t *msg)
{
        json_t *resp = NULL;
        airlock_error e;
        airlock_error_clear(&e);
        gateway_record rec;
        uint64_t t0 = al_now_ns();
        al_span *span = sbx_trace_http_begin();
        int r = gateway_request_full(cfg->allow, cfg->secrets, run->lim, msg, run->deadline,
                                     run->cancel_fd, &rec, &resp, &e);
        sbx_trace_http_end(span, &rec, r);
        usage_add_http(run, &rec, t0);
        if (r >= 0)
                return json_pack("{s:b, s:o}", WIRE_KEY_OK, 1, WIRE_KEY_RESULT, resp);
        return error_reply(gateway_guest_exception(r), e.message[0] ? e.message : strerror(-r));
}

/* airlock.secret(name): its placeholder (secret_reply). */
static json_t *serve_secret(run_state *run, const airlock_config *cfg, json_t *msg)
{
        return secret_reply(cfg, json_string_value(json_object_get(msg, WIRE_KEY_NAME)));
}

static bool drain_pipe(run_pipe *p);

/* Waits until the caller's stdin_fd has something to read (or its end),
 * watching what every wait of a run watches: the deadline (-ETIMEDOUT, the
 * run is stopped), the cancel fd (-ECANCELED, stopped too), the caller's
 * watch, and the copy's or the cell interpreter's end (-EPIPE, left to the
 * loop to see). The code's stdout and stderr are read meanwhile, so that
 * what it wrote before it asked (a prompt) is shown while it waits. */
static int stdin_wait(run_state *run, int fd)
{
        for (;;) {
                struct pollfd p[7] = {
                    {fd, POLLIN, 0},
                    {run->out.open ? run->out.fd : -1, POLLIN, 0},
                    {run->err.open ? run->err.fd : -1, POLLIN, 0},
                    {run->cancel_fd, POLLIN, 0},
                    {al_watch_fd(run->watch), POLLIN, 0},
                    {run->c->pidfd, POLLIN, 0},
                    {run->active_pidfd, POLLIN, 0},
                };
                uint64_t now = al_now_ns();
                if (now >= run->deadline) {
                        run_stop_copy(run, STOP_TIMEOUT);
                        return -ETIMEDOUT;
                }
                int k = poll(p, 7, (int)MIN((run->deadline - now) / 1000000 + 1, 1000000u));
                if (k <= 0)
                        continue;
                if (p[4].revents)
                        al_watch_fire(run->watch);
                if (p[3].revents) {
                        run_stop_copy(run, STOP_CANCEL);
                        return -ECANCELED;
                }
                if (p[1].revents)
                        drain_pipe(&run->out);
                if (p[2].revents)
                        drain_pipe(&run->err);
                if (p[5].revents || p[6].revents)
                        return -EPIPE;
                if (p[0].revents)
                        return 0;
        }
}

/* Contract: the answer to the code's read of its standard input (a "stdin"
 * request, airlock_run_options.stdin_mode): up to "size" bytes (at most
 * STDIN_CHUNK) of the caller's stdin_fd in base64, "" at its end. The fd
 * is read only here, when the code asks, one read(2) per request, so that
 * a run whose code never reads takes nothing from the caller and never
 * waits on it; the wait is stdin_wait's, bounded by the run. In prompt
 * mode a request with a "prompt" (a new line that input() or getpass
 * asks for) is announced to the caller's on_input first. A run reads at
 * most AIRLOCK_RUN_STDIN_STREAM_MAX bytes: past it, an OSError naming the
 * cap. A run without a stdin_mode reads end of file. */
static json_t *serve_stdin(run_state *run, const airlock_config *cfg, json_t *msg)
{
        (void)cfg;
        const airlock_run_options *o = run->opts;
        if (!o || o->stdin_mode == AIRLOCK_STDIN_NONE)
                return json_pack("{s:b, s:s}", WIRE_KEY_OK, 1, WIRE_KEY_RESULT, "");
        json_int_t want = json_integer_value(json_object_get(msg, WIRE_KEY_SIZE));
        want = want < 1 ? 1 : want > STDIN_CHUNK ? STDIN_CHUNK : want;
        uint64_t left =
            AIRLOCK_RUN_STDIN_STREAM_MAX - MIN(run->stdin_read, AIRLOCK_RUN_STDIN_STREAM_MAX);
        char buf[STDIN_CHUNK];
        if (left == 0) {
                /* The cap is reached: the end of the input is no error. */
                if (stdin_wait(run, o->stdin_fd) < 0 || read(o->stdin_fd, buf, 1) > 0) {
                        char m[200];
                        snprintf(m, sizeof(m),
                                 "standard input: the run read %u MiB, the cap of a run's "
                                 "standard input (AIRLOCK_RUN_STDIN_STREAM_MAX); pass larger "
                                 "data with --workspace or --mount",
                                 AIRLOCK_RUN_STDIN_STREAM_MAX >> 20);
                        return error_reply(WIRE_KIND_OS, m);
                }
                return json_pack("{s:b, s:s}", WIRE_KEY_OK, 1, WIRE_KEY_RESULT, "");
        }
        want = (json_int_t)MIN((uint64_t)want, left);
        const char *prompt = json_string_value(json_object_get(msg, WIRE_KEY_PROMPT));
        if (prompt && o->stdin_mode == AIRLOCK_STDIN_PROMPT && o->on_input) {
                /* What the code printed before it asked comes first. */
                drain_pipe(&run->out);
                drain_pipe(&run->err);
                o->on_input(o->input_arg, prompt,
                            json_is_true(json_object_get(msg, WIRE_KEY_PASSWORD)));
        }
        ssize_t n;
        do {
                int r = stdin_wait(run, o->stdin_fd);
                if (r < 0)
                        return error_reply(WIRE_KIND_INTERRUPTED,
                                           "standard input: the run ended while it waited");
                n = read(o->stdin_fd, buf, (size_t)want);
        } while (n < 0 && (errno == EINTR || errno == EAGAIN));
        if (n < 0) {
                char m[160];
                snprintf(m, sizeof(m), "standard input: cannot read it: %s", strerror(errno));
                return error_reply(WIRE_KIND_OS, m);
        }
        run->stdin_read += (uint64_t)n;
        _cleanup_free_ char *b64 = al_base64_encode((const unsigned char *)buf, (size_t)n, NULL);
        return b64 ? json_pack("{s:b, s:s}", WIRE_KEY_OK, 1, WIRE_KEY_RESULT, b64) : NULL;
}

/* The guest's requests, from the rows of WIRE_REQUESTS. */
static const struct request_row {
        const char *op;
        request_fn *serve;
        bool slow;
} requests[] = {
#define REQUEST_ROW(id, handler, slow) {WIRE_OP_##id, serve_##handler, slow},
    WIRE_REQUESTS(REQUEST_ROW)
#undef REQUEST_ROW
};

/* Serves one request of the guest by its row; an op outside the rows is a
 * ValueError in the guest. */
static void serve_request(run_state *run, json_t *msg)
{
        const char *op = json_string_value(json_object_get(msg, WIRE_KEY_OP));
        const struct request_row *row = NULL;
        for (size_t i = 0; op && !row && i < ARRAY_SIZE(requests); i++)
                if (strcmp(op, requests[i].op) == 0)
                        row = &requests[i];
        /* A tool call or an HTTP request may take long, and the loop does
         * not watch the caller's input meanwhile: the caller takes its
         * input to another thread first (airlock_run_options.on_watch), so
         * that a cancel it reads there still reaches this run. */
        if (row && row->slow)
                al_watch_fire(run->watch);
        _cleanup_json_ json_t *reply =
            row ? row->serve(run, sbx_config(run->sb), msg)
                : error_reply(WIRE_KIND_VALUE, "unknown request to the host");
        int sent = reply ? send_reply(run, reply) : -ENOMEM;
        if (sent < 0 && sent != -ETIMEDOUT && sent != -ECANCELED)
                run_stop_copy(run, STOP_PROTOCOL);
}

/* Serves the frames the channel has, until it has none for
 * REQUEST_SPIN_NS, the guest's "end", or SERVE_SLICE_NS: back to the poll
 * now and then, so that the deadline, a cancel and the output pipes are
 * seen while a guest calls tools in a tight loop. */
static void serve_channel(run_state *run)
{
        uint64_t spin_until = 0, served_since = al_now_ns();
        while (run_is_live(run)) {
                uint64_t t = al_now_ns();
                if (t >= run->deadline || t - served_since > SERVE_SLICE_NS)
                        return;
                _cleanup_json_ json_t *req = NULL;
                int fr = channel_reader_feed(&run->fr, run->c->chan, &req);
                if (fr == 1) {
                        const char *op = json_string_value(json_object_get(req, WIRE_KEY_OP));
                        if (op && strcmp(op, WIRE_OP_END) == 0) {
                                guest_ended(run, req);
                                if (run->active_pidfd < 0)
                                        sbx_run_ended(run->sb);
                                return;
                        }
                        serve_request(run, req);
                        /* Code that calls tools in a loop sends its next
                         * request within microseconds: look for it briefly
                         * before sleeping. */
                        spin_until =
                            channel_spin_wanted(&run->spin) ? al_now_ns() + REQUEST_SPIN_NS : 0;
                        /* Not spinning: the poll says when the next one
                         * comes, without a read that finds nothing first. */
                        if (!spin_until)
                                return;
                        continue;
                }
                if (fr == -ENOBUFS) {
                        /* A frame refused unparsed: its answer, and on. */
                        _cleanup_json_ json_t *reply =
                            error_reply(run->refused.kind, run->refused.message);
                        int sent = reply ? send_reply(run, reply) : -ENOMEM;
                        if (sent < 0 && sent != -ETIMEDOUT && sent != -ECANCELED)
                                run_stop_copy(run, STOP_PROTOCOL);
                        continue;
                }
                if (fr == 0 && spin_until) {
                        if (al_now_ns() < spin_until)
                                continue;
                        channel_spin_expired(&run->spin);
                }
                if (fr < 0) {
                        run->chan_open = false;
                        /* End of stream, a reset, or the end in the middle
                         * of a frame: the copy died (killed by a limit, say,
                         * while it wrote), which its exit status tells;
                         * anything else is the guest's doing. */
                        if (fr != -EPIPE && fr != -ECONNRESET && fr != -EPROTO)
                                run_stop_copy(run, STOP_PROTOCOL);
                }
                return;
        }
}

/* Reads what a pipe has; keeps up to the buffer's cap and discards the
 * rest, so a flood costs the host no memory. Returns false at end of file,
 * which it also records. */
static bool drain_pipe(run_pipe *p)
{
        char buf[65536];
        dynbuf *b = &p->buf;
        for (;;) {
                ssize_t n = read(p->fd, buf, sizeof(buf));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return p->open = errno == EAGAIN;
                if (n == 0)
                        return p->open = false;
                if (p->live)
                        p->live(p->live_arg, p->stream, buf, (size_t)n);
                size_t room = b->cap - b->len;
                if ((size_t)n > room) {
                        p->truncated = true;
                        if (room)
                                dynbuf_append(b, buf, room);
                } else {
                        dynbuf_append(b, buf, (size_t)n);
                }
                if ((size_t)n < sizeof(buf))
                        return true;
        }
}

static bool pipes_at_end(const run_state *run)
{
        return !run->out.open && !run->err.open;
}

/* Moves the run on after the events of one poll, from what they
 * recorded. */
static void run_settle(run_state *run)
{
        switch (run->phase) {
        case RUN_QUIET:
        case RUN_RUNNING:
                if (run_is_cell(run) && (run->end.seen || run->active_dead)) {
                        /* The guest flushed its output before "end": what
                         * the pipes hold now is all of this cell's. */
                        drain_pipe(&run->out);
                        drain_pipe(&run->err);
                        run->phase = RUN_DONE;
                } else if (!run_is_cell(run) && run->end.seen && run->end.alone) {
                        /* The copy closed its ends of the pipes before it
                         * said so: read to their end without a poll. A read
                         * that got data stops short of the end of file; the
                         * second read sees it. */
                        run->phase = RUN_ENDING;
                        for (int i = 0; i < 2; i++) {
                                run_pipe *p = i ? &run->err : &run->out;
                                if (p->open && drain_pipe(p))
                                        drain_pipe(p);
                        }
                        if (pipes_at_end(run))
                                run->phase = RUN_DONE;
                } else if (run->end.seen) {
                        /* The code ended; its output is read from now. */
                        run->phase = RUN_RUNNING;
                }
                break;
        case RUN_ENDING:
        case RUN_DRAINING:
                if (pipes_at_end(run))
                        run->phase = RUN_DONE;
                break;
        default:
                break;
        }
}

/* One round of the run: the poll set of its phase, one poll, the events. */
static void run_step(run_state *run)
{
        uint64_t now = al_now_ns();
        usage_sample(run, now);
        if (run->phase == RUN_QUIET && now >= run->quiet_until)
                run->phase = RUN_RUNNING;
        if (run_is_live(run) && now >= run->deadline) {
                run_stop_copy(run, STOP_TIMEOUT);
                return;
        }
        if (run->phase == RUN_DRAINING && now >= run->drain_until) {
                run->phase = RUN_DONE;
                return;
        }

        bool live = run_is_live(run);
        bool alive = live || run->phase == RUN_STOPPING; /* not yet seen to exit */
        bool reading = run->phase != RUN_QUIET;
        struct pollfd p[7];
        int np = 0, i_out = -1, i_err = -1, i_chan = -1, i_pid = -1, i_cancel = -1;
        int i_active = -1, i_watch = -1;
        if (reading && run->out.open)
                p[i_out = np++] = (struct pollfd){run->out.fd, POLLIN, 0};
        if (reading && run->err.open)
                p[i_err = np++] = (struct pollfd){run->err.fd, POLLIN, 0};
        if (live && run->chan_open)
                p[i_chan = np++] = (struct pollfd){run->c->chan, POLLIN, 0};
        if (alive)
                p[i_pid = np++] = (struct pollfd){run->c->pidfd, POLLIN, 0};
        if (live && run->cancel_fd >= 0)
                p[i_cancel = np++] = (struct pollfd){run->cancel_fd, POLLIN, 0};
        if (alive && run_is_cell(run))
                p[i_active = np++] = (struct pollfd){run->active_pidfd, POLLIN, 0};
        if (alive && al_watch_fd(run->watch) >= 0)
                p[i_watch = np++] = (struct pollfd){al_watch_fd(run->watch), POLLIN, 0};

        int timeout_ms = -1; /* RUN_STOPPING: until the copy exits */
        if (live) {
                uint64_t until =
                    run->phase == RUN_QUIET ? MIN(run->deadline, run->quiet_until) : run->deadline;
                timeout_ms = (int)MIN((until - now) / 1000000 + 1, 1000000u);
        } else if (run->phase == RUN_DRAINING) {
                timeout_ms = (int)((run->drain_until - now) / 1000000 + 1);
        }
        int k = poll(p, (nfds_t)np, timeout_ms);
        if (k < 0)
                return; /* EINTR: round again */
        if (i_watch >= 0 && p[i_watch].revents)
                al_watch_fire(run->watch);
        if (k == 0 && run->phase == RUN_DRAINING) {
                run->phase = RUN_DONE;
                return;
        }
        /* A cancel first: nothing more is served for a run the caller has
         * given up. */
        if (i_cancel >= 0 && p[i_cancel].revents)
                run_stop_copy(run, STOP_CANCEL);
        if (i_out >= 0 && p[i_out].revents)
                drain_pipe(&run->out);
        if (i_err >= 0 && p[i_err].revents)
                drain_pipe(&run->err);
        if (i_chan >= 0 && p[i_chan].revents)
                serve_channel(run);
        if (i_pid >= 0 && p[i_pid].revents) {
                run->exited = true;
                run->phase = RUN_DRAINING;
                run->drain_until = al_now_ns() + DRAIN_AFTER_EXIT_NS;
        }
        if (i_active >= 0 && p[i_active].revents)
                run->active_dead = true;
        if (run->phase == RUN_STOPPING && run->active_dead) {
                /* A stopped cell: its interpreter is gone, and what the
                 * pipes hold now is the last of its output. */
                drain_pipe(&run->out);
                drain_pipe(&run->err);
                run->phase = RUN_DONE;
        }
        run_settle(run);
}

/* How the copy ended, in the terms of a child's exit. */
static void run_reap(run_state *run, siginfo_t *si)
{
        copy *c = run->c;
        /* The copy's CPU time, while its zombie still has it. */
        if (!run->use.cpu_cgroup)
                run->use.cpu_after_us = proc_cpu_us(c->pid, &run->use.cpu_fine);
        if (run->exited) {
                int w;
                while ((w = waitid((idtype_t)3 /* P_PIDFD */, (id_t)c->pidfd, si,
                                   WEXITED | __WALL)) < 0 &&
                       errno == EINTR)
                        ;
                if (w < 0) {
                        /* Someone else reaped it (SIGCHLD ignored): trust the claim. */
                        si->si_code = CLD_EXITED;
                        si->si_status = strcmp(run->end.status, WIRE_STATUS_OK) == 0 ? 0 : 1;
                }
                /* A single run's pid 1 cannot be ended by a signal sent
                 * from inside its namespace: it names the signal that would
                 * have ended it and exits with 128 + N (guest.c,
                 * exit_by_signal), which reads as that signal's end. */
                if (run->end.signal && si->si_code == CLD_EXITED &&
                    si->si_status == 128 + run->end.signal) {
                        si->si_code = CLD_KILLED;
                        si->si_status = run->end.signal;
                }
                close(c->pidfd);
                c->pidfd = -1;
        } else if (run->end.seen) {
                /* A cell's copy lives on, and a single run's has nothing
                 * else of the run left and its output pipes closed (it is
                 * killed and reaped after the capture, as its exit adds
                 * nothing but waiting): the guest's word is how the code
                 * ended. */
                si->si_code = CLD_EXITED;
                si->si_status = run->end.exit_code & 0xff;
        } else {
                /* A cell whose interpreter died without an "end" (killed by
                 * the host or a limit): the session rolls back. */
                si->si_code = CLD_KILLED;
                si->si_status = SIGKILL;
        }
}

static const char *signal_text(int sig)
{
        const char *s = sigdescr_np(sig);
        return s ? s : "unknown signal";
}

/* Appends n refusals to the result's list (the /input ones after /output's);
 * on failure the refusals are freed. */
static int append_refused(airlock_result *res, airlock_refusal *more, size_t n)
{
        if (n == 0) {
                free(more);
                return 0;
        }
        airlock_refusal *all = realloc(res->refused, (res->n_refused + n) * sizeof(*all));
        if (!all) {
                fsx_refused_free(more, n);
                return -ENOMEM;
        }
        memcpy(all + res->n_refused, more, n * sizeof(*all));
        free(more);
        res->refused = all;
        res->n_refused += n;
        return 0;
}

/* A capture that failed fails a run that had succeeded, with the capture's
 * message in place of the run's. */
static void result_fail_capture(airlock_result *res, const char *message)
{
        if (res->success) {
                res->success = false;
                res->status = AIRLOCK_STATUS_ERROR;
        }
        free(res->error_message);
        res->error_message = strdup(message);
}

/* With a writable /input: lists what the run created, modified and deleted
 * there, from the upper dir of the copy's overlay, with /output's caps (a
 * cap of its own for each, not shared with /output's files). A failure
 * fails the run, as a failed capture of /output does. */
static void run_input_changes(run_state *run, airlock_result *res)
{
        const airlock_limits *l = run->lim;
        fsx_limits lim = {
            .max_bytes = l->max_output_total,
            .max_files = l->max_output_files,
            .max_depth = l->max_output_depth,
            .max_file = l->max_output_file,
        };
        airlock_error cerr;
        airlock_refusal *refused = NULL;
        size_t n_refused = 0;
        int r =
            fsx_capture_changes(run->c->input_upper, run->c->input_lower, &lim, &res->input_changes,
                                &res->n_input_changes, &refused, &n_refused, &cerr);
        if (r >= 0)
                r = append_refused(res, refused, n_refused);
        if (r >= 0)
                return;
        if (r == -ENOMEM)
                snprintf(cerr.message, sizeof(cerr.message), "out of memory listing /input");
        fsx_changes_free(res->input_changes, res->n_input_changes);
        res->input_changes = NULL;
        res->n_input_changes = 0;
        result_fail_capture(res, cerr.message);
}

/* Builds the result from how the copy ended and captures /output from
 * outdir (when >= 0). */
static int run_result(run_state *run, const siginfo_t *si, int outdir, airlock_result **ret,
                      airlock_error *err)
{
        const airlock_limits *l = run->lim;
        airlock_result *res = calloc(1, sizeof(*res));
        if (!res)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        res->stdout_data = dynbuf_take(&run->out.buf, &res->stdout_len);
        res->stderr_data = dynbuf_take(&run->err.buf, &res->stderr_len);
        res->stdout_truncated = run->out.truncated;
        res->stderr_truncated = run->err.truncated;

        char msg[512] = "";
        if (run->stop == STOP_TIMEOUT) {
                res->status = AIRLOCK_STATUS_TIMEOUT;
                res->exit_code = -1;
                snprintf(
                    msg, sizeof(msg),
                    "timeout: the run exceeded its time limit of %g s (raise it with --timeout)",
                    l->timeout_s);
        } else if (run->stop == STOP_CANCEL) {
                res->status = AIRLOCK_STATUS_KILLED;
                res->exit_code = -1;
                snprintf(msg, sizeof(msg), "killed: the run was cancelled");
        } else if (run->stop == STOP_PROTOCOL) {
                /* The host ended the run because the guest wrote something
                 * that is not a valid request on its channel. */
                res->status = AIRLOCK_STATUS_ERROR;
                res->exit_code = -1;
                snprintf(msg, sizeof(msg),
                         "error: the guest broke the host channel protocol (a malformed, "
                         "oversized or truncated request)");
        } else if (si->si_code == CLD_KILLED || si->si_code == CLD_DUMPED) {
                int sig = si->si_status;
                res->exit_code = 128 + sig;
                if (sig == SIGXCPU) {
                        res->status = AIRLOCK_STATUS_TIMEOUT;
                        snprintf(msg, sizeof(msg),
                                 "timeout: the run exceeded its CPU time limit of %g s%s",
                                 l->cpu_s > 0 ? l->cpu_s : l->timeout_s,
                                 l->cpu_s > 0 ? "" : " (raise it with --timeout)");
                } else if (sig == SIGXFSZ) {
                        airlock_limits sizes = *l;
                        limits_resolve_sizes(&sizes);
                        res->status = AIRLOCK_STATUS_KILLED;
                        snprintf(msg, sizeof(msg),
                                 "killed: a file exceeded the size limit of %llu bytes (raise it "
                                 "with --memory or --max-output-file)",
                                 (unsigned long long)sizes.max_file_bytes);
                } else if (sig == SIGKILL && cg_oom_kills(run->c->oomfd) > run->oom_before) {
                        res->status = AIRLOCK_STATUS_MEMORY;
                        snprintf(msg, sizeof(msg),
                                 "memory: the run exceeded its memory limit of %llu MiB (raise it "
                                 "with --memory)",
                                 (unsigned long long)(l->memory_bytes >> 20));
                } else {
                        res->status = AIRLOCK_STATUS_KILLED;
                        snprintf(msg, sizeof(msg), "killed: the run was terminated by %s",
                                 signal_text(sig));
                }
        } else {
                res->exit_code = si->si_status;
                if (strcmp(run->end.status, WIRE_STATUS_MEMORY) == 0) {
                        res->status = AIRLOCK_STATUS_MEMORY;
                        snprintf(msg, sizeof(msg),
                                 "memory: the run exceeded its memory limit of %llu MiB (raise it "
                                 "with --memory)",
                                 (unsigned long long)(l->memory_bytes >> 20));
                } else if (res->exit_code == 0) {
                        res->status = AIRLOCK_STATUS_OK;
                } else {
                        res->status = AIRLOCK_STATUS_ERROR;
                        snprintf(msg, sizeof(msg), "error: the code exited with status %d",
                                 res->exit_code);
                }
        }
        res->success = res->status == AIRLOCK_STATUS_OK;
        if (msg[0])
                res->error_message = strdup(msg);

        if (outdir >= 0) {
                fsx_limits lim = {
                    .max_bytes = l->max_output_total,
                    .max_files = l->max_output_files,
                    .max_depth = l->max_output_depth,
                    .max_file = l->max_output_file,
                };
                airlock_error cerr;
                int r = fsx_capture(outdir, &lim, &res->files, &res->n_files, &res->refused,
                                    &res->n_refused, &cerr);
                if (r < 0) {
                        res->files = NULL;
                        res->n_files = 0;
                        res->refused = NULL;
                        res->n_refused = 0;
                        result_fail_capture(res, cerr.message);
                }
        }
        if (run->c->input_upper >= 0)
                run_input_changes(run, res);
        res->duration_ms = ms_since(run->t0);
        usage_end(run, res);
        res->usage.wall_ms = res->duration_ms;
        *ret = res;
        return 0;
}

/* Adds the code's sys.argv and standard input to the "run" frame, when
 * the caller gave them (al_run_options_in checked their caps). */
static int run_script_keys(json_t *msg, const airlock_run_options *o)
{
        if (o && o->argv) {
                json_t *a = json_array();
                if (!a || json_object_set_new(msg, WIRE_KEY_ARGV, a) < 0)
                        return -ENOMEM;
                for (size_t i = 0; o->argv[i]; i++)
                        if (json_array_append_new(a, json_string(o->argv[i])) < 0)
                                return -ENOMEM;
        }
        const char *mode = !o                                      ? NULL
                           : o->stdin_mode == AIRLOCK_STDIN_STREAM ? GUEST_STDIN_STREAM
                           : o->stdin_mode == AIRLOCK_STDIN_PROMPT ? GUEST_STDIN_PROMPT
                                                                   : NULL;
        if (mode && json_object_set_new(msg, WIRE_KEY_STDIN_MODE, json_string(mode)) < 0)
                return -ENOMEM;
        if (o && o->stdin_data) {
                _cleanup_free_ char *b64 =
                    al_base64_encode((const unsigned char *)o->stdin_data, o->stdin_len, NULL);
                if (!b64 || json_object_set_new(msg, WIRE_KEY_STDIN, json_string(b64)) < 0)
                        return -ENOMEM;
        }
        return 0;
}

/* Sends the code to the copy. *ret_delivered (when not NULL) tells whether
 * it got there, failure or not. */
static int run_deliver(run_state *run, const char *code, size_t len, bool *ret_delivered,
                       airlock_error *err)
{
        _cleanup_json_ json_t *msg =
            json_pack("{s:s, s:s%}", WIRE_KEY_OP, WIRE_OP_RUN, WIRE_KEY_CODE, code, len);
        int r = msg ? run_script_keys(msg, run->opts) : -ENOMEM;
        _cleanup_free_ char *body = NULL;
        if (r >= 0) {
                body = json_dumps(msg, JSON_COMPACT | JSON_ENCODE_ANY);
                r = body ? 0 : -ENOMEM;
        }
        /* With a late-input copy's input, in one message (sbx_copy_send). */
        if (r >= 0)
                r = sbx_copy_send(run->c, body, strlen(body));
        if (ret_delivered)
                *ret_delivered = r >= 0;
        /* Each of the code, its arguments and its standard input is under
         * its own cap, but together, once in JSON (base64 for the input,
         * escapes in the code), they can pass the frame's: the caller's
         * input is too large, not a broken sandbox. */
        if (r == -EMSGSIZE)
                return al_error(err, -E2BIG, NULL,
                                "the code (%zu bytes), its arguments and its standard input "
                                "(%zu bytes) are too large together: once encoded for the "
                                "sandbox they pass the run frame's cap of %u MiB "
                                "(CHANNEL_MAX_FRAME); pass large data with --workspace or "
                                "--mount",
                                len, run->opts && run->opts->stdin_data ? run->opts->stdin_len : 0,
                                CHANNEL_MAX_FRAME >> 20);
        if (r < 0) {
                return al_error_kind(err, AIRLOCK_ERROR_RUN, r, NULL,
                                     "cannot send the code to the sandbox: %s", strerror(-r));
        }
        run->quiet_until = al_now_ns() + PIPES_QUIET_NS;
        run->phase = RUN_QUIET;
        return 0;
}

static int run_code(run_state *run, int outdir, const char *code, size_t len, bool *ret_delivered,
                    airlock_result **ret, airlock_error *err)
{
        int r = run_deliver(run, code, len, ret_delivered, err);
        /* A late-input copy's answer to its input, handed in right before
         * the code (sbx_copy_hand_input): a copy that failed to take it
         * ended without reading the code, which another copy may run. */
        /* The copy has the code: without a closer (sbx_copy_retire), the
         * last run's copy is reaped while it runs (sbx_take_copy). */
        if (r >= 0)
                sbx_reap_dying(run->sb);
        int ri = sbx_copy_input_taken(run->c, err);
        if (ri < 0) {
                /* A copy that ended, or said it failed, before it answered
                 * read no code: another may run it. One that did not
                 * answer in time (-ETIMEDOUT) lives and holds the code,
                 * which it may still run before the caller's kill lands:
                 * it counts as delivered, never run a second time. */
                if (ret_delivered && ri != -ETIMEDOUT)
                        *ret_delivered = false;
                return ri;
        }
        if (r < 0)
                return r;
        while (run->phase != RUN_DONE)
                run_step(run);
        siginfo_t si = {0};
        run_reap(run, &si);
        return run_result(run, &si, outdir, ret, err);
}

int sbx_run_single(airlock_sandbox *sb, copy *c, int outdir, const char *code, size_t len,
                   const airlock_run_options *opts, al_watch *w, bool *ret_delivered,
                   airlock_result **ret, airlock_error *err)
{
        _cleanup_(run_free) run_state run;
        run_init(&run, sb, c, -1, opts, w);
        return run_code(&run, outdir, code, len, ret_delivered, ret, err);
}

int sbx_run_cell(airlock_sandbox *sb, copy *c, int outdir, int active_pidfd, const char *code,
                 size_t len, const airlock_run_options *opts, al_watch *w, bool *ret_alive,
                 airlock_result **ret, airlock_error *err)
{
        _cleanup_(run_free) run_state run;
        run_init(&run, sb, c, active_pidfd, opts, w);
        int r = run_code(&run, outdir, code, len, NULL, ret, err);
        if (r >= 0)
                *ret_alive = !run.exited;
        return r;
}
