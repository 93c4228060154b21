/* The stop and reload signals of the long-running commands (mcp, serve),
 * turned into bytes on a pipe that their main loop polls beside its other
 * inputs, so that nothing but a write(2) runs in the handler. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <unistd.h>

#include "cli.h"

static int sig_pipe[2] = {-1, -1};
static pid_t owner_pid;

static void on_signal(int sig)
{
        int saved = errno;
        /* A child between fork and exec still has this handler: only the
         * process that installed it may act on it. */
        if (getpid() == owner_pid && sig_pipe[1] >= 0) {
                char c = (char)sig;
                ssize_t n = write(sig_pipe[1], &c, 1);
                (void)n; /* a full pipe already holds a request */
        }
        errno = saved;
}

int cli_signal_pipe(bool restart)
{
        owner_pid = getpid();
        if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
                return -errno;
        struct sigaction sa = {.sa_handler = on_signal, .sa_flags = restart ? SA_RESTART : 0};
        sigemptyset(&sa.sa_mask);
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGHUP, &sa, NULL);
        return sig_pipe[0];
}
