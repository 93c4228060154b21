/* The template process: it builds the sandbox's namespaces and root, starts
 * the interpreter once, then forks a fresh copy of itself for every run.
 * This file is its life from start to end: the parameters from the host,
 * the steps before the first copy, the loop that waits for the host and
 * spawns copies, and the live copies it ends if the host dies. The other
 * files of the template are listed in template_internal.h.
 *
 * The host starts it by fork() and execve("/proc/self/exe") with argv[0]
 * TEMPLATE_ARGV0, so the template begins with a clean address space; a
 * constructor in this file catches that argv[0] before the program's main().
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include "config/limits.h"
#include "config/pypath.h"
#include "core/util.h"
#include "template/template.h"
#include "template/template_internal.h"

/* Drops the copies whose pidfd polled readable (they exited): polled[i]
 * is the poll entry of live_copies[i]. Their cgroups are the host's to
 * remove, once it has read how the run ended. */
static void forget_exited_copies(struct template_state *tpl, const struct pollfd *polled)
{
        size_t k = 0;
        for (size_t i = 0; i < tpl->n_live_copies; i++) {
                if (polled[i].revents) {
                        close(tpl->live_copies[i]);
                        continue;
                }
                tpl->live_copies[k++] = tpl->live_copies[i];
        }
        tpl->n_live_copies = k;
}

/* Waits for work: returns a message from the host (CTL_NUDGE once the
 * host has a single run's "end" frame, sbx_run_ended), or 0 when a copy
 * has exited: either is when the requests a run left in the request
 * socket are due (see sandbox.c). The socket itself is not watched, so
 * that asking wakes nobody. The copies seen to have exited are forgotten
 * here, from the same poll. */
static char wait_for_work(struct template_state *tpl)
{
        /* Scratch, rebuilt at every wait; static for its size. */
        static struct pollfd p[MAX_LIVE_COPIES + MAX_PREPARING + 1];
        for (;;) {
                nfds_t n = 0;
                p[n++] = (struct pollfd){tpl->ctl_fd, POLLIN, 0};
                /* A copy being prepared closes its end when it is ready
                 * (or gone): then the next one may start. */
                for (size_t i = 0; i < tpl->n_preparing; i++)
                        p[n++] = (struct pollfd){tpl->preparing[i], POLLIN, 0};
                size_t live = n;
                for (size_t i = 0; i < tpl->n_live_copies; i++)
                        p[n++] = (struct pollfd){tpl->live_copies[i], POLLIN, 0};
                int k = poll(p, n, -1);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k > 0) {
                        forget_exited_copies(tpl, p + live);
                        size_t kept = 0;
                        for (size_t i = 0; i < tpl->n_preparing; i++) {
                                if (p[1 + i].revents)
                                        close(tpl->preparing[i]);
                                else
                                        tpl->preparing[kept++] = tpl->preparing[i];
                        }
                        tpl->n_preparing = kept;
                }
                tpl_cgroups_retry(tpl);
                if (k < 0 || p[0].revents)
                        return tpl_ctl_recv(tpl);
                return 0;
        }
}

/* How many copies the host asked for in the request socket, read without
 * blocking; also the copies' cgroups the host is done with (REQ_DONE and
 * the cgroup's number, 4 bytes little-endian), which are removed. Only the
 * host holds its write end; a record may span two reads. */
static unsigned requested_copies(struct template_state *tpl)
{
        unsigned want = 0;
        unsigned char buf[256];
        ssize_t n;
        while ((n = read(TEMPLATE_REQ_FD, buf, sizeof(buf))) > 0 || (n < 0 && errno == EINTR)) {
                for (ssize_t i = 0; i < n; i++) {
                        if (tpl->req_done_bytes >= 0) {
                                tpl->req_done_seq |= (uint32_t)buf[i] << (8 * tpl->req_done_bytes);
                                if (++tpl->req_done_bytes == 4) {
                                        tpl_cgroup_done(tpl, tpl->req_done_seq);
                                        tpl->req_done_bytes = -1;
                                }
                        } else if (buf[i] == REQ_DONE) {
                                tpl->req_done_bytes = 0;
                                tpl->req_done_seq = 0;
                        } else {
                                want += buf[i] == CTL_SPAWN || buf[i] == CTL_SPAWN_BURST;
                                tpl->burst_wanted += buf[i] == CTL_SPAWN_BURST;
                        }
                }
        }
        return want;
}

/* A NULL-terminated copy of a JSON array of strings from the host (a
 * non-string is ""), its length in *ret_n; NULL when out of memory. */
static char **string_array(json_t *a, size_t *ret_n)
{
        size_t n = json_array_size(a);
        char **v = calloc(n + 1, sizeof(char *));
        *ret_n = 0;
        for (size_t i = 0; v && i < n; i++)
                v[(*ret_n)++] = strdup(json_string_value(json_array_get(a, i)) ?: "");
        return v;
}

static void read_params(struct template_state *tpl)
{
        /* Parsed into a local, and into the state once complete. */
        template_params params = {0};
        _cleanup_free_ char *buf = malloc(65536);
        if (!buf)
                _exit(127);
        ssize_t n;
        do
                n = recv(tpl->ctl_fd, buf, 65536, 0);
        while (n < 0 && errno == EINTR);
        if (n <= 0)
                _exit(127);
        json_error_t jerr;
        _cleanup_json_ json_t *j = json_loadb(buf, (size_t)n, 0, &jerr);
        /* Freed before the strings are copied, which may reuse its room
         * in the heap every copy inherits. */
        free(TAKE_PTR(buf));
        if (!j)
                tpl_fail(tpl, EINVAL, "setup", "bad parameters from the host");
        /* The limits the host sends (the limits table's template column);
         * the others keep their defaults. */
        airlock_limits_default(&params.limits);
        limits_from_json(&params.limits, j);
        params.has_input = json_is_true(json_object_get(j, "has_input"));
        params.input_tree = json_is_true(json_object_get(j, "input_tree"));
        params.guest_uid = (uid_t)json_integer_value(json_object_get(j, "guest_uid"));
        params.guest_gid = (gid_t)json_integer_value(json_object_get(j, "guest_gid"));
        params.cgroup = (int)json_integer_value(json_object_get(j, "cgroup"));
        params.cgroup_cpu = params.cgroup == 1 && json_is_true(json_object_get(j, "cgroup_cpu"));
        params.auto_figures = !json_is_false(json_object_get(j, "auto_figures"));
        params.input_writable = json_is_true(json_object_get(j, "input_writable"));
        params.late_input = json_is_true(json_object_get(j, "late_input"));
        params.single_run = json_is_true(json_object_get(j, "single_run"));
        params.preloads = string_array(json_object_get(j, "preloads"), &params.n_preloads);
        json_t *py = json_object_get(j, "python_paths");
        json_t *py_fd = json_object_get(j, "python_path_fds");
        size_t n_py = MIN(json_array_size(py), (size_t)PYPATH_MAX);
        params.python_paths = calloc(n_py + 1, sizeof(char *));
        params.python_path_fd = calloc(n_py + 1, sizeof(bool));
        for (size_t i = 0; params.python_paths && params.python_path_fd && i < n_py; i++) {
                params.python_paths[i] = strdup(json_string_value(json_array_get(py, i)) ?: "");
                params.python_path_fd[i] = json_is_true(json_array_get(py_fd, i));
                params.n_python_paths++;
        }
        params.sys_path = string_array(json_object_get(j, "sys_path"), &params.n_sys_path);
        tpl->params = params;
}

/* Tells the host why it gets no copy this time ("E<errno> copy|<what>:
 * <reason>"); the template goes on. */
static void report_no_copy(const struct template_state *tpl, int err, const char *what)
{
        char msg[160];
        int n = snprintf(msg, sizeof(msg), "%c%d copy|%s: %s", CTL_ERROR, err, what, strerror(err));
        if (n > 0)
                (void)!send(tpl->ctl_fd, msg, (size_t)MIN(n, (int)sizeof(msg) - 1), MSG_NOSIGNAL);
}

/* Contract: forks a copy for the host: clone3 with a new PID, mount, user
 * and IPC namespace (and network namespace where Landlock cannot scope
 * the copy), CLONE_PARENT so that the host, not the template, is its
 * parent and waits for it, through the pidfd it is sent with the copy's
 * channel, output pipes and OOM counter (CTL_COPY). The template keeps the
 * pidfd (live_copies) and never waits for a copy. On failure the host is
 * told why (CTL_ERROR) and the copy's cgroup is removed. Every fd made
 * here is closed in the template on every path; the copy, which never
 * returns here, closes the template's ends itself. */
static void spawn_copy(struct template_state *tpl)
{
        _cleanup_close_pair_ int sv[2] = {-1, -1};
        _cleanup_close_pair_ int out[2] = {-1, -1};
        _cleanup_close_pair_ int err[2] = {-1, -1};
        /* The host's ends of the output pipes are non-blocking (it drains
         * them between other events), set here rather than on every run. */
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0 ||
            pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0 ||
            fcntl(out[0], F_SETFL, O_NONBLOCK) < 0 || fcntl(err[0], F_SETFL, O_NONBLOCK) < 0) {
                report_no_copy(tpl, errno, "cannot create the channel");
                return;
        }
        /* The copy holds the write end until it is ready (tpl_copy_main). */
        _cleanup_close_pair_ int prep[2] = {-1, -1};
        if (pipe2(prep, O_CLOEXEC) < 0) {
                report_no_copy(tpl, errno, "cannot create the channel");
                return;
        }
        _cleanup_close_cg_ int procs[CG_HIERARCHIES] = {-1, -1, -1};
        _cleanup_close_ int oomfd = -1;
        _cleanup_close_pair_ int usage[TPL_USAGE_FILES] = {-1, -1};
        int pidfd = -1;
        unsigned seq = 0;
        int r = tpl_cgroup_make(tpl, &seq, procs, &oomfd, usage);
        if (r < 0) {
                report_no_copy(tpl, -r, "cannot create the run's cgroup");
                return;
        }
        /* Each copy has its own user namespace (its per-user counters and
         * limits are the run's alone), IPC namespace (no SysV object of one
         * run reaches another or outlives it) and network namespace: the
         * names of Unix sockets (abstract ones, and the paths of bound
         * ones, which /proc/net/unix lists) are a network namespace's, so
         * in a shared one a run, under airlock serve another tenant's,
         * would read the names another run binds and could take an
         * abstract name before it (Landlock's scope only keeps it from
         * connecting). */
        struct clone_args args = {
            .flags = CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWUSER | CLONE_NEWIPC | CLONE_NEWNET |
                     CLONE_PARENT | CLONE_PIDFD,
            .pidfd = (uint64_t)(uintptr_t)&pidfd,
            .exit_signal = 0,
        };
        guest_before_fork();
        long pid = syscall(SYS_clone3, &args, sizeof(args));
        if (pid == 0) {
                /* The copy: tpl_copy_main never returns, so no cleanup of
                 * this frame runs in it. */
                close(sv[0]);
                close(out[0]);
                close(err[0]);
                close(prep[0]);
                if (oomfd >= 0)
                        close(oomfd);
                for (int i = 0; i < TPL_USAGE_FILES; i++)
                        if (usage[i] >= 0)
                                close(usage[i]);
                tpl_copy_main(tpl, sv[1], out[1], err[1], procs, prep[1]);
        }
        int saved = errno;
        guest_after_fork_parent();
        /* The copy's ends of its cgroup.procs files are its own now. */
        tpl_close_cg(procs);
        if (pid < 0) {
                report_no_copy(tpl, saved, "cannot start a copy");
                /* Nothing of the cgroup stays open when it is removed. */
                oomfd = tpl_close(oomfd);
                for (int i = 0; i < TPL_USAGE_FILES; i++)
                        usage[i] = tpl_close(usage[i]);
                tpl_cgroup_remove(tpl, seq);
                return;
        }
        prep[1] = tpl_close(prep[1]);
        tpl->preparing[tpl->n_preparing++] = TAKE_FD(prep[0]);
        /* With a cgroup, its OOM counter, then the usage files there are,
         * which the mask in the text names (1: the CPU time, 2: the memory
         * peak). */
        int fds[5 + TPL_USAGE_FILES] = {sv[0], pidfd, out[0], err[0], oomfd};
        size_t nfds = oomfd >= 0 ? 5 : 4;
        unsigned mask = 0;
        for (int i = 0; oomfd >= 0 && i < TPL_USAGE_FILES; i++)
                if (usage[i] >= 0) {
                        fds[nfds++] = usage[i];
                        mask |= 1u << i;
                }
        if (tpl->n_live_copies < MAX_LIVE_COPIES)
                tpl->live_copies[tpl->n_live_copies++] = pidfd;
        else
                close(pidfd);
        /* With its pid, by which the host reaps it once it is dead, and the
         * number of its cgroup, which the host removes after that. */
        char pidtext[40];
        snprintf(pidtext, sizeof(pidtext), "%ld %u %u", pid, seq, mask);
        if (tpl_send_fds(tpl->ctl_fd, CTL_COPY, pidtext, fds, nfds) < 0)
                tpl_host_gone(tpl);
}

/* The mount options of every copy's /output, /tmp and /dev/shm, from the
 * limits, written once: their sizes and inode counts. */
static void tmpfs_options(struct template_state *tpl)
{
        /* Without a cgroup nothing counts what the tmpfs mounts hold
         * against the memory limit: each is capped at it instead. */
        uint64_t out_bytes = tpl->params.limits.output_fs_bytes,
                 tmp_bytes = tpl->params.limits.tmp_bytes;
        if (!tpl->params.cgroup) {
                out_bytes = MIN(out_bytes, tpl->params.limits.memory_bytes);
                tmp_bytes = MIN(tmp_bytes, tpl->params.limits.memory_bytes);
        }
        uint64_t inodes = (uint64_t)tpl->params.limits.max_output_files * 4 + 1024;
        snprintf(tpl->out_opts, sizeof(tpl->out_opts), "size=%llu,nr_inodes=%llu,mode=0755",
                 (unsigned long long)out_bytes, (unsigned long long)inodes);
        /* Inodes are kernel memory too: without a cgroup, one per 16 KiB
         * of the memory limit. */
        uint64_t tmp_inodes = tpl->params.cgroup
                                  ? 65536
                                  : MAX(1024, MIN(65536, tpl->params.limits.memory_bytes >> 14));
        snprintf(tpl->tmp_opts, sizeof(tpl->tmp_opts), "size=%llu,nr_inodes=%llu,mode=01777",
                 (unsigned long long)tmp_bytes, (unsigned long long)tmp_inodes);

        /* /dev/shm, for POSIX shared memory and semaphores (multiprocessing's
         * locks and queues): its size is the run's memory limit, and what it
         * holds is charged to the run's cgroup where there is one, or else
         * capped by the size alone, as /tmp is. */
        snprintf(tpl->shm_opts, sizeof(tpl->shm_opts), "size=%llu,nr_inodes=%llu,mode=01777",
                 (unsigned long long)tpl->params.limits.memory_bytes,
                 (unsigned long long)MIN(tmp_inodes, 4096));
}

/* The seccomp programs every copy loads (the guest's, the mount
 * filter of a late input, a session's), built once; a failure ends the
 * template with its message. */
static void build_filters(struct template_state *tpl)
{
        char errbuf[900];
        int r = seccomp_build_guest_filter(&tpl->guest_filter, tpl->params.cgroup == 0,
                                           tpl->params.late_input, errbuf, sizeof(errbuf));
        if (r >= 0 && tpl->params.late_input)
                r = seccomp_build_mount_filter(&tpl->mount_filter, errbuf, sizeof(errbuf));
        if (r >= 0)
                r = seccomp_build_session_filter(&tpl->session_filter, errbuf, sizeof(errbuf));
        if (r < 0)
                tpl_fail(tpl, r, "seccomp", "%s", errbuf);
}

_Noreturn void template_main(void)
{
        /* The template's one state (template_internal.h): static rather
         * than on this frame for its size (some 45 KiB of tables), and
         * zero-initialised in .bss, as the globals it replaced were; the
         * members that start as "no fd" are set here. */
        static struct template_state state;
        struct template_state *tpl = &state;
        tpl->ctl_fd = TEMPLATE_CTL_FD;
        tpl->req_done_bytes = -1;
        tpl->reap_wait = tpl->reap_notify = -1;
        /* One copy prepared at a time per CPU this process may use. */
        cpu_set_t cpus;
        tpl->max_preparing = sched_getaffinity(0, sizeof(cpus), &cpus) == 0
                                 ? (size_t)MAX(1, MIN(CPU_COUNT(&cpus), MAX_PREPARING))
                                 : 1;

        /* The interpreter first, as the dynamic linker loaded libpython
         * with this program when the program linked it: beside the host,
         * which prepares the parameters meanwhile, and in the host's mount
         * namespace (guest_load.c). A failure is reported once the host
         * listens (below). */
        char loaderr[512] = "";
        int loaded = guest_load(loaderr, sizeof(loaderr));

        /* Signals meant for the host's terminal are not the template's. */
        setsid();
        signal(SIGPIPE, SIG_IGN);
        /* LD_BIND_NOW did its work when this program was loaded; the
         * guest's own programs need not pay for it. */
        unsetenv("LD_BIND_NOW");
        read_params(tpl);
        /* The template and the copies it forks prepare as SCHED_BATCH. */
        tpl_set_preparing(true);

        int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(devnull, 1) < 0 || dup2(devnull, 2) < 0)
                tpl_fail(tpl, -errno, "setup", "cannot open /dev/null: %m");
        close(devnull);
        if (loaded < 0)
                tpl_fail(tpl, loaded, "python", "%s", loaderr);

        tpl_setup_namespaces(tpl);
        tpl_probe_landlock(tpl);
        tpl_proc_prepare(tpl);

        tmpfs_options(tpl);

        char errbuf[900];
        build_filters(tpl);
        int r = guest_init(&tpl->params, errbuf, sizeof(errbuf));
        if (r < 0)
                tpl_fail(tpl, r, r == -ENOENT ? "preload" : "python", "%s", errbuf);
        /* Once, after the interpreter read its dispositions and the
         * preloads set theirs: each copy then only turns them on. */
        guest_install_init_signals();

        tpl_ctl_send(tpl, CTL_READY);
        /* Copies asked for and not started yet. */
        unsigned want = 0;
        for (;;) {
                /* At most one copy per CPU is prepared at a time: the host
                 * takes them in order, and more copies side by side would
                 * all be ready late on a busy machine, the first one too
                 * (with four at once on 2 CPUs under one CPU-bound loop
                 * per core, print(1) 10 ms apart took 9.0 ms against 5.7
                 * ms one at a time); one at a time left a CPU unused when
                 * callers come in parallel (8 threads through the cache:
                 * 326 to 383 runs/s against 580 before). */
                if (!want || tpl->n_preparing >= tpl->max_preparing) {
                        char c = wait_for_work(tpl);
                        want += requested_copies(tpl) + (c == CTL_SPAWN || c == CTL_SPAWN_BURST);
                        tpl->burst_wanted += c == CTL_SPAWN_BURST;
                        continue;
                }
                want--;
                /* In a burst the calls outpace the copies: the CPU of the
                 * warming is better spent on the next copy. */
                tpl->skip_warming = tpl->burst_wanted > 0;
                tpl->burst_wanted -= tpl->skip_warming;
                /* No pause before the fork: a run's request is
                 * acted on only once the host has the run's "end"
                 * frame (wait_for_work), and the 2 ms pause once
                 * kept here, from when the fork could land on the
                 * host's answer, only delayed the next copy past
                 * the 10 ms between calls. */
                tpl_settle_cache(tpl);
                spawn_copy(tpl);
                /* The warm-up comes after the first copy, so that
                 * a new sandbox's first run does not wait for
                 * imports it may not need; every later copy starts
                 * with them done. In a one-shot sandbox the first
                 * copy is likely the only one, and the warm-up and
                 * the cache builder beside its run would only take
                 * CPU from it (docs/performance.md, "Where a cold
                 * start goes"): they come after the second copy, if
                 * one is ever asked for. */
                if (tpl->params.single_run && !tpl->spawned_one) {
                        tpl->spawned_one = true;
                } else if (!tpl->warmed_up) {
                        r = guest_warm_up(errbuf, sizeof(errbuf));
                        if (r < 0)
                                tpl_fail(tpl, r, "python", "%s", errbuf);
                        tpl->warmed_up = true;
                        /* Off every run's path. */
                        tpl->cache_builder = guest_start_cache_builder();
                        tpl_settle_cache(tpl);
                } else if (!tpl->prefault_learned) {
                        /* After the second copy, not the first: a
                         * new sandbox's first run is then over,
                         * and the probe does not compete with it. */
                        tpl_learn_prefault(tpl, tpl_plain_pass, tpl_preloads_pass);
                        tpl->prefault_learned = true;
                }
        }
}

/* Runs before main() in every program linked with libairlock: when this
 * process is a template started by the host, it never reaches main(). */
__attribute__((constructor)) static void template_entry(int argc, char **argv)
{
        if (argc < 1 || !argv || !argv[0] || strcmp(argv[0], TEMPLATE_ARGV0) != 0)
                return;
        int type = 0;
        socklen_t len = sizeof(type);
        if (getsockopt(TEMPLATE_CTL_FD, SOL_SOCKET, SO_TYPE, &type, &len) < 0 ||
            type != SOCK_SEQPACKET)
                return;
        template_main();
}
