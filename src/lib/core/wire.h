/* The host <-> template <-> copy protocol, the one header for it: the fds
 * the template is started with, the control bytes on its sockets, the bytes
 * a copy sends with fds attached, and the parameters the host sends after
 * exec; the names of the JSON frames on a copy's channel (ops, reply keys,
 * statuses, error kinds and the errno -> guest exception table) are in
 * core/wire_table.h, which the guest runtime's Python constants are
 * generated from. Shared by the host side (sandbox/, host/) and the process
 * inside the isolation (template/). */
#ifndef AIRLOCK_WIRE_H
#define AIRLOCK_WIRE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "airlock.h"
#include "core/wire_table.h"

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
 * memory, the pids and, where it is mounted, the cpuacct hierarchy of
 * cgroup v1, or the one v2 directory), in which the template makes one
 * child cgroup per copy. Absent without cgroups. */
#define TEMPLATE_CG_FD  6
#define TEMPLATE_CG2_FD 7
#define TEMPLATE_CG3_FD 8
#define CG_HIERARCHIES  3 /* at most: v1 memory, pids, cpuacct */
/* The read-only mounts of the --python-path folders, when the host could
 * make them (as root), on fds TEMPLATE_PYPATH_FD + N. */
#define TEMPLATE_PYPATH_FD 9

/* Control messages on the template's SOCK_SEQPACKET socket. */
enum {
        CTL_USERNS = 'U', /* template -> host: user namespace made, write the id maps */
        CTL_GO = 'G',     /* host -> template: maps written */
        CTL_READY = 'R',  /* template -> host: interpreter initialised */
        CTL_ERROR = 'E',  /* template -> host: "E<errno> <feature>|<message>" */
        CTL_SPAWN = 'S',  /* host -> template: start a copy */
        /* host -> template: start a copy without its warming (runs
         * come faster than copies are prepared) */
        CTL_SPAWN_BURST = 'B',
        CTL_NUDGE = 'N', /* host -> template: a copy is awaited, serve the request socket */
        /* template -> host: a copy's pid, with [channel, pidfd, stdout, stderr]
         * and, with per-copy cgroups, the OOM counter of the copy's cgroup */
        CTL_COPY = 'C',
        /* host -> template, on the request socket: the host is done with a
         * copy's cgroup, whose number follows (4 bytes, little-endian) */
        REQ_DONE = 'D',
};

/* First byte a copy sends on its channel: ready with the /output fd attached,
 * or an error followed by a message; and, in a session, the byte with which
 * a newly active process sends a pidfd of itself before its frame. */
enum {
        COPY_READY = 'R',
        COPY_ERROR = 'E',
        COPY_ACTIVE = 'P',
        /* in a session, the byte with which a snapshot's pidfd comes before
         * the reply to "snapshot" */
        COPY_SNAPSHOT = 'S',
        /* host -> copy, after a "fork" frame: the byte with which the new
         * handle's channel, stdout and stderr come */
        COPY_FORK = 'F',
        /* host -> copy, after an "input" frame, with a late-input template
         * (template_params.late_input): the byte with which the detached
         * tree of the run's staged input comes (no fd: an empty /input);
         * copy -> host, the byte of its answer, with a writable /input's
         * upper dir and lower layer attached, or COPY_ERROR and a message */
        COPY_INPUT = 'I',
};

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
        int cgroup;      /* 0: no cgroups, 1: cgroup v1, 2: cgroup v2 */
        bool cgroup_cpu; /* v1: a cpuacct hierarchy too (TEMPLATE_CG3_FD) */
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
        /* /input is a private writable overlay per copy, whose upper dir
         * (on a tmpfs capped like /output) goes back to the host at
         * COPY_READY (airlock_config_set_input_writable). */
        bool input_writable;
        /* One template, many workspaces: the template's /input is empty,
         * and each copy gets its run's staged input when the host hands it
         * out (an "input" frame, then COPY_INPUT with a detached tree),
         * before it drops its privileges (tpl_copy.c). */
        bool late_input;
        /* The sandbox serves one run (airlock_sandbox_new_oneshot): nothing
         * is prepared beside the first copy for copies that may never
         * come (template.c). */
        bool single_run;
} template_params;

/* Room for the template and a pre-started copy on top of a run's limits,
 * and for the copies that have ended and are still being torn down (at
 * idle priority, a preloaded numpy's interpreter takes milliseconds): with
 * a room of 4, --pids 1 --preload numpy failed to start a copy (EAGAIN) in
 * about half the runs of test_blas_in_preloaded_copies. A run's own tasks
 * stay bounded by RLIMIT_NPROC (template/template.c, copy_main). */
#define CG_MEMORY_SLACK (64ull << 20)
#define CG_PIDS_SLACK   8

#endif
