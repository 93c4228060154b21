/* What the files of the template share, and nothing the rest of the library
 * needs (that is template.h): the template's state, one struct, and the
 * functions one file of the template calls in another.
 *
 * The files, each calling only into those below it, so that no two depend
 * on each other:
 *
 *   template.c      the template's life: parameters, setup, the loop that
 *                   spawns copies, the live copies
 *   tpl_copy.c      a copy's setup, up to the first byte it reads
 *   tpl_run.c       a copy serving the host: runs, the end of a run; the
 *                   probe's runs
 *   tpl_session.c   a copy as a session: pid 1, snapshots, restores
 *   tpl_prefault.c  the pages a copy will touch, learned from a probe; the
 *                   pages a session's next cell will write
 *   tpl_ns.c        namespaces and ids: the template's, each copy's user
 *                   namespace, the Landlock scope
 *   tpl_cgroup.c    per-copy cgroups
 *   tpl_root.c      the guest's root, the mount helpers
 *   tpl_etc.c       the guest's copy of a few files of the host's /etc
 *   tpl_ctl.c       the template's ends of its sockets: failures, control
 *                   bytes, fds, replies
 *
 * The template is a single-threaded process that forks copies. Its state
 * is one static instance of struct template_state, defined inside
 * template_main, which hands a pointer to it down to every function that
 * reads or changes it, or that may end the template with tpl_fail() (which
 * reports on the control socket held in it); const where a function only
 * reads. So each signature says what a step depends on and whether it may
 * change the state, and a function without that pointer touches none of
 * it. A copy is a fork of the template: it holds its own copy of the
 * instance, as of the fork; what it changes there (ctl_fd, the session's
 * reap pipe) the template never sees. */
#ifndef AIRLOCK_TEMPLATE_INTERNAL_H
#define AIRLOCK_TEMPLATE_INTERNAL_H

#include <dirent.h>
#include <linux/filter.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <jansson.h>

#include "core/util.h"
#include "core/wire.h"

/* The new root is built on a tmpfs mounted over /tmp inside the template's
 * own mount namespace; the host's /tmp is not touched. */
#define NEWROOT "/tmp"

/* The most copies the template tracks at once (live_copies). */
#define MAX_LIVE_COPIES 4096
/* The most copies prepared at once, whatever the CPUs. */
#define MAX_PREPARING 64
/* The most page ranges a probe's report keeps (tpl_prefault.c). */
#define PREFAULT_MAX_RANGES 1024
/* Copies' cgroups that the host is done with but that could not be
 * removed yet (the copy was still exiting), retried at every wake-up: a
 * copy's exit is one. Past the cap, the host removes what is left when it
 * closes the sandbox. */
#define MAX_PENDING_RM 256

/* Cleanups beside core/util.h's, for the template's error paths: both fds
 * of a pipe or socket pair, and a directory stream. tpl_close and
 * tpl_close_pair close at once and leave -1 behind, where the moment of
 * the close matters (before a cgroup is removed) in a variable that a
 * cleanup would otherwise close later. None of them kills or reaps: a
 * scope of the template that forks keeps its child's pid in the open. */
static inline int tpl_close(int fd)
{
        closep(&fd);
        return -1;
}
static inline void tpl_close_pair(int fds[2])
{
        fds[0] = tpl_close(fds[0]);
        fds[1] = tpl_close(fds[1]);
}
static inline void tpl_close_pairp(int (*fds)[2])
{
        tpl_close_pair(*fds);
}
static inline void tpl_closedirp(DIR **d)
{
        if (*d) {
                int saved = errno;
                closedir(*d);
                errno = saved;
        }
}
/* The fds of a copy's cgroups, one per hierarchy (CG_HIERARCHIES). */
static inline void tpl_close_cg(int fds[CG_HIERARCHIES])
{
        for (int i = 0; i < CG_HIERARCHIES; i++)
                fds[i] = tpl_close(fds[i]);
}
static inline void tpl_close_cgp(int (*fds)[CG_HIERARCHIES])
{
        tpl_close_cg(*fds);
}
#define _cleanup_close_pair_ _cleanup_(tpl_close_pairp)
#define _cleanup_close_cg_   _cleanup_(tpl_close_cgp)
#define _cleanup_closedir_   _cleanup_(tpl_closedirp)

/* A range of pages a copy will touch, learned from the probe. */
typedef struct prefault_range {
        uint64_t start, len;
        uint64_t write; /* MADV_POPULATE_WRITE, else MADV_POPULATE_READ */
} prefault_range;

struct template_state {
        /* --- set while the template starts, before the first copy --- */

        /* The host's parameters: read_params, first of all; read-only
         * from then on. */
        template_params params;
        /* The control socket to the host: TEMPLATE_CTL_FD in the template.
         * tpl_copy_main sets it to -1 in every copy, where that fd number is
         * the copy's channel, so that nothing meant for the host's control
         * socket can ever be written there. */
        int ctl_fd;
        /* Whether this kernel's Landlock can scope abstract Unix sockets
         * and signals (ABI 6, Linux 6.12): tpl_probe_landlock, once the
         * namespaces are made. Read by spawn_copy and by every copy. */
        bool landlock_scopes;
        /* The guest's seccomp filter, built by template_main and loaded by
         * every copy. */
        struct sock_fprog guest_filter;
        /* What a copy that becomes a session adds to it: the refusal of
         * shared memory (seccomp_build_session_filter). */
        struct sock_fprog session_filter;
        /* A late-input template's second filter (seccomp_build_mount_filter). */
        struct sock_fprog mount_filter;
        /* The mount options of a copy's /tmp and /output tmpfs, from the
         * limits: template_main; read by every copy. */
        char tmp_opts[128], out_opts[128];
        /* The mount options of a copy's /dev/shm tmpfs: template_main. */
        char shm_opts[128];

        /* --- changed by the template between copies; a copy sees them
         * as they were when it was forked --- */

        /* pidfds of the copies this template started that may still live:
         * added by spawn_copy, dropped by forget_exited_copies. The copies
         * are the host's children, but if the host dies (even by SIGKILL)
         * the template sees its control socket close and ends them
         * (tpl_host_gone), so no run outlives its host. */
        int live_copies[MAX_LIVE_COPIES];
        size_t n_live_copies;
        /* A REQ_DONE record being read from the request socket, which may
         * span two reads (requested_copies): the bytes of its number read
         * so far (-1: none), and the number. */
        int req_done_bytes;
        uint32_t req_done_seq;
        /* Whether the interpreter has been warmed up: template_main, after
         * the first copy (in a one-shot sandbox, after the second:
         * spawned_one says the first was started). Copies forked before do
         * not pre-warm. */
        bool warmed_up;
        bool spawned_one;
        /* The cache builder (guest_start_cache_builder): 0 until it is
         * started, then its pid (or < 0); template_main. cache_sealed:
         * GUEST_CACHE_DIR is read-only in the template, set by
         * tpl_settle_cache once the builder has exited; a copy made before
         * makes its own view read-only (tpl_copy_main). */
        pid_t cache_builder;
        bool cache_sealed;
        /* The pages a copy will touch (tpl_learn_prefault, after the second
         * copy); every later copy populates them first
         * (tpl_populate_learned). */
        prefault_range prefault[PREFAULT_MAX_RANGES];
        size_t n_prefault;
        bool prefault_learned;
        /* What the probe's path through the preloads touches beyond
         * that (the preloads' set, tpl_prefault.c), populated by a copy
         * in its warming or before a run that names a preload
         * (tpl_populate_for), and whether this process has (a session's
         * later cells, its forks and restores: tpl_populate_learned then
         * populates it too). */
        prefault_range prefault_preloads[PREFAULT_MAX_RANGES];
        size_t n_prefault_preloads;
        bool preloads_populated;
        /* Both sets as a copy gives its advice (tpl_prefault.c, populate):
         * [0] the base set, [1] the preloads', each its ranges to write
         * (the first populate_writes), then its ranges to read. Made in
         * the template once the probe has learned them, so that a copy
         * only reads them. */
        struct iovec populate_iov[2][PREFAULT_MAX_RANGES];
        size_t populate_writes[2];
        /* The number of the last copy's cgroup c<N> (tpl_cgroup_make),
         * and the cgroups the host is done with that could not be removed
         * yet (tpl_cgroup_done, tpl_cgroups_retry). */
        unsigned copy_cgroup_seq;
        /* The read ends of the pipes whose write ends the copies being
         * prepared hold until they are ready (spawn_copy, tpl_copy_main):
         * the template prepares at most max_preparing copies at a time,
         * one per CPU it may use. */
        int preparing[MAX_PREPARING];
        size_t n_preparing, max_preparing;
        /* Copies asked for without their warming (CTL_SPAWN_BURST) and
         * not started yet; skip_warming: the copy being forked is one. */
        unsigned burst_wanted;
        bool skip_warming;
        uint32_t pending_rm[MAX_PENDING_RM];
        size_t n_pending_rm;
        /* The host's cpuinfo for the CPUs the sandbox may use, and how
         * many they are (tpl_proc_prepare, once); read by every copy. */
        char *proc_cpuinfo;
        unsigned proc_cpus;
        /* What each top-level entry of /proc needs in a copy, decided once
         * from the template's own view of a full procfs (tpl_proc_prepare):
         * every copy's procfs has the same global entries, and a copy then
         * asks the kernel about none of them (tpl_proc_mount). */
        struct proc_plan *proc_plan;
        size_t n_proc_plan;

        /* --- per copy: set in a copy, never in the template --- */

        /* The session's reap pipe, made when the host opens a session
         * (tpl_session_open) and inherited by every process of it: pid 1
         * writes a byte into it (reap_notify, pid 1's only) each time it
         * has reaped something, so that a process waiting for others to be
         * gone can sleep until the set of processes changed (reap_wait, see
         * wait_until_gone). A guest can only write false wake-ups into it,
         * or close it, which makes its own session's restore fail rather
         * than wait. -1 outside a session. */
        int reap_wait;
        int reap_notify;
};

/* --- tpl_copy.c --- */

/* A fresh copy, in the namespaces spawn_copy gave it: sets itself up,
 * reports ready to the host with its /output fd, and serves it. */
_Noreturn void tpl_copy_main(struct template_state *tpl, int chan, int out_w, int err_w,
                             const int procs[CG_HIERARCHIES], int prep_w);

/* --- tpl_prefault.c --- */

/* In the warm template: learns the pages a copy touches from a probe that
 * goes once through plain, a plain run's interpreter steps (tpl_plain_pass:
 * the base set), then once through steps, the common paths of the
 * preloads (tpl_preloads_pass: the preloads' set, what these touched
 * beyond the base), as a copy goes once through the agent's run. The
 * caller names them, so that this file, below the runs of tpl_run.c,
 * calls nothing of theirs. */
void tpl_learn_prefault(struct template_state *tpl, void (*plain)(void), void (*steps)(void));
/* In a new copy, before anything else touches memory: populates the base
 * set (and the preloads' set, once a run of this process named a
 * preload). */
void tpl_populate_learned(const struct template_state *tpl);
/* Populates the preloads' set, once a process (a copy's warming). */
void tpl_populate_preloads(struct template_state *tpl);
/* Right before a run of code: the same, when code names a preloaded
 * module. */
void tpl_populate_for(struct template_state *tpl, const char *code, size_t len);
/* A session's pre-copy. In the active process, just before it forks the
 * next cell base while the last base still shares every page it did not
 * write: learns the pages written since that base was forked (those it
 * copied last time only if their contents changed). */
void tpl_precopy_learn(void);
/* After the new base is forked: copies those pages, a chunk at a time until
 * a frame comes on chan; false, having done nothing, when nothing was
 * learned since the last call (the caller then populates the learned pages
 * of a copy instead). */
bool tpl_precopy_populate(int chan);
/* Forgets what was learned (a process that stays shared with its base). */
void tpl_precopy_forget(void);

/* --- tpl_run.c --- */

/* The copy's loop: one run and exit, or a session. */
_Noreturn void tpl_serve_host(struct template_state *tpl, int chan);
/* One whole single run of print(1) and the runtime's own warming code,
 * its output to /dev/null: the probe's preloads' set (tpl_prefault.c). */
void tpl_preloads_pass(void);
/* The same run with print(1) alone: the probe's base set. */
void tpl_plain_pass(void);
/* SCHED_BATCH while copies are prepared, the caller's SCHED_OTHER with the
 * shortest time slice once a copy serves; nothing where the caller runs
 * with another policy. */
void tpl_set_preparing(bool preparing);

/* --- tpl_session.c: the session ops of tpl_serve_host --- */

void tpl_session_open(struct template_state *tpl, int chan);
/* Where tpl_session_snapshot returns: in the active process, once the
 * snapshot was taken or refused, or in a process made from the snapshot
 * later, a restore's or a fork's. */
enum snapshot_end {
        SNAPSHOT_TAKEN,    /* the active process, which took it */
        SNAPSHOT_NONE,     /* the active process after a refusal */
        SNAPSHOT_RESTORED, /* the new active process of a restore or a rollback */
        SNAPSHOT_FORKED,   /* a fork that the cell base became */
};
enum snapshot_end tpl_session_snapshot(const struct template_state *tpl, int chan, bool base);
void tpl_session_restore(const struct template_state *tpl, int chan, json_t *msg);
void tpl_session_drop(const struct template_state *tpl, json_t *msg);
bool tpl_session_fork(const struct template_state *tpl, int chan, json_t *msg);
/* Whether this process's cell base became a fork since the last call. */
bool tpl_session_gave_base(void);
/* Waits up to 1 ms, or until a frame comes, before work for a later call. */
void tpl_session_grace(int chan);
/* Ends a cell base that a "drop" left for the next base (tpl_session_drop):
 * called before any op but "snapshot". */
void tpl_session_finish_drop(const struct template_state *tpl);
void tpl_session_leave(const struct template_state *tpl, int chan, json_t *msg);
/* At the end of a cell: stops every other process of the copy but pid 1. */
void tpl_session_freeze(void);
/* "thaw" {"spare"}, before a cell: continues the stopped processes of the
 * copy but those of the sibling handles named in spare. */
void tpl_session_thaw(json_t *msg);

/* --- tpl_ns.c --- */

/* The template's own namespaces and ids, then its root (tpl_build_root). */
void tpl_setup_namespaces(const struct template_state *tpl);
/* Sets landlock_scopes. */
void tpl_probe_landlock(struct template_state *tpl);
/* In a copy: the ruleset of tpl_scope_copy, made ahead of it. */
int tpl_scope_ruleset(const struct template_state *tpl, bool no_mounts);
/* In a copy: scopes its abstract Unix sockets and signals to itself. */
int tpl_scope_copy(const struct template_state *tpl, bool no_mounts, int ruleset,
                   bool *ret_no_mounts);
/* In a copy: maps its ids in its own user namespace and caps its
 * counters. */
int tpl_enter_own_user_namespace(void);

/* --- tpl_cgroup.c --- */

/* The files of a copy's cgroup the host reads its run's usage from: the
 * CPU time and the memory peak (either -1 where there is none). */
enum { TPL_USAGE_CPU, TPL_USAGE_PEAK, TPL_USAGE_FILES };

/* In the template: the next copy's cgroup, and the files the copy and the
 * host need of it. */
int tpl_cgroup_make(struct template_state *tpl, unsigned *ret_seq, int procs[CG_HIERARCHIES],
                    int *ret_oom, int ret_usage[TPL_USAGE_FILES]);
/* In a new copy, first of all: joins its cgroup. */
int tpl_cgroup_join(const int procs[CG_HIERARCHIES]);
/* The host is done with copy seq's cgroup. */
void tpl_cgroup_done(struct template_state *tpl, uint32_t seq);
/* Removes the cgroup of a copy that never reached the host. */
void tpl_cgroup_remove(const struct template_state *tpl, unsigned seq);
/* Retries the removals that could not be done yet. */
void tpl_cgroups_retry(struct template_state *tpl);

/* --- tpl_proc.c --- */

/* In the template, once: what every copy's /proc shows of the CPUs. */
void tpl_proc_prepare(struct template_state *tpl);
/* In a copy: its /proc (see the contract there). */
int tpl_proc_mount(const struct template_state *tpl);

/* --- tpl_root.c --- */

void tpl_build_root(const struct template_state *tpl);
/* Makes the cache read-only once its builder has exited. */
void tpl_settle_cache(struct template_state *tpl);
/* Makes a mount read-only, nosuid, nodev unless dev_ok, noexec if asked,
 * keeping the flags the kernel locked. */
int tpl_make_readonly(const char *path, bool dev_ok, bool noexec);

/* --- tpl_etc.c --- */

/* Copies the few entries of the host's /etc the guest gets into the new
 * root's /etc (in a child of the template). */
void tpl_copy_host_etc(const struct template_state *tpl);

/* --- tpl_ctl.c --- */

/* Reports a failure to the host on the control socket and exits. */
_Noreturn void tpl_fail(const struct template_state *tpl, int err, const char *feature,
                        const char *fmt, ...) _printf_(4, 5);
void tpl_ctl_send(const struct template_state *tpl, char c);
/* A byte from the host; when the host is gone, tpl_host_gone. */
char tpl_ctl_recv(const struct template_state *tpl);
/* Ends every live copy, then the template. */
_Noreturn void tpl_host_gone(const struct template_state *tpl);
int tpl_send_fds(int sock, char tag, const char *text, const int *fds, size_t n);
/* Sends one JSON frame and frees it, or ends this process if the host is
 * gone. */
void tpl_reply(int chan, json_t *msg);

#endif
