/* no_openat2 PROGRAM [ARGS...]: runs PROGRAM with openat2 failing ENOSYS, as
 * on a kernel older than 5.6, so that the file transfer tests exercise the
 * component-by-component O_NOFOLLOW fallback (after crun's tests/no_openat2).
 * Everything else is allowed; the filter is inherited across execvp.
 * NO_OPENAT2_ERRNO=EPERM makes it fail EPERM instead. */
#include <errno.h>
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

int main(int argc, char **argv)
{
        if (argc < 2) {
                fprintf(stderr, "usage: no_openat2 PROGRAM [ARGS...]\n");
                return 2;
        }
        scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
        if (!ctx) {
                fprintf(stderr, "no_openat2: seccomp_init failed\n");
                return 1;
        }
        /* NO_OPENAT2_ERRNO=EPERM imitates container profiles that deny
         * unknown system calls with EPERM instead. */
        const char *e = getenv("NO_OPENAT2_ERRNO");
        int code = e && strcmp(e, "EPERM") == 0 ? EPERM : ENOSYS;
        int r =
            seccomp_rule_add(ctx, SCMP_ACT_ERRNO(code), seccomp_syscall_resolve_name("openat2"), 0);
        if (r == 0)
                r = seccomp_load(ctx);
        seccomp_release(ctx);
        if (r < 0) {
                fprintf(stderr, "no_openat2: cannot install the filter: %s\n", strerror(-r));
                return 1;
        }
        execvp(argv[1], argv + 1);
        fprintf(stderr, "no_openat2: cannot run %s: %s\n", argv[1], strerror(errno));
        return 127;
}
