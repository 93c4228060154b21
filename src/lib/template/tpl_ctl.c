/* The template's ends of its sockets to the host: failures, control bytes
 * and the end of every copy when the host is gone, on the control socket;
 * a tag with fds attached, on any socket; JSON replies on a copy's
 * channel. */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/channel.h"
#include "core/util.h"
#include "template/template_internal.h"

/* Reports a failure to the host ("E<errno> <feature>|<message>") and exits.
 * feature names the kernel feature or step, so `airlock run` can say what
 * is missing. */
_Noreturn void tpl_fail(const struct template_state *tpl, int err, const char *feature,
                        const char *fmt, ...)
{
        char msg[900], buf[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        int n =
            snprintf(buf, sizeof(buf), "%c%d %s|%s", CTL_ERROR, err < 0 ? -err : err, feature, msg);
        if (n > 0)
                (void)!send(tpl->ctl_fd, buf, (size_t)MIN(n, (int)sizeof(buf) - 1), MSG_NOSIGNAL);
        _exit(127);
}

void tpl_ctl_send(const struct template_state *tpl, char c)
{
        if (send(tpl->ctl_fd, &c, 1, MSG_NOSIGNAL) != 1)
                _exit(127);
}

char tpl_ctl_recv(const struct template_state *tpl)
{
        char c;
        ssize_t n;
        do
                n = recv(tpl->ctl_fd, &c, 1, 0);
        while (n < 0 && errno == EINTR);
        if (n != 1)
                tpl_host_gone(tpl);
        return c;
}

_Noreturn void tpl_host_gone(const struct template_state *tpl)
{
        for (size_t i = 0; i < tpl->n_live_copies; i++)
                syscall(SYS_pidfd_send_signal, tpl->live_copies[i], SIGKILL, NULL, 0);
        _exit(0);
}

/* Sends the tag, then text (may be NULL), with fds attached. */
int tpl_send_fds(int sock, char tag, const char *text, const int *fds, size_t n)
{
        size_t tlen = text ? strlen(text) : 0;
        struct iovec iov[2] = {{&tag, 1}, {(void *)text, tlen}};
        return al_send_fdsv(sock, iov, tlen ? 2 : 1, fds, n);
}

/* Sends one JSON frame, or ends this process if the host is gone. */
void tpl_reply(int chan, json_t *msg)
{
        if (!msg || channel_send(chan, msg) < 0)
                _exit(0);
        json_decref(msg);
}
