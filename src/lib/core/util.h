/* The library's own helpers on top of the shared base (common/base.h):
 * the caller's watch of a run. Nothing here is part of the public API. */
#ifndef AIRLOCK_UTIL_H
#define AIRLOCK_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "airlock.h"
#include "base.h"

/* Reads a caller's growable struct (airlock.h: its first member is a size_t
 * holding the caller's sizeof) into the library's own, dst of dst_size
 * bytes, which holds its defaults already. A caller's struct smaller than
 * min_size (the first version's) is -EINVAL, naming what and the
 * initialiser to use; a larger one than the library knows is accepted when
 * the bytes it does not know are zero, else -E2BIG. dst->size is set to
 * dst_size. */
int al_struct_in(void *dst, size_t dst_size, const void *src, size_t min_size, const char *what,
                 const char *init, airlock_error *err);

/* The size of airlock_run_options in the first version of the growable
 * ABI: a caller's struct is at least this large. A field added later goes
 * at the end of the struct, and this stays. */
#define AIRLOCK_RUN_OPTIONS_SIZE_V1 (offsetof(airlock_run_options, output_arg) + sizeof(void *))

/* The caller's options of one run: *out from opts (NULL: the defaults),
 * as al_struct_in reads them, from AIRLOCK_RUN_OPTIONS_SIZE_V1 bytes up. */
int al_run_options_in(const airlock_run_options *opts, airlock_run_options *out,
                      airlock_error *err);

/* A close-on-exec memfd named name that may be sealed and executed: with
 * MFD_EXEC where the kernel knows it (6.3 and later warn without it, and
 * vm.memfd_noexec=1 would make it non-executable), without on older
 * kernels. Returns the fd, or -1 with errno set. */
int al_memfd_exec(const char *name);
/* Seals fd for good: no write, no resize, no new seals; what it holds can
 * no longer be changed by anyone. 0, or -1 with errno set. */
int al_memfd_seal(int fd);

/* Gives this process advice (madvise's) for iov[0..n), as advice only: a
 * range it fails for is left as it was, and the others still get it.
 * pidfd is this process's own: one process_madvise through it takes them
 * all, where a madvise each costs a system call each (a copy populates
 * some 140 ranges, most of them a page). Where the kernel refuses that
 * call for the advice (before Linux 6.13 it takes a few advices only), a
 * seccomp filter refuses it, or pidfd is -1, each range gets a madvise of
 * its own. */
void al_advise(int pidfd, const struct iovec *iov, size_t n, int advice);

/* A child with its standard streams on the parent's descriptors. */
typedef struct al_child {
        pid_t pid;
        int in_fd;  /* a socket: writing to a child that quit is EPIPE through
                     * MSG_NOSIGNAL, never a SIGPIPE to this process */
        int out_fd; /* pipes */
        int err_fd;
} al_child;

/* Starts a program (exe, or argv[0] searched on PATH when exe is NULL)
 * with argv and envp (NULL: this process's environment) in a process group
 * of its own, stdin a socket and stdout and stderr pipes to this process,
 * every other descriptor closed, no signal blocked and every signal but
 * SIGKILL and SIGSTOP at its default action, in the folder cwd_fd (>= 0) or
 * cwd (non-NULL), else in this process's. The parent's ends are
 * close-on-exec. Returns 0 with *ret filled, or a positive errno value
 * (posix_spawn's convention) with nothing left open. */
int al_spawn_piped(const char *exe, char *const argv[], char *const envp[], int cwd_fd,
                   const char *cwd, al_child *ret);

/* The caller's watch of one public call (airlock_run_options.on_watch):
 * made from the options by the outermost entry point and handed down by
 * pointer to every layer that may take long (the cache's acquire and
 * build, the sandbox's wait for a copy, the run), so that the hook fires
 * at most once per call however many layers there are. A NULL pointer is
 * a call without a watch. */
typedef struct al_watch {
        void (*fn)(void *arg); /* NULL: none, or fired already */
        void *arg;
        int fd;
} al_watch;

/* The watch opts asks for (opts may be NULL: none). */
al_watch al_watch_from(const airlock_run_options *opts);
/* Hands the caller's input on now, before a step that may take long, the
 * first time only: it clears w->fn. w may be NULL. */
void al_watch_fire(al_watch *w);
/* The fd to poll while the code runs, or -1 when there is none (left). */
int al_watch_fd(const al_watch *w);

#endif
