/* The caller's watch of a run (util.h). */
#include "core/util.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#ifndef SYS_process_madvise
#define SYS_process_madvise 440
#endif
/* The most iovecs one process_madvise takes (UIO_MAXIOV). */
#define ADVICE_MAX_IOV 1024

/* A caller's struct larger than this many bytes is garbage in its size
 * field, not a newer version: no struct of airlock.h comes near it. */
#define STRUCT_SIZE_MAX 4096

int al_struct_in(void *dst, size_t dst_size, const void *src, size_t min_size, const char *what,
                 const char *init, airlock_error *err)
{
        size_t n;
        memcpy(&n, src, sizeof(n));
        if (n < min_size || n > STRUCT_SIZE_MAX)
                return al_error(err, -EINVAL, NULL,
                                "%s: size is %zu, not a size this library knows (%zu): initialise "
                                "it with %s",
                                what, n, dst_size, init);
        /* A newer caller's fields that this library does not know may only
         * be at their zero defaults: anything else asks for behaviour that
         * this library cannot give. */
        for (size_t i = dst_size; i < n; i++)
                if (((const unsigned char *)src)[i])
                        return al_error(err, -E2BIG, NULL,
                                        "%s: sets a field at byte %zu that this library (%s) "
                                        "does not know",
                                        what, i, AIRLOCK_VERSION);
        memcpy(dst, src, n < dst_size ? n : dst_size);
        memcpy(dst, &dst_size, sizeof(dst_size));
        return 0;
}

int al_run_options_in(const airlock_run_options *opts, airlock_run_options *out, airlock_error *err)
{
        *out = (airlock_run_options)AIRLOCK_RUN_OPTIONS_INIT;
        if (!opts)
                return 0;
        int r = al_struct_in(out, sizeof(*out), opts, AIRLOCK_RUN_OPTIONS_SIZE_V1,
                             "airlock_run_options", "AIRLOCK_RUN_OPTIONS_INIT", err);
        if (r < 0)
                return r;
        /* The caps of argv and stdin: both travel in the run's frame to
         * the guest (CHANNEL_MAX_FRAME). */
        if (out->stdin_data && out->stdin_len > AIRLOCK_RUN_STDIN_MAX)
                return al_error(err, -E2BIG, NULL,
                                "the run's standard input is %zu bytes, over the cap of %u MiB "
                                "(AIRLOCK_RUN_STDIN_MAX)",
                                out->stdin_len, AIRLOCK_RUN_STDIN_MAX >> 20);
        if (out->stdin_mode < AIRLOCK_STDIN_NONE || out->stdin_mode > AIRLOCK_STDIN_PROMPT)
                return al_error(err, -EINVAL, NULL,
                                "airlock_run_options.stdin_mode is %d, not one of "
                                "AIRLOCK_STDIN_NONE, AIRLOCK_STDIN_STREAM, AIRLOCK_STDIN_PROMPT",
                                out->stdin_mode);
        if (out->stdin_mode != AIRLOCK_STDIN_NONE && (out->stdin_fd < 0 || out->stdin_data))
                return al_error(err, -EINVAL, NULL,
                                "airlock_run_options: a stdin_mode needs a stdin_fd (>= 0), and "
                                "excludes stdin_data");
        size_t n = 0, bytes = 0;
        for (; out->argv && out->argv[n]; n++) {
                size_t len = strlen(out->argv[n]);
                bytes += len + 1;
                if (n >= AIRLOCK_RUN_ARGV_MAX || bytes > AIRLOCK_RUN_ARGV_BYTES)
                        return al_error(err, -E2BIG, NULL,
                                        "the run's arguments are over the cap of %d arguments, "
                                        "%u KiB in all (AIRLOCK_RUN_ARGV_MAX, "
                                        "AIRLOCK_RUN_ARGV_BYTES)",
                                        AIRLOCK_RUN_ARGV_MAX, AIRLOCK_RUN_ARGV_BYTES >> 10);
                if (!al_utf8_valid(out->argv[n], len))
                        return al_error(err, -EILSEQ, NULL,
                                        "the run's argument %zu is not UTF-8 text", n);
        }
        return 0;
}

al_watch al_watch_from(const airlock_run_options *opts)
{
        if (!opts || !opts->on_watch)
                return (al_watch){.fd = -1};
        return (al_watch){.fn = opts->on_watch, .arg = opts->watch_arg, .fd = opts->watch_fd};
}

void al_watch_fire(al_watch *w)
{
        if (!w || !w->fn)
                return;
        void (*fn)(void *) = w->fn;
        w->fn = NULL;
        w->fd = -1;
        fn(w->arg);
}

int al_watch_fd(const al_watch *w)
{
        return w && w->fn ? w->fd : -1;
}

const char *airlock_version(void)
{
        return AIRLOCK_VERSION;
}

int al_spawn_piped(const char *exe, char *const argv[], char *const envp[], int cwd_fd,
                   const char *cwd, al_child *ret)
{
        extern char **environ;
        int in[2] = {-1, -1}, out[2] = {-1, -1}, errp[2] = {-1, -1};
        int r = 0;
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, in) < 0 ||
            pipe2(out, O_CLOEXEC) < 0 || pipe2(errp, O_CLOEXEC) < 0)
                r = errno;
        posix_spawn_file_actions_t fa;
        posix_spawnattr_t attr;
        bool fa_ok = false, attr_ok = false;
        if (!r)
                fa_ok = !(r = posix_spawn_file_actions_init(&fa));
        if (!r)
                attr_ok = !(r = posix_spawnattr_init(&attr));
        if (!r)
                r = posix_spawn_file_actions_adddup2(&fa, in[1], 0);
        if (!r)
                r = posix_spawn_file_actions_adddup2(&fa, out[1], 1);
        if (!r)
                r = posix_spawn_file_actions_adddup2(&fa, errp[1], 2);
        if (!r && cwd_fd >= 0)
                r = posix_spawn_file_actions_addfchdir_np(&fa, cwd_fd);
        else if (!r && cwd)
                r = posix_spawn_file_actions_addchdir_np(&fa, cwd);
        if (!r)
                r = posix_spawn_file_actions_addclosefrom_np(&fa, 3);
        if (!r) {
                sigset_t none, all;
                sigemptyset(&none);
                sigfillset(&all);
                sigdelset(&all, SIGKILL);
                sigdelset(&all, SIGSTOP);
                r = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                                        POSIX_SPAWN_SETSIGDEF);
                if (!r)
                        r = posix_spawnattr_setpgroup(&attr, 0);
                if (!r)
                        r = posix_spawnattr_setsigmask(&attr, &none);
                if (!r)
                        r = posix_spawnattr_setsigdefault(&attr, &all);
        }
        pid_t pid = 0;
        if (!r)
                r = exe ? posix_spawn(&pid, exe, &fa, &attr, argv, envp ? envp : environ)
                        : posix_spawnp(&pid, argv[0], &fa, &attr, argv, envp ? envp : environ);
        if (fa_ok)
                posix_spawn_file_actions_destroy(&fa);
        if (attr_ok)
                posix_spawnattr_destroy(&attr);
        close_fd(&in[1]);
        close_fd(&out[1]);
        close_fd(&errp[1]);
        if (r) {
                close_fd(&in[0]);
                close_fd(&out[0]);
                close_fd(&errp[0]);
                return r;
        }
        *ret = (al_child){pid, in[0], out[0], errp[0]};
        return 0;
}

#ifndef MFD_EXEC
#define MFD_EXEC 0x0010U
#endif

int al_memfd_exec(const char *name)
{
        int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_EXEC);
        if (fd < 0 && errno == EINVAL)
                fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
        return fd;
}

/* F_SEAL_WRITE fails with EBUSY while a page of the file has a reference
 * beyond its page cache's (memfd_wait_for_pins), after the kernel waited
 * for it a while. Nothing of airlock's maps these files, so such a
 * reference is a passing one of the kernel's own (a loaded machine's CI
 * run once failed to seal the program's freshly written copy so), and the
 * seal is tried again, a few times. A writable shared mapping would make
 * each try fail at once. */
#define MEMFD_SEAL_TRIES 5

int al_memfd_seal(int fd)
{
        for (int i = 1;; i++) {
                int r = fcntl(fd, F_ADD_SEALS,
                              F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
                if (r == 0 || errno != EBUSY || i == MEMFD_SEAL_TRIES)
                        return r;
        }
}

/* The status's names, which the result JSON and the run's span use
 * (surface/result.c, sandbox/run_trace.c). */
static const char *const status_names[] = {
    [AIRLOCK_STATUS_OK] = "ok",           [AIRLOCK_STATUS_ERROR] = "error",
    [AIRLOCK_STATUS_TIMEOUT] = "timeout", [AIRLOCK_STATUS_MEMORY] = "memory",
    [AIRLOCK_STATUS_KILLED] = "killed",
};

const char *airlock_status_name(airlock_status s)
{
        if ((size_t)s < ARRAY_SIZE(status_names) && status_names[s])
                return status_names[s];
        return "error";
}

void al_advise(int pidfd, const struct iovec *iov, size_t n, int advice)
{
        size_t i = 0;
        while (pidfd >= 0 && i < n) {
                size_t end = i + MIN(n - i, (size_t)ADVICE_MAX_IOV);
                long k = syscall(SYS_process_madvise, pidfd, iov + i, end - i, advice, 0);
                if (k < 0)
                        break;
                /* The iovecs it went through; the one it stopped at gets
                 * a madvise of its own, and the rest go on after it. */
                for (; i < end && (size_t)k >= iov[i].iov_len; i++)
                        k -= (long)iov[i].iov_len;
                if (i < end) {
                        (void)madvise(iov[i].iov_base, iov[i].iov_len, advice);
                        i++;
                }
        }
        for (; i < n; i++)
                (void)madvise(iov[i].iov_base, iov[i].iov_len, advice);
}
