/* deny_syscall NAME[,NAME...] PROGRAM [ARGS...]: runs PROGRAM with the named
 * system calls failing with EPERM, inherited across execve and fork, as on a
 * host whose policy forbids them (user namespaces off, mounts denied). The
 * black-box tests use it to check that airlock names the missing feature. */
#include <errno.h>
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
        if (argc < 3) {
                fprintf(stderr, "usage: deny_syscall NAME[,NAME...] PROGRAM [ARGS...]\n");
                return 2;
        }
        scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
        if (!ctx)
                return 1;
        char *names = strdup(argv[1]);
        char *save = NULL;
        for (char *n = strtok_r(names, ",", &save); n; n = strtok_r(NULL, ",", &save)) {
                int nr = seccomp_syscall_resolve_name(n);
                if (nr == __NR_SCMP_ERROR || seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0)) {
                        fprintf(stderr, "deny_syscall: cannot deny %s\n", n);
                        return 1;
                }
        }
        free(names);
        if (seccomp_load(ctx) < 0) {
                fprintf(stderr, "deny_syscall: cannot install the filter\n");
                return 1;
        }
        seccomp_release(ctx);
        execvp(argv[2], argv + 2);
        fprintf(stderr, "deny_syscall: cannot run %s: %s\n", argv[2], strerror(errno));
        return 127;
}
