/* Internals of the namespace sandbox shared by the host side (sandbox.c),
 * the template process (template.c) and the embedded interpreter
 * (guestpy.c). */
#ifndef AIRLOCK_SANDBOX_H
#define AIRLOCK_SANDBOX_H

#include <jansson.h>
#include <linux/filter.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "airlock.h"

/* The template is this very program, executed again with this argv[0], the
 * control socket on fd 3, the staged /input on fd 4 and the read end of the
 * request socket on fd 5. Executing afresh means nothing of the host
 * process's memory (environment, heap, earlier results) is ever visible to
 * a guest. */
#define TEMPLATE_ARGV0    "airlock-template"
#define TEMPLATE_CTL_FD   3
#define TEMPLATE_INPUT_FD 4
#define TEMPLATE_REQ_FD   5
/* Where the host gives the template the sandbox's cgroup directories (the
 * memory and the pids hierarchy of cgroup v1, or the one v2 directory), in
 * which the template makes one child cgroup per copy. Absent without
 * cgroups. */
#define TEMPLATE_CG_FD  6
#define TEMPLATE_CG2_FD 7
/* The read-only mounts of the --python-path folders, when the host could
 * make them (as root), on fds TEMPLATE_PYPATH_FD + N. */
#define TEMPLATE_PYPATH_FD 8

/* Control messages on the template's SOCK_SEQPACKET socket. */
enum {
        CTL_USERNS = 'U', /* template -> host: user namespace made, write the id maps */
        CTL_GO = 'G',     /* host -> template: maps written */
        CTL_READY = 'R',  /* template -> host: interpreter initialised */
        CTL_ERROR = 'E',  /* template -> host: "E<errno> <feature>|<message>" */
        CTL_SPAWN = 'S',  /* host -> template: start a copy */
        CTL_NUDGE = 'N',  /* host -> template: a copy is awaited, serve the request socket */
        /* template -> host: a copy's pid, with [channel, pidfd, stdout, stderr]
         * and, with per-copy cgroups, the OOM counter of the copy's cgroup */
        CTL_COPY = 'C',
        /* host -> template, on the request socket: the host is done with a
         * copy's cgroup, whose number follows (4 bytes, little-endian) */
        REQ_DONE = 'D',
};

/* First byte a copy sends on its channel: ready with the /output fd attached,
 * or an error followed by a message. */
enum {
        COPY_READY = 'R',
        COPY_ERROR = 'E',
};

/* The template's read-only cache in the guest's root (template.c). */
#define GUEST_CACHE_DIR "/cache"
/* The module name of the guest's matplotlib backend (runtime.py). */
#define GUEST_FIGURES_BACKEND "_airlock_figures"

/* Fixed fd numbers inside a copy. */
#define COPY_CHANNEL_FD 3

/* What the template needs to know, sent as JSON after exec. */
typedef struct template_params {
        airlock_limits limits;
        bool has_input;
        /* The staged input on TEMPLATE_INPUT_FD is a detached mount tree
         * (open_tree) to attach, not a directory to bind by path. */
        bool input_tree;
        /* The host ids the guest maps to. A template started by root drops
         * to them before it makes the user namespace, so that everything
         * the guest owns is charged to them, not to root. */
        uid_t guest_uid;
        gid_t guest_gid;
        int cgroup; /* 0: no cgroups, 1: cgroup v1, 2: cgroup v2 */
        char **preloads;
        size_t n_preloads;
        /* --python-path folders: host paths, whether each came as a mount
         * fd, and the guest's sys.path entries made of them. */
        char **python_paths;
        bool *python_path_fd;
        size_t n_python_paths;
        char **sys_path;
        size_t n_sys_path;
        bool auto_figures; /* return matplotlib figures as PNG files */
} template_params;

/* Runs the template; never returns. */
_Noreturn void template_main(void);

/* --- host side (sandbox.c), shared with sessions (session.c) --- */

#include "cgroup.h"

typedef struct copy {
        pid_t pid; /* pid 1 of the copy's PID namespace; the host is its parent */
        int pidfd;
        int chan;  /* the guest channel */
        int out_r; /* stdout and stderr of the run */
        int err_r;
        int oomfd;   /* the OOM counter of the copy's own cgroup, or -1 */
        unsigned cg; /* the number of that cgroup (c<N>), 0 for none */
} copy;

int sbx_check_code(const char *code, size_t len, airlock_error *err);
int sbx_take_copy(airlock_sandbox *sb, copy **ret, airlock_error *err);
int sbx_copy_wait_ready(copy *c, int *ret_outdir, airlock_error *err);
int sbx_exec_run(airlock_sandbox *sb, copy *c, int outdir, int active_pidfd, const char *code,
                 size_t len, const airlock_run_options *opts, bool *ret_dead, bool *ret_delivered,
                 airlock_result **ret, airlock_error *err);
void sbx_copy_close(airlock_sandbox *sb, copy *c, bool kill_it);
/* Kills copy c and returns once it and every process it started are gone
 * (reaped), then closes it. */
void sbx_copy_end(airlock_sandbox *sb, copy *c);
void sbx_replenish(airlock_sandbox *sb);
const airlock_limits *sbx_limits(const airlock_sandbox *sb);
const airlock_config *sbx_config(const airlock_sandbox *sb);
/* The packages the guest can import (describe.c): the one kept, after
 * keeping inv (taken) when none was; inv NULL only looks. */
const json_t *sbx_inventory(airlock_sandbox *sb, json_t *inv);

/* --- embedded interpreter (guestpy.c), used inside the template only --- */

/* Initialises CPython, installs the runtime and imports the preloads. On
 * failure returns < 0 with a message in errbuf. */
int guest_init(const template_params *p, char *errbuf, size_t errlen);
/* Imports what typical code needs and runs a snippet, so that copies made
 * afterwards need not. */
int guest_warm_up(char *errbuf, size_t errlen);
void guest_before_fork(void);
/* Forks a process of the template's interpreter that fills GUEST_CACHE_DIR
 * (matplotlib's font list) and exits; returns its pid, or -errno. */
pid_t guest_start_cache_builder(void);
/* From now on, runs share one __main__ (a session). */
void guest_set_session(void);
void guest_after_fork_parent(void);
/* In a fresh copy: reinitialise the interpreter's per-process state and
 * reseed every secret. */
void guest_after_fork_child(int channel_fd);
/* Runs code (UTF-8) as __main__; returns the exit code and sets *ret_status
 * to "ok", "error" or "memory". last: the process's final run, which ends
 * after the code's non-daemon threads. */
int guest_run(const char *code, size_t len, bool last, const char **ret_status);

/* --- seccomp (seccomp.c) --- */

/* Builds the guest filter as a BPF program (malloc'd filter array). With
 * no_shared_memory (no cgroup counts a run's memory), kinds of memory that
 * no per-process limit counts are refused: shared anonymous mappings,
 * memfds and SysV shared memory. */
int seccomp_build_guest_filter(struct sock_fprog *ret, bool no_shared_memory, char *errbuf,
                               size_t errlen);

#endif
