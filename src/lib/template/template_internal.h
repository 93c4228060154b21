/* What the files of the template share, and nothing the rest of the library
 * needs (that is template.h): the template's state, one struct.
 *
 * The template is a single-threaded process that forks copies. Its state
 * is one static instance of struct template_state, defined inside
 * template_main, which hands a pointer to it down to every function that
 * reads or changes it, or that may end the template with fail() (which
 * reports on the control socket held in it). So each signature says what a
 * step depends on, and a function without that pointer touches none of it.
 * A copy is a fork of the template: it holds its own copy of the instance,
 * as of the fork; what it changes there (ctl_fd, the session's reap pipe)
 * the template never sees. */
#ifndef AIRLOCK_TEMPLATE_INTERNAL_H
#define AIRLOCK_TEMPLATE_INTERNAL_H

#include <linux/filter.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/wire.h"

/* The most copies the template tracks at once (live_copies). */
#define MAX_LIVE_COPIES 4096
/* Caps: ranges kept, and pages in them (64 MiB), whatever the probe saw;
 * and the address space it reads the page map of: mappings over 1 GiB
 * (AddressSanitizer's shadow, reserved arenas) are skipped, and at most
 * 4 GiB in all is read. */
#define PREFAULT_MAX_RANGES  1024
#define PREFAULT_MAX_PAGES   16384
#define PREFAULT_MAX_MAPPING (1ull << 30)
#define PREFAULT_MAX_SCANNED (1ull << 32)
/* Copies' cgroups that the host is done with but that could not be
 * removed yet (the copy was still exiting), retried at every wake-up: a
 * copy's exit is one. Past the cap, the host removes what is left when it
 * closes the sandbox. */
#define MAX_PENDING_RM 256

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
         * copy_main sets it to -1 in every copy, where that fd number is
         * the copy's channel, so that nothing meant for the host's control
         * socket can ever be written there. */
        int ctl_fd;
        /* Whether this kernel's Landlock can scope abstract Unix sockets
         * and signals (ABI 6, Linux 6.12): probe_landlock, once the
         * namespaces are made. Read by spawn_copy and by every copy. */
        bool landlock_scopes;
        /* The guest's seccomp filter, built by template_main and loaded by
         * every copy. */
        struct sock_fprog guest_filter;
        /* The mount options of a copy's /tmp and /output tmpfs, from the
         * limits: template_main; read by every copy. */
        char tmp_opts[128], out_opts[128];

        /* --- changed by the template between copies; a copy sees them
         * as they were when it was forked --- */

        /* pidfds of the copies this template started that may still live:
         * added by spawn_copy, dropped by forget_exited_copies. The copies
         * are the host's children, but if the host dies (even by SIGKILL)
         * the template sees its control socket close and ends them
         * (host_gone), so no run outlives its host. */
        int live_copies[MAX_LIVE_COPIES];
        size_t n_live_copies;
        /* A REQ_DONE record being read from the request socket, which may
         * span two reads (requested_copies): the bytes of its number read
         * so far (-1: none), and the number. */
        int req_done_bytes;
        uint32_t req_done_seq;
        /* Whether the interpreter has been warmed up: template_main, after
         * the first copy. Copies forked before do not pre-warm. */
        bool warmed_up;
        /* The cache builder (guest_start_cache_builder): 0 until it is
         * started, then its pid (or < 0); template_main. cache_sealed:
         * GUEST_CACHE_DIR is read-only in the template, set by
         * settle_cache once the builder has exited; a copy made before
         * makes its own view read-only (copy_main). */
        pid_t cache_builder;
        bool cache_sealed;
        /* The pages a copy will touch (learn_prefault, after the second
         * copy); every later copy populates them first
         * (populate_learned). */
        prefault_range prefault[PREFAULT_MAX_RANGES];
        size_t n_prefault;
        bool prefault_learned;
        /* The number of the last copy's cgroup c<N> (copy_cgroup_make),
         * and the cgroups the host is done with that could not be removed
         * yet (copy_cgroup_done, copy_cgroups_retry). */
        unsigned copy_cgroup_seq;
        uint32_t pending_rm[MAX_PENDING_RM];
        size_t n_pending_rm;

        /* --- per copy: set in a copy, never in the template --- */

        /* The session's reap pipe, made when the host opens a session and
         * inherited by every process of it: pid 1 writes a byte into it
         * (reap_notify, pid 1's only) each time it has reaped something,
         * so that a process waiting for others to be gone can sleep until
         * the set of processes changed (reap_wait, see wait_until_gone). A
         * guest can only write false wake-ups into it, or close it, which
         * makes its own session's restore fail rather than wait. -1 outside
         * a session. */
        int reap_wait;
        int reap_notify;
};

#endif
