/* no_openat2 PROGRAM [ARGS...]: runs PROGRAM with openat2 failing ENOSYS, as
 * on a kernel older than 5.6, so that the file transfer tests exercise the
 * component-by-component O_NOFOLLOW fallback (after crun's tests/no_openat2).
 * Everything else is allowed; the filter is inherited across execvp. */
#include <errno.h>
#include <seccomp.h>
#include <stdio.h>
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
        int r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS),
                                 seccomp_syscall_resolve_name("openat2"), 0);
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
