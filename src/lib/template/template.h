/* The process inside the isolation: the template (template.c and the
 * tpl_*.c files, which share template_internal.h), its embedded
 * interpreter (guest.c) and the guest's seccomp filter (seccomp.c). */
#ifndef AIRLOCK_TEMPLATE_H
#define AIRLOCK_TEMPLATE_H

#include <linux/filter.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "core/wire.h"

/* Runs the template; never returns. */
_Noreturn void template_main(void);

/* --- embedded interpreter (guest.c), used inside the template only ---
 *
 * guest.c is built into the guest module, a shared object linked with
 * libpython (guest_module.h), which the template alone loads: the functions
 * below are the module's, called through guest_load.c's forwarders of the
 * same names in the template (and defined by guest.c in the module). */

/* Loads the guest module (guest_load.c); before any other guest_* call.
 * On failure returns < 0 with a message in errbuf. */
int guest_load(char *errbuf, size_t errlen);

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
/* In a session: holds (true) or releases the host channel against the
 * guest's own requests, so that none is sent while no cell runs. */
void guest_channel_hold(bool hold);
void guest_after_fork_parent(void);
/* In a fresh copy: reinitialise the interpreter's per-process state and
 * reseed every secret. */
void guest_after_fork_child(int channel_fd);
/* In a session's snapshot, which runs no guest code itself (every active
 * process made from it calls guest_after_fork_child): releases what
 * guest_before_fork took, and writes as few pages as it can, each of which
 * would be a private copy for nothing. */
void guest_after_fork_snapshot(int channel_fd);
/* In a copy that is pid 1 (on) or becomes a session's pid 1 (off): catch,
 * or stop catching, the signals whose default ends a process, which pid 1
 * would otherwise ignore when sent from inside its namespace. */
void guest_init_signals(bool on);
/* In the template, once, after the interpreter and the preloads are set
 * up: installs the handlers guest_init_signals(true) would, while leaving
 * them off (a signal then takes its default action, as without them), so
 * that each copy only turns them on, with no system call. */
void guest_install_init_signals(void);
/* Before a single run's "end" frame: no frame may follow it. */
void guest_end_of_run(void);
/* Runs code (UTF-8) as __main__; returns the exit code and sets *ret_status
 * to "ok", "error" or "memory". last: the process's final run, which ends
 * after the code's non-daemon threads. */
int guest_run(const char *code, size_t len, bool last, const char **ret_status);
/* Before guest_run: the code's sys.argv, n UTF-8 strings. */
void guest_set_argv(const char *const *argv, size_t n);
/* Before guest_run: where the code's standard input comes from, the "run"
 * frame's "stdin_mode" (GUEST_STDIN_STREAM, GUEST_STDIN_PROMPT), or "" for
 * fd 0 (runtime._set_stdin). */
void guest_set_stdin(const char *mode);

/* --- seccomp (seccomp.c) --- */

/* Builds the guest filter as a BPF program (malloc'd filter array). With
 * no_shared_memory (no cgroup counts a run's memory), kinds of memory that
 * no per-process limit counts are refused: shared anonymous mappings,
 * memfds and SysV shared memory. */
int seccomp_build_guest_filter(struct sock_fprog *ret, bool no_shared_memory, bool allow_mount,
                               char *errbuf, size_t errlen);
/* With allow_mount (a late-input template), the guest filter lets mount
 * and move_mount through, and this small filter, which a copy loads once
 * its /input is attached, refuses them as the guest filter would have:
 * the two together are the guest filter. Small, so that loading it on
 * the critical path costs microseconds (the kernel prepares a cache of
 * every syscall's answer when a filter is loaded, in time that grows with
 * the filter). */
int seccomp_build_mount_filter(struct sock_fprog *ret, char *errbuf, size_t errlen);
/* Builds the filter that a copy adds when it becomes a session: shared
 * anonymous mappings, memfds and SysV shared memory are refused with
 * EPERM, since neither a rollback nor a fork could give each state its own
 * copy of them. */
int seccomp_build_session_filter(struct sock_fprog *ret, char *errbuf, size_t errlen);

/* The guest's Python opened PATH: a file of /proc that the copy writes
 * (tpl_proc.c) is written again first, so that it is fresh. */
void tpl_proc_opened(const char *path);

#endif
